package chat

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"jetway/pkg/client"
	"jetway/pkg/events"
)

func toolUseLines(t *testing.T, name string, input string) []string {
	t.Helper()
	data, err := json.Marshal(events.ToolUse{Run: "r1", ID: "t1", Name: name, Input: json.RawMessage(input)})
	if err != nil {
		t.Fatal(err)
	}
	var r Renderer
	return r.Lines(client.Event{Type: events.TypeToolUse, Data: data})
}

func TestA_shell_call_shows_its_command_on_one_line(t *testing.T) {
	if got, want := toolUseLines(t, "shell", `{"command":"make build\n&& ./run-tests   --verbose"}`),
		[]string{"  ↳ shell: make build && ./run-tests --verbose"}; !slices.Equal(got, want) {
		t.Errorf("shell call: %q, want %q", got, want)
	}
	long := strings.Repeat("x", 300)
	got := toolUseLines(t, "shell", `{"command":"`+long+`","background":true}`)
	if len(got) != 1 || !strings.HasPrefix(got[0], "  ↳ shell: xxx") || !strings.HasSuffix(got[0], "…") || len(got[0]) > 130 {
		t.Errorf("a long command: %q, want it cut to one line ending in …", got)
	}
	// Another tool shows its arguments; one without any, just its name.
	if got, want := toolUseLines(t, "read_file", `{"path":"go.mod"}`), []string{`  ↳ read_file {"path":"go.mod"}`}; !slices.Equal(got, want) {
		t.Errorf("read_file call: %q, want %q", got, want)
	}
	if got, want := toolUseLines(t, "jobs", `{}`), []string{"  ↳ jobs"}; !slices.Equal(got, want) {
		t.Errorf("a call without arguments: %q, want %q", got, want)
	}
}
