package agents_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"jetway/pkg/control/agents"
	"jetway/pkg/dispatcherapi"
)

func TestA_profile_with_bad_MCP_servers_is_refused_naming_the_field_and_nothing_is_stored(t *testing.T) {
	kv := bucket(t)
	ctx := context.Background()
	stdio := dispatcherapi.AgentMCPServer{Name: "files", Command: "mcp-files"}
	web := dispatcherapi.AgentMCPServer{Name: "web", URL: "https://mcp.example.com/mcp"}
	with := func(servers ...dispatcherapi.AgentMCPServer) agents.Profile {
		return agents.Profile{Instructions: "x", MCP: servers}
	}
	edit := func(s dispatcherapi.AgentMCPServer, f func(*dispatcherapi.AgentMCPServer)) dispatcherapi.AgentMCPServer {
		f(&s)
		return s
	}
	for _, c := range []struct {
		field string
		p     agents.Profile
	}{
		{"mcp[0].name", with(edit(stdio, func(s *dispatcherapi.AgentMCPServer) { s.Name = "my server" }))},
		{"mcp[0].name", with(edit(stdio, func(s *dispatcherapi.AgentMCPServer) { s.Name = "a__b" }))},
		{"mcp[0].name", with(edit(stdio, func(s *dispatcherapi.AgentMCPServer) { s.Name = "" }))},
		{"mcp[1].name", with(stdio, edit(web, func(s *dispatcherapi.AgentMCPServer) { s.Name = "files" }))},
		{"mcp[0].command", with(edit(stdio, func(s *dispatcherapi.AgentMCPServer) { s.Command = " " }))},
		{"mcp[0].command", with(dispatcherapi.AgentMCPServer{Name: "x", Transport: "stdio"})},
		{"mcp[0].url", with(dispatcherapi.AgentMCPServer{Name: "x", Transport: "http"})},
		{"mcp[0].url", with(edit(web, func(s *dispatcherapi.AgentMCPServer) { s.URL = "ftp://mcp.example.com/" }))},
		{"mcp[0].url", with(edit(web, func(s *dispatcherapi.AgentMCPServer) { s.URL = "https://user:pw@mcp.example.com/" }))},
		{"mcp[0].url", with(edit(web, func(s *dispatcherapi.AgentMCPServer) { s.URL = "https:///mcp" }))},
		{"mcp[0].transport", with(edit(web, func(s *dispatcherapi.AgentMCPServer) { s.Transport = "sse" }))},
		{"mcp[0].env.NATS_TOKEN", with(edit(stdio, func(s *dispatcherapi.AgentMCPServer) { s.Env = map[string]string{"NATS_TOKEN": "x"} }))},
		{"mcp[0].env.JETWAY_NATS", with(edit(stdio, func(s *dispatcherapi.AgentMCPServer) { s.Env = map[string]string{"JETWAY_NATS": "x"} }))},
		{"mcp[0].env.PATH", with(edit(stdio, func(s *dispatcherapi.AgentMCPServer) { s.Env = map[string]string{"PATH": "/tmp"} }))},
		{"mcp[0].secrets.GH_TOKEN", with(edit(stdio, func(s *dispatcherapi.AgentMCPServer) { s.Secrets = map[string]string{"GH_TOKEN": "ghp_literal token"} }))},
		{"mcp[0].headers.Authorization", with(edit(web, func(s *dispatcherapi.AgentMCPServer) {
			s.Headers = map[string]string{"Authorization": "Bearer abc"}
		}))},
		{"mcp[0].command", with(edit(web, func(s *dispatcherapi.AgentMCPServer) { s.Command = "x" }))},
		{"mcp[0].timeout", with(edit(web, func(s *dispatcherapi.AgentMCPServer) { s.Timeout = "forever" }))},
		{"mcp[0].env.GH_TOKEN", with(edit(stdio, func(s *dispatcherapi.AgentMCPServer) {
			s.Env = map[string]string{"GH_TOKEN": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}
		}))},
		{"mcp[0].args[1]", with(edit(stdio, func(s *dispatcherapi.AgentMCPServer) {
			s.Args = []string{"--token", "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789abcdefghij"}
		}))},
		{"mcp[0].url", with(edit(web, func(s *dispatcherapi.AgentMCPServer) {
			s.URL = "https://mcp.example.com/mcp?key=ghp_abcdefghijklmnopqrstuvwxyz0123456789"
		}))},
	} {
		_, err := agents.Put(ctx, kv, "acme", "tooled", c.p)
		var fe *agents.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: err %v, want a field error naming %s", c.p.MCP, err, c.field)
		}
	}
	if _, err := agents.Get(ctx, kv, "acme", "tooled"); !errors.Is(err, agents.ErrNotFound) {
		t.Fatalf("a refused profile was stored: %v", err)
	}
	good := with(
		dispatcherapi.AgentMCPServer{Name: "files", Command: "mcp-files", Args: []string{"--root", "."},
			Env: map[string]string{"LOG_LEVEL": "debug"}, Secrets: map[string]string{"GH_TOKEN": "github-token"}, Timeout: "30s"},
		dispatcherapi.AgentMCPServer{Name: "web", URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "web-auth"}},
	)
	good.Tools = dispatcherapi.AgentTools{Allow: []string{"mcp__files__*", "mcp__web__search"}, Deny: []string{"mcp__files__delete"}}
	p, err := agents.Put(ctx, kv, "acme", "tooled", good)
	if err != nil {
		t.Fatalf("a good profile with MCP servers refused: %v", err)
	}
	back, err := agents.Get(ctx, kv, "acme", "tooled")
	if err != nil || len(back.MCP) != 2 || back.MCP[0].Secrets["GH_TOKEN"] != "github-token" || back.Version != p.Version {
		t.Fatalf("stored profile read back as %+v, %v", back.MCP, err)
	}
}
