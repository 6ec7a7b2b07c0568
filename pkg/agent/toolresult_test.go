package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"jetway/pkg/agent"
	"jetway/pkg/agent/tool"
	"jetway/pkg/llm"
	"jetway/pkg/redact"
)

// A tool_result event is whole on its own: it names its call and carries
// its arguments (redacted, as the call is recorded), so a reader shows
// "name(args) → result" without keeping the calls it saw. The recorded
// result stays as the model reads it, without them.
func TestQuery_tool_result_events_carry_their_calls_name_and_arguments(t *testing.T) {
	const secret = "Hunter2pw"
	echo := tool.Func{Name: "echo", Fn: func(_ context.Context, c tool.Call) (tool.Result, error) {
		return tool.Result{Content: "echoed"}, nil
	}}
	in1, _ := json.Marshal(map[string]string{"text": "one"})
	in2, _ := json.Marshal(map[string]string{"text": "psql --password " + secret})
	_, rec, evs := runRedacted(t, echo, call("t1", "echo", string(in1)), call("t2", "echo", string(in2)))
	var results []*llm.ContentBlock
	for _, e := range evs {
		if e.Kind == agent.KindToolResult {
			results = append(results, e.ToolResult)
		}
	}
	if len(results) != 2 {
		t.Fatalf("%d tool_result events, want 2", len(results))
	}
	if r := results[0]; r.ToolUseID != "t1" || r.Name != "echo" || string(r.Input) != string(in1) || r.Content != "echoed" {
		t.Errorf("first result event: %+v, want echo(%s) → echoed", r, in1)
	}
	r := results[1]
	if r.ToolUseID != "t2" || r.Name != "echo" || r.Content != "echoed" {
		t.Errorf("second result event: %+v", r)
	}
	if strings.Contains(string(r.Input), secret) || !strings.Contains(string(r.Input), redact.Marker) {
		t.Errorf("second result event's arguments are not redacted as recorded: %s", r.Input)
	}
	recorded := rec.recorded()[1] // the call, then its results
	for _, b := range recorded.Content {
		if b.Type == llm.BlockToolResult && (b.Name != "" || len(b.Input) > 0) {
			t.Errorf("the recorded result carries its call: %+v", b)
		}
	}
}
