package runner

import (
	"context"
	"strings"

	"jetway/pkg/agent/tool"
	"jetway/pkg/control/agents"
)

// openMCP connects the MCP servers of the run's profile through
// Config.MCP and keeps their tools in reg as the servers list them; the
// returned func ends the connections and says which servers were not
// running at the end. A runner without the hook, a
// profile without servers or a run without a registry has nothing to
// open.
func (r *Runner) openMCP(ctx context.Context, ref SessionRef, prof agents.Profile, reg *tool.Registry) func() []agents.MCPServerState {
	if r.cfg.MCP == nil || len(prof.MCP) == 0 || reg == nil {
		return func() []agents.MCPServerState { return nil }
	}
	return r.cfg.MCP(ctx, ref, prof, func(server string, tools []tool.Tool) {
		offerServerTools(reg, prof, server, tools)
	})
}

// offerServerTools replaces server's tools in reg with those of tools the
// profile allows: a tool the server no longer lists is gone from the
// next model call, and one it added is there.
func offerServerTools(reg *tool.Registry, prof agents.Profile, server string, tools []tool.Tool) {
	prefix := agents.MCPToolName(server, "")
	for _, name := range reg.Names() {
		if strings.HasPrefix(name, prefix) {
			reg.Unregister(name)
		}
	}
	for _, t := range allowedTools(tools, prof) {
		_ = reg.Register(t) // a name the registry refuses is left out
	}
}
