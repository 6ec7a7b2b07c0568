package chat

import (
	"encoding/json"
	"slices"
	"testing"

	"jetway/pkg/client"
	"jetway/pkg/events"
)

// A failed tool call is shown as the runner summarises it: the tool's
// name and arguments, then its result.
func TestRenderer_shows_a_failed_tool_call_as_name_args_and_result(t *testing.T) {
	data, err := json.Marshal(events.ToolResult{Run: "r1", ID: "tu1", Name: "shell",
		Summary: `shell({"command":"make"}) → error: exit 2`, IsError: true})
	if err != nil {
		t.Fatal(err)
	}
	var r Renderer
	got := r.Lines(client.Event{Type: events.TypeToolResult, Data: data})
	if want := []string{`  ↳ shell({"command":"make"}) → error: exit 2`}; !slices.Equal(got, want) {
		t.Fatalf("lines %q, want %q", got, want)
	}
}
