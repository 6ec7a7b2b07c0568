package jobs

import (
	"slices"
	"testing"
)

func TestAn_npx_command_names_the_package_it_runs_and_anything_else_runs_as_written(t *testing.T) {
	for _, c := range []struct {
		command   string
		args      []string
		pkg, bin  string
		rest      []string
		installed bool
	}{
		{"npx", []string{"-y", "@modelcontextprotocol/server-everything"}, "@modelcontextprotocol/server-everything", "", nil, true},
		{"/usr/bin/npx", []string{"--yes", "@modelcontextprotocol/server-filesystem@2026.8.31", "/data"}, "@modelcontextprotocol/server-filesystem@2026.8.31", "", []string{"/data"}, true},
		{"npx", []string{"-y", "--package=@acme/tools@1.2.3", "acme-mcp", "--stdio"}, "@acme/tools@1.2.3", "acme-mcp", []string{"--stdio"}, true},
		{"npx", []string{"-p", "mcp-kit", "kit"}, "mcp-kit", "kit", []string{}, true},
		{"npx", []string{"--registry", "https://example.com", "mcp-kit"}, "", "", nil, false}, // an option it does not know
		{"npx", []string{"-y", "github:acme/kit"}, "", "", nil, false},                        // not a registry package
		{"npx", []string{"-y", "../kit"}, "", "", nil, false},
		{"npx", []string{"-y"}, "", "", nil, false},
		{"node", []string{"server.js"}, "", "", nil, false},
	} {
		pkg, bin, rest, ok := npxPackage(c.command, c.args)
		if ok != c.installed || (ok && (pkg != c.pkg || bin != c.bin || !slices.Equal(rest, c.rest))) {
			t.Errorf("%s %v: %q %q %v %v, want %q %q %v %v", c.command, c.args, pkg, bin, rest, ok, c.pkg, c.bin, c.rest, c.installed)
		}
	}
}
