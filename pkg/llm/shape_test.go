package llm

import (
	"reflect"
	"testing"
)

func text(s string) ContentBlock { return ContentBlock{Type: BlockText, Text: s} }

// The API's turns: blocks it refuses left out, a message left empty by
// that dropped, the messages of one role on either side merged, and the
// tool results first in the user turn; thinking only where the wire takes
// it back.
func TestAppendTurns_merges_roles_puts_results_first_and_drops_what_the_API_refuses(t *testing.T) {
	thinking := ContentBlock{Type: BlockThinking, Text: "hmm", Signature: "sig"}
	msgs := []Message{
		{Role: RoleUser, Content: []ContentBlock{text("go")}},
		{Role: RoleAssistant, Content: []ContentBlock{thinking, toolUse("a", "ls")}},
		{Role: RoleUser, Content: []ContentBlock{text("note"), toolResult("a", "A")}},
		{Role: RoleAssistant, Content: []ContentBlock{{Type: BlockThinking, Text: "unsigned"}, text("")}},
		{Role: RoleUser, Content: []ContentBlock{text("more"), {Type: BlockImage}}},
	}
	got := Wire{Thinking: true}.AppendTurns(nil, msgs)
	want := []Turn{
		{Role: RoleUser, Content: []ContentBlock{text("go")}},
		{Role: RoleAssistant, Content: []ContentBlock{thinking, toolUse("a", "ls")}},
		{Role: RoleUser, Content: []ContentBlock{toolResult("a", "A"), text("note"), text("more")}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("turns\n got %+v\nwant %+v", got, want)
	}
	noThinking := Wire{}.AppendTurns(nil, msgs)
	if b := noThinking[1].Content; len(b) != 1 || b[0].Type != BlockToolUse {
		t.Fatalf("a wire without thinking sent %+v", b)
	}
	if &got[0].Content[0] != &msgs[0].Content[0] {
		t.Fatal("a message the API takes whole was copied: its encoding can no longer be found by identity")
	}
}

// A reminder opens the request: merged into a first user turn after its
// tool results, or as a turn of its own before an assistant turn.
func TestWithReminder_goes_first_after_the_first_turns_results(t *testing.T) {
	view := []Message{
		{Role: RoleUser, Content: []ContentBlock{toolResult("a", "A"), text("hi")}},
		{Role: RoleAssistant, Content: []ContentBlock{text("yes")}},
	}
	got := WithReminder(view, "remember")
	if want := []ContentBlock{toolResult("a", "A"), text("remember"), text("hi")}; len(got) != 2 || !reflect.DeepEqual(got[0].Content, want) {
		t.Fatalf("reminded view %+v, want first turn %+v", got, want)
	}
	if len(view[0].Content) != 2 || view[0].Content[1].Text != "hi" {
		t.Fatalf("the view changed: %+v", view[0])
	}
	got = WithReminder(view[1:], "remember")
	if len(got) != 2 || got[0].Role != RoleUser || got[0].Text() != "remember" || got[1].Text() != "yes" {
		t.Fatalf("reminded view %+v", got)
	}
}
