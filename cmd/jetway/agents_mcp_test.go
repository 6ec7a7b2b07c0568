package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAgents_put_validates_MCP_servers_through_the_API_and_stores_good_ones(t *testing.T) {
	url := agentsDispatcher(t)
	dir := t.TempDir()
	as := func(args ...string) []string { return append(args, "--url", url, "--token", "jw_admin") }
	for _, c := range []struct{ body, field string }{
		{"mcp:\n  - name: files\n    url: ftp://files.example.com/\n", "mcp[0].url"},
		{"mcp:\n  - name: files\n    transport: stdio\n", "mcp[0].command"},
		{"mcp:\n  - {name: a, command: x}\n  - {name: a, url: 'https://x.example.com/mcp'}\n", "mcp[1].name"},
		{"mcp:\n  - name: web\n    url: https://x.example.com/mcp\n    headers: {Authorization: 'Bearer sk-123'}\n", "mcp[0].headers.Authorization"},
		{"mcp:\n  - name: files\n    command: x\n    cwd: /etc\n", "cwd"},
	} {
		file := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(file, []byte("instructions: x\n"+c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := runCLI(t, as("agents", "put", "-f", file, "tooled")...)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("put of\n%s= %v\n%s\nwant refused naming %s", c.body, err, out, c.field)
		}
	}
	if out, err := runCLI(t, as("agents", "get", "tooled")...); err == nil {
		t.Fatalf("a refused profile was stored:\n%s", out)
	}
	good := filepath.Join(dir, "good.yaml")
	body := "instructions: x\ntools:\n  allow: ['mcp__files__*']\nmcp:\n  - name: files\n    command: mcp-files\n    args: [--root, .]\n    secrets: {GH_TOKEN: github-token}\n  - name: web\n    url: https://mcp.example.com/mcp\n    headers: {Authorization: web-auth}\n    timeout: 30s\n"
	if err := os.WriteFile(good, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, as("agents", "put", "-f", good, "tooled")...); err != nil {
		t.Fatalf("put: %v\n%s", err, out)
	}
	out, err := runCLI(t, as("agents", "get", "tooled")...)
	if err != nil || !strings.Contains(out, `"command": "mcp-files"`) || !strings.Contains(out, `"GH_TOKEN": "github-token"`) || !strings.Contains(out, `"url": "https://mcp.example.com/mcp"`) {
		t.Fatalf("get: %v\n%s", err, out)
	}
}
