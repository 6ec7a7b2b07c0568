package runner

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"jetway/pkg/agent/tool"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
)

// A tool result reaches run output whole: its call's name, and a summary
// that reads name(args) → result, from the loop's event alone.
func TestA_tool_result_on_run_output_names_its_call_and_arguments(t *testing.T) {
	e := newEnv(t)
	_, p := fakeModel(t,
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: "echo", Input: `{"text":"hi"}`}}},
		llmtest.Reply{Text: "done"},
	)
	echo := tool.Func{Name: "echo", Description: "echoes", Fn: func(context.Context, tool.Call) (tool.Result, error) {
		return tool.Result{Content: "said hi"}, nil
	}}
	subj, err := events.OutSubject("t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan *nats.Msg, 64)
	sub, err := e.nc.ChanSubscribe(subj, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{echo} })
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "say hi"})

	deadline := time.After(20 * time.Second)
	for {
		select {
		case m := <-out:
			if m.Header.Get("ce-type") != events.TypeToolResult {
				continue
			}
			var res events.ToolResult
			if err := json.Unmarshal(m.Data, &res); err != nil {
				t.Fatalf("tool_result %s: %v", m.Data, err)
			}
			if res.ID != "tu1" || res.Name != "echo" || res.Summary != `echo({"text":"hi"}) → said hi` {
				t.Fatalf("tool_result = %+v, want echo's id, name and echo({\"text\":\"hi\"}) → said hi", res)
			}
			return
		case <-deadline:
			t.Fatal("no tool_result on run output within 20s")
		}
	}
}
