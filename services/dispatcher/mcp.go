package dispatcher

import (
	"cmp"
	"context"

	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	"jetway/pkg/control/sessionrec"
	api "jetway/pkg/dispatcherapi"
)

// mcpStates is how each MCP server of the session's agent profile is: the
// session's jobs worker runs its stdio servers and keeps what the runner
// last reported of its http servers. A server no run has used is "idle";
// a worker that does not answer leaves each server "unknown" with the
// reason. Nil when the profile names no server.
func (d *sessionsCore) mcpStates(ctx context.Context, tenant, session string, rec sessionrec.Record) []api.MCPServerState {
	kv, err := d.bucket(ctx, bus.BucketAgents)
	if err != nil || kv == nil {
		return nil
	}
	prof, err := agents.Get(ctx, kv, tenant, cmp.Or(rec.Agent, agents.DefaultName))
	if err != nil || len(prof.MCP) == 0 {
		return nil
	}
	known := map[string]api.MCPServerState{}
	var askErr string
	if jc, err := d.jobsClient(); err != nil {
		askErr = err.Error()
	} else {
		ctx, cancel := context.WithTimeout(ctx, jobsAnswerWithin)
		defer cancel()
		states, err := jc.MCPState(ctx, tenant, session)
		if err != nil {
			askErr = err.Error()
		}
		for _, s := range states {
			known[s.Transport+"\x00"+s.Server] = api.MCPServerState{Server: s.Server, Transport: s.Transport, State: s.State, Error: s.Error}
		}
	}
	out := make([]api.MCPServerState, 0, len(prof.MCP))
	for _, spec := range prof.MCP {
		tr := agents.MCPTransport(spec)
		st, ok := known[tr+"\x00"+spec.Name]
		switch {
		case ok:
		case askErr != "":
			st = api.MCPServerState{Server: spec.Name, Transport: tr, State: "unknown", Error: "the session's jobs worker did not say: " + askErr}
		default:
			st = api.MCPServerState{Server: spec.Name, Transport: tr, State: "idle"}
		}
		out = append(out, st)
	}
	return out
}
