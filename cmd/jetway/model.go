package main

import (
	"context"
	"os"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"jetway/pkg/agent/tool"
	"jetway/pkg/control/agents"
	"jetway/pkg/dispatcherapi"
	"jetway/pkg/handover"
	"jetway/pkg/llm"
	"jetway/pkg/llm/providers"
	jobsclient "jetway/services/jobs/client"
	"jetway/services/jobs/jobtools"
	"jetway/services/mcptools"
	"jetway/services/runner"
)

// modelFromEnv picks the model provider from the environment:
// ANTHROPIC_API_KEY, else OPENAI_API_KEY/OPENAI_BASE_URL, else the
// deterministic demo script (announced as such).
func modelFromEnv() (llm.Provider, error) { return providers.FromEnv() }

// modelFor builds the model an agent profile names from the runner's
// environment: its endpoint's JETWAY_ENDPOINT_<NAME>_* variables, else the
// provider's usual ones (docs/PROFILES.md).
func modelFor(m dispatcherapi.AgentModel) (llm.Provider, error) {
	return providers.ForModel(providers.Model{Provider: m.Provider, Name: m.Name, Endpoint: m.Endpoint}, os.Getenv)
}

// servedModels are the models modelFor can build from this environment,
// as the runner advertises them in its heartbeat (agents.ServingKey).
func servedModels() []string {
	var keys []string
	for _, m := range providers.Served(os.Environ(), os.Getenv) {
		keys = append(keys, agents.ServingKey(agents.Model{Provider: m.Provider, Endpoint: m.Endpoint}))
	}
	slices.Sort(keys)
	return keys
}

// runnerTools are the tools a run gets: the shell, job and file tools of the
// jobs service, executed on the session's jobs worker.
func runnerTools(nc *nats.Conn) func(runner.SessionRef) []tool.Tool {
	jc, err := jobsclient.New(jobsclient.Config{NC: nc})
	if err != nil {
		return nil
	}
	return func(s runner.SessionRef) []tool.Tool {
		return jobtools.Tools(jc, s.Tenant, s.Session, s.Run, s.Network, s.Lineage...)
	}
}

// runnerInstructions reads a profile's workspace instruction files
// (AGENTS.md) through the session's jobs worker at a run's start.
func runnerInstructions(nc *nats.Conn) func(context.Context, runner.SessionRef, string, int) (runner.Instructions, error) {
	jc, err := jobsclient.New(jobsclient.Config{NC: nc})
	if err != nil {
		return nil
	}
	return func(ctx context.Context, s runner.SessionRef, path string, max int) (runner.Instructions, error) {
		f, err := jobtools.ReadInstructions(ctx, jc, s.Tenant, s.Session, path, max)
		return runner.Instructions{Text: f.Text, Found: f.Found, Cut: f.Cut}, err
	}
}

// runnerChildState asks the session's jobs worker whether an interrupted
// run's foreground commands are gone. A worker that cannot be reached is
// reported as such (the error): the recovery waits for it, within a bound,
// rather than risk a second copy of the work or refuse for a slow link. A
// worker that answered with an error leaves the state unknown.
func runnerChildState(nc *nats.Conn) func(context.Context, runner.SessionRef) (handover.ChildState, error) {
	jc, err := jobsclient.New(jobsclient.Config{NC: nc})
	if err != nil {
		return nil
	}
	return func(ctx context.Context, s runner.SessionRef) (handover.ChildState, error) {
		st, err := jc.ChildState(ctx, s.Tenant, s.Session, s.Run)
		if err != nil && jobsclient.Unreachable(err) {
			return handover.ChildUnknown, err
		}
		if err != nil {
			return handover.ChildUnknown, nil
		}
		return st, nil
	}
}

// runnerKillRun kills an interrupted run's foreground commands on the
// session's jobs worker; its background jobs go on.
func runnerKillRun(nc *nats.Conn) func(context.Context, runner.SessionRef) error {
	jc, err := jobsclient.New(jobsclient.Config{NC: nc})
	if err != nil {
		return nil
	}
	return func(ctx context.Context, s runner.SessionRef) error {
		jobs, err := jc.List(ctx, s.Tenant, s.Session)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			if j.Foreground && j.RunID == s.Run {
				if _, err := jc.Kill(ctx, s.Tenant, s.Session, j.ID); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// runnerMCP connects a run's MCP servers (docs/MCP.md): http servers from
// the runner (internal addresses only on the hosts allowHosts names), with
// header secrets from its variables for the session's tenant
// (agents.ResolveMCPSecret); stdio servers in the session's jobs worker.
func runnerMCP(nc *nats.Conn, log zerolog.Logger, allowHosts []string) func(context.Context, runner.SessionRef, agents.Profile, func(string, []tool.Tool)) func() []dispatcherapi.MCPServerState {
	jc, err := jobsclient.New(jobsclient.Config{NC: nc})
	if err != nil {
		return nil
	}
	hub := mcptools.New(mcptools.Config{Jobs: jc, Log: log, AllowHosts: allowHosts})
	return func(ctx context.Context, s runner.SessionRef, prof agents.Profile, offer func(string, []tool.Tool)) func() []dispatcherapi.MCPServerState {
		set := hub.Open(ctx, mcptools.Ref{Tenant: s.Tenant, Session: s.Session, Run: s.Run, Lineage: s.Lineage, Network: prof.Network, Ask: s.Ask}, prof.MCP, offer)
		return set.End
	}
}
