package mcptools_test

import (
	"fmt"
	"slices"
	"testing"

	"jetway/internal/mcptest"
	"jetway/pkg/agent/tool"
	"jetway/pkg/dispatcherapi"
	"jetway/services/mcptools"
)

// sessionsInARow is how many new sessions the first-call tests open, one
// after another: the lost listing was a race, seen in about a third of
// the runs.
const sessionsInARow = 20

// openSession opens specs for a new session sess as an operator's tool
// would, with no run and so no run fence: these tests are about what is
// offered, and the fence has tests of its own (services/jobs).
func openSession(t *testing.T, hub *mcptools.Hub, sess string, specs ...dispatcherapi.AgentMCPServer) (*mcptools.Set, *offered) {
	t.Helper()
	o := &offered{tools: map[string]tool.Tool{}}
	set := hub.Open(bg, mcptools.Ref{Tenant: tenant, Session: sess}, specs, o.target)
	t.Cleanup(set.Close)
	return set, o
}

// offersAll fails the test unless the open offered every tool of the
// noisy server named server, and its echo answers.
func offersAll(t *testing.T, what string, set *mcptools.Set, o *offered, server string) {
	t.Helper()
	var want []string
	for _, name := range mcptest.NoisyTools {
		want = append(want, "mcp__"+server+"__"+name)
	}
	slices.Sort(want)
	if got := o.names(); !slices.Equal(got, want) {
		t.Fatalf("%s: the open offered %v (states %+v); want all %d tools %v", what, got, set.States(), len(want), want)
	}
	if res := call(t, o, "mcp__"+server+"__echo", `{"text":"hi"}`); res.IsError || res.Content != "echo: hi" {
		t.Fatalf("%s: echo = %+v", what, res)
	}
}

// A server may announce tools/list_changed while it starts — during its
// initialize, right after it, before its first listings' answers — and
// the listing the run starts with must still hold all its tools: the
// run's first model call is made with what the open offered.
func TestEvery_tool_of_a_stdio_server_announcing_changes_while_it_starts_is_offered_when_the_open_returns(t *testing.T) {
	e := newEnv(t)
	spec := dispatcherapi.AgentMCPServer{Name: "noisy", Command: e.server, Args: []string{"noisy"}}
	for i := range sessionsInARow {
		set, o := openSession(t, e.hub, fmt.Sprintf("noisy-%d", i), spec)
		offersAll(t, fmt.Sprintf("session %d", i+1), set, o, "noisy")
	}
}

func TestEvery_tool_of_an_http_server_announcing_changes_while_it_starts_is_offered_when_the_open_returns(t *testing.T) {
	srv := mcptest.ServeNoisyHTTP(t)
	hub := mcptools.New(mcptools.Config{AllowHosts: []string{"127.0.0.1"}})
	spec := dispatcherapi.AgentMCPServer{Name: "noisy", URL: srv.URL}
	for i := range sessionsInARow {
		set, o := openSession(t, hub, fmt.Sprintf("noisy-%d", i), spec)
		offersAll(t, fmt.Sprintf("session %d", i+1), set, o, "noisy")
	}
}
