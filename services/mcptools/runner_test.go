package mcptools_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"jetway/internal/mcptest"
	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/control/agents"
	"jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/llmtest"
	"jetway/pkg/tasks/proctree"
	jobsclient "jetway/services/jobs/client"
	"jetway/services/mcptools"
	"jetway/services/runner"
)

// anthropicToolResults are the tool_result blocks of a request to the
// fake Anthropic API, by tool_use id ("ERROR " before an error's).
func anthropicToolResults(t *testing.T, req llmtest.Request) map[string]string {
	t.Helper()
	var body struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range body.Messages {
		var blocks []struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			IsError   bool            `json:"is_error"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			if b.Type == "tool_result" {
				s := string(b.Content)
				if b.IsError {
					s = "ERROR " + s
				}
				out[b.ToolUseID] = s
			}
		}
	}
	return out
}

// TestA_stdio_tool_call_round_trips_from_the_model_through_a_runner_and_a_worker_process
// is the whole path: a model speaking the Anthropic wire format (over
// SSE) calls a tool of a stdio server built with the official SDK, which
// runs in a jobs worker process; the server crashes under a call and the
// next call starts it again.
func TestA_stdio_tool_call_round_trips_from_the_model_through_a_runner_and_a_worker_process(t *testing.T) {
	if v := proctree.LandlockABI(); v < proctree.MinLandlockABI {
		t.Skipf("kernel Landlock ABI %d; confinement needs %d", v, proctree.MinLandlockABI)
	}
	bin := mcptest.Build(t)
	srv := bustest.StartServer(t)
	nc, js := bustest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: 1}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	jc, err := jobsclient.New(jobsclient.Config{NC: nc})
	if err != nil {
		t.Fatal(err)
	}
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
		MCP: func(ctx context.Context, s runner.SessionRef, prof agents.Profile, offer func(string, []tool.Tool)) func() {
			return hub.Open(ctx, mcptools.Ref{Tenant: s.Tenant, Session: s.Session, Run: s.Run}, prof.MCP, offer).Close
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

	results := anthropicToolResults(t, model.Requests()[3])
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
