package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"jetway/pkg/agent"
	"jetway/pkg/agent/permission"
	"jetway/pkg/agent/tool"
	"jetway/pkg/llm"
	"jetway/pkg/redact"
)

// TestQuery_redacts_tool_calls_and_results_for_every_reader_but_the_tool
// holds QueryInput.Redactor: the tool runs with the command the model
// wrote, and the tool_use event, the recorded messages and the next
// request show the call and the result redacted.
func TestQuery_redacts_tool_calls_and_results_for_every_reader_but_the_tool(t *testing.T) {
	const secret = "Hunter2pw"
	printed := "ghp_" + strings.Repeat("aB3dE6", 6)
	var mu sync.Mutex
	var ran []string
	sh := tool.Func{Name: "sh", Fn: func(_ context.Context, c tool.Call) (tool.Result, error) {
		var in struct{ Command string }
		_ = json.Unmarshal(c.Input, &in)
		mu.Lock()
		ran = append(ran, in.Command)
		mu.Unlock()
		return tool.Result{Content: "token: " + printed}, nil
	}}
	command := "psql --password " + secret + " -c 'select 1'"
	input, _ := json.Marshal(map[string]string{"command": command})
	m, rec, evs := runRedacted(t, sh, call("t1", "sh", string(input)))
	if len(ran) != 1 || ran[0] != command {
		t.Fatalf("the tool ran %q, want the command as written %q", ran, command)
	}
	var shown []string
	for _, e := range evs {
		switch e.Kind {
		case agent.KindToolUse:
			shown = append(shown, "tool_use "+string(e.ToolUse.Input))
		case agent.KindToolResult:
			shown = append(shown, "tool_result "+e.ToolResult.Content)
		}
	}
	for _, msg := range rec.recorded()[:2] { // the call and its result
		b, _ := json.Marshal(msg)
		shown = append(shown, "recorded "+string(b))
	}
	reqs := m.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	b, _ := json.Marshal(reqs[1].Messages)
	shown = append(shown, "request "+string(b))
	if len(shown) != 5 {
		t.Fatalf("saw %d of the call's readers, want 5: %q", len(shown), shown)
	}
	for _, s := range shown {
		if strings.Contains(s, secret) || strings.Contains(s, printed[4:]) {
			t.Errorf("a reader sees a secret: %s", s)
		}
		if !strings.Contains(s, redact.Marker) {
			t.Errorf("a reader sees no redaction: %s", s)
		}
	}
}

// runRedacted runs one tool turn of calls to tl, then a closing text, with
// jetway's redactor, and returns the model, what was recorded and the
// events.
func runRedacted(t *testing.T, tl tool.Tool, calls ...llm.ContentBlock) (*fakeModel, *recorder, []agent.Event) {
	t.Helper()
	m := newModel(reply{tools: calls}, reply{text: "done"})
	rec := &recorder{}
	evs, term := run(t, t.Context(), agent.QueryInput{
		Provider: m, Messages: userInput("go"), Tools: registry(t, tl), Recorder: rec, Redactor: redact.Redactor{},
		PermissionMode: permission.AcceptAll,
	}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted {
		t.Fatalf("terminal %+v", term)
	}
	return m, rec, evs
}
