package runner

import (
	"strings"
	"testing"

	"jetway/pkg/handover"
	"jetway/pkg/llm"
)

func toolTurn(calls ...[2]string) []llm.Message {
	uses := llm.Message{Role: llm.RoleAssistant}
	results := llm.Message{Role: llm.RoleUser}
	for i, c := range calls {
		id := "c" + string(rune('1'+i))
		uses.Content = append(uses.Content, llm.ContentBlock{Type: llm.BlockToolUse, ID: id, Name: "shell", Input: []byte(`{"command":"` + c[0] + `"}`)})
		results.Content = append(results.Content, llm.ContentBlock{Type: llm.BlockToolResult, ToolUseID: id, Content: c[1]})
	}
	return []llm.Message{uses, results}
}

// A steered run's brief names the commands the interrupted run handed to
// the background — those of its last tool turn only, not every hand-off
// the session ever made — so the new run expects their notices.
func TestA_steered_brief_names_the_commands_the_interrupted_run_handed_off(t *testing.T) {
	hist := []llm.Message{llm.UserText("build it")}
	hist = append(hist, toolTurn([2]string{"make old", handover.HandedOffResult + ": it goes on in the background as job 1."})...)
	hist = append(hist, llm.UserText("a notice"))
	hist = append(hist, toolTurn(
		[2]string{"ls", "a b"},
		[2]string{"make all", handover.HandedOffResult + ": it goes on in the background as job 4."})...)
	calls := handedOff(hist)
	if len(calls) != 1 || !strings.Contains(calls[0].Result, "job 4") {
		t.Fatalf("handed off = %+v, want make all's job 4 only", calls)
	}
	brief := handover.Steered(handover.Steer{Previous: "r1", Note: "stop"}, "build it").WithToolCalls(calls...).Brief()
	if !strings.Contains(brief, `shell({"command":"make all"}) → `+handover.HandedOffResult+": it goes on in the background as job 4.") {
		t.Errorf("brief does not name job 4:\n%s", brief)
	}
	if handedOff(hist[:1]) != nil {
		t.Error("a history without tool turns hands nothing off")
	}
}
