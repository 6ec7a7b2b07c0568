package mcptools_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/control/agents"
	"jetway/pkg/dispatcherapi"
	"jetway/pkg/llm/llmtest"
	"jetway/services/mcptools"
)

// TestA_stdio_tool_call_round_trips_from_the_model_through_a_runner_and_a_worker_process
// is the whole path: a model speaking the Anthropic wire format (over
// SSE) calls a tool of a stdio server built with the official SDK, which
// runs in a jobs worker process; the server crashes under a call and the
// next call starts it again.
func TestA_stdio_tool_call_round_trips_from_the_model_through_a_runner_and_a_worker_process(t *testing.T) {
	b := startBus(t)
	childWorker(t, b.srv.ClientURL(), filepath.Join(t.TempDir(), "jobs"), filepath.Dir(b.server), b.jc)
	putAgent(t, b, "tooled", agents.Profile{Instructions: "Use the kit.",
		MCP: []dispatcherapi.AgentMCPServer{{Name: "kit", Command: b.server}}})
	hub := mcptools.New(mcptools.Config{Jobs: b.jc, ConnectTimeout: 20 * time.Second})
	model := modelRunner(t, b, hub,
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu_1", Name: "mcp__kit__echo", Input: `{"text":"first"}`}}},
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu_2", Name: "mcp__kit__crash", Input: `{}`}}},
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu_3", Name: "mcp__kit__echo", Input: `{"text":"after the crash"}`}}},
		llmtest.Reply{Text: "done"},
	)
	send(t, b, session, "tooled", "use the kit")
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
	states, err := b.jc.MCPState(bg, tenant, session)
	if err != nil || len(states) != 1 || states[0].Restarts != 1 {
		t.Errorf("worker states = %+v, %v; want kit restarted once", states, err)
	}
}
