package mcptools_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	"jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/llmtest"
	"jetway/services/mcptools"
	"jetway/services/runner"
)

// TestA_stdio_tool_call_round_trips_from_the_model_through_a_runner_and_a_worker_process
// is the whole path: a model speaking the Anthropic wire format (over
// SSE) calls a tool of a stdio server built with the official SDK, which
// runs in a jobs worker process; the server crashes under a call and the
// next call starts it again.
func TestA_stdio_tool_call_round_trips_from_the_model_through_a_runner_and_a_worker_process(t *testing.T) {
	b := startBus(t)
	bin, srv, nc, js, jc := b.server, b.srv, b.nc, b.js, b.jc
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	childWorker(t, srv.ClientURL(), filepath.Join(t.TempDir(), "jobs"), filepath.Dir(bin), jc)

	kv, err := js.KeyValue(ctx, bus.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agents.Put(ctx, kv, tenant, "tooled", agents.Profile{Instructions: "Use the kit.",
		MCP: []dispatcherapi.AgentMCPServer{{Name: "kit", Command: bin}}}); err != nil {
		t.Fatal(err)
	}
	model := llmtest.NewAnthropic(t,
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu_1", Name: "mcp__kit__echo", Input: `{"text":"first"}`}}},
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu_2", Name: "mcp__kit__crash", Input: `{}`}}},
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu_3", Name: "mcp__kit__echo", Input: `{"text":"after the crash"}`}}},
		llmtest.Reply{Text: "done"},
	)
	provider, err := anthropic.New(anthropic.Config{APIKey: "test-key", BaseURL: model.URL(), Model: "claude-test"})
	if err != nil {
		t.Fatal(err)
	}
	hub := mcptools.New(mcptools.Config{Jobs: jc, ConnectTimeout: 20 * time.Second})
	rctx, stop := context.WithCancel(bg)
	r, err := runner.New(rctx, runner.Config{NC: nc, ID: "r1", Provider: provider, IdleEvict: time.Minute,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		MCP: func(ctx context.Context, s runner.SessionRef, prof agents.Profile, offer func(string, []tool.Tool)) func() []dispatcherapi.MCPServerState {
			return hub.Open(ctx, mcptools.Ref{Tenant: s.Tenant, Session: s.Session, Run: s.Run, Network: prof.Network}, prof.MCP, offer).End
		}})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("runner did not stop")
		}
	})

	ev, err := events.New(tenant, session, "test", events.Input{Text: "use the kit"})
	if err != nil {
		t.Fatal(err)
	}
	events.SetAgent(&ev, "tooled")
	subj, _ := events.EventsSubject(tenant, session)
	msg, err := events.Encode(bg, subj, ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(bg, msg); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the model's fourth call", func() bool { return model.RequestCount() >= 4 })

	results := model.Requests()[3].ToolResults()
	if got := results["tu_1"]; !strings.Contains(got, "echo: first") || strings.HasPrefix(got, "ERROR") {
		t.Errorf("first echo's result = %s", got)
	}
	if got := results["tu_2"]; !strings.HasPrefix(got, "ERROR") || !strings.Contains(got, "crashed") || !strings.Contains(got, "started again at the next call") {
		t.Errorf("crash's result = %s, want a tool error saying it crashed and starts again", got)
	}
	if got := results["tu_3"]; !strings.Contains(got, "echo: after the crash") || strings.HasPrefix(got, "ERROR") {
		t.Errorf("the echo after the crash = %s, want the server started again", got)
	}
	states, err := jc.MCPState(bg, tenant, session)
	if err != nil || len(states) != 1 || states[0].Restarts != 1 {
		t.Errorf("worker states = %+v, %v; want kit restarted once", states, err)
	}
}
