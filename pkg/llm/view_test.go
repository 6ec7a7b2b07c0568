package llm

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func toolUse(id, name string) ContentBlock {
	return ContentBlock{Type: BlockToolUse, ID: id, Name: name, Input: json.RawMessage(`{"x":1}`)}
}

func toolResult(id, content string) ContentBlock {
	return ContentBlock{Type: BlockToolResult, ToolUseID: id, Content: content}
}

func deepCopy(t *testing.T, ms []Message) []Message {
	t.Helper()
	raw, err := json.Marshal(ms)
	if err != nil {
		t.Fatal(err)
	}
	var out []Message
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The view shares the blocks of the messages it leaves as they are (its
// blocks are read-only), but building it never changes the history, and an
// append to a view message copies instead of writing into the history's
// spare capacity.
func TestMessagesForAPI_never_mutates_its_input(t *testing.T) {
	hist := []Message{
		{ID: "1", Role: RoleUser, Content: []ContentBlock{{Type: BlockText, Text: "hi"}}},
		{ID: "2", Role: RoleAssistant, Content: []ContentBlock{{Type: BlockText, Text: "calling"}, toolUse("a", "ls"), toolUse("b", "cat")}},
		{ID: "3", Role: RoleUser, Content: []ContentBlock{{Type: BlockText, Text: "note first"}, toolResult("b", "B")}},
		{ID: "4", Role: RoleUser, Kind: KindNotice, Delivers: []string{"ce-1"}, Content: []ContentBlock{{Type: BlockText, Text: "notice"}}},
		{ID: "5", Role: RoleAssistant, Content: []ContentBlock{toolUse("c", "ls")}},
	}
	before := deepCopy(t, hist)
	MessagesForAPI(hist)
	if !reflect.DeepEqual(before, hist) {
		t.Fatalf("input changed:\nbefore %+v\nafter  %+v", before, hist)
	}
	for i := range hist {
		hist[i].Content = slices.Grow(hist[i].Content, 4) // spare capacity an append could reach
	}
	view := MessagesForAPI(hist)
	for i := range view {
		view[i].Content = append(view[i].Content, ContentBlock{Type: BlockText, Text: "scribbled"})
	}
	for i := range hist {
		if spare := hist[i].Content[:cap(hist[i].Content)]; slices.ContainsFunc(spare, func(b ContentBlock) bool { return b.Text == "scribbled" }) {
			t.Fatalf("an append to the view wrote into message %d of the history", i)
		}
	}
	if !reflect.DeepEqual(before, hist) {
		t.Fatal("appending to the view changed the history")
	}
}

func TestMessagesForAPI_gives_every_tool_call_a_result_first(t *testing.T) {
	hist := []Message{
		{Role: RoleUser, Content: []ContentBlock{{Type: BlockText, Text: "hi"}}},
		{Role: RoleAssistant, Content: []ContentBlock{toolUse("a", "ls"), toolUse("b", "cat")}},
		{Role: RoleUser, Content: []ContentBlock{{Type: BlockText, Text: "note"}, toolResult("b", "B")}},
		{Role: RoleAssistant, Content: []ContentBlock{toolUse("c", "ls")}},
	}
	v := MessagesForAPI(hist)
	if len(v) != 5 {
		t.Fatalf("view has %d messages, want 5: %+v", len(v), v)
	}
	got := v[2].Content
	if got[0].ToolUseID != "a" || !IsInterrupted(got[0]) || !got[0].IsError {
		t.Errorf("missing result for a not synthesised first: %+v", got[0])
	}
	if got[1].ToolUseID != "b" || got[1].Content != "B" || got[2].Text != "note" {
		t.Errorf("results not first in call order: %+v", got)
	}
	last := v[4]
	if last.Role != RoleUser || len(last.Content) != 1 || last.Content[0].ToolUseID != "c" || last.Content[0].Content != InterruptedToolResult {
		t.Errorf("trailing tool call left without a result: %+v", last)
	}
}

func TestMessagesForAPI_merges_user_turns_and_drops_host_fields(t *testing.T) {
	hist := []Message{
		{Role: RoleUser, Content: []ContentBlock{{Type: BlockText, Text: "one"}}},
		{Role: RoleUser, Kind: KindNotice, Delivers: []string{"ce-1", "ce-2"}, Content: []ContentBlock{{Type: BlockText, Text: "two"}}},
		{Role: RoleUser, Kind: KindReminder, Content: nil},
	}
	v := MessagesForAPI(hist)
	if len(v) != 1 || len(v[0].Content) != 2 || v[0].Content[1].Text != "two" {
		t.Fatalf("user turns not merged: %+v", v)
	}
	if v[0].Kind != KindOrdinary || v[0].Delivers != nil {
		t.Errorf("host-only fields sent to the provider: %+v", v[0])
	}
}

func TestMessagesForAPI_starts_at_the_last_boundary_with_its_summary(t *testing.T) {
	hist := []Message{
		{ID: "0", Role: RoleUser, Content: []ContentBlock{{Type: BlockText, Text: "old question"}}},
		{ID: "1", Role: RoleAssistant, Content: []ContentBlock{toolUse("a", "ls")}},
		{ID: "2", Role: RoleUser, Content: []ContentBlock{toolResult("a", "old result")}},
		{ID: "3", Role: RoleAssistant, Content: []ContentBlock{{Type: BlockText, Text: "kept answer"}}},
		{ID: "4", Role: RoleUser, Content: []ContentBlock{{Type: BlockText, Text: "kept question"}}},
		BoundaryMessage(Boundary{BoundaryMeta: BoundaryMeta{Strategy: "fold"}, KeepFrom: 3}),
		{ID: "6", Role: RoleUser, Kind: KindCompactSummary, Content: []ContentBlock{{Type: BlockText, Text: "summary"}}},
		{ID: "7", Role: RoleAssistant, Content: []ContentBlock{{Type: BlockText, Text: "new"}}},
	}
	v := MessagesForAPI(hist)
	var texts []string
	for _, m := range v {
		texts = append(texts, string(m.Role)+":"+m.Text())
	}
	want := []string{"user:summary", "assistant:kept answer", "user:kept question", "assistant:new"}
	if !reflect.DeepEqual(texts, want) {
		t.Fatalf("view = %q, want %q", texts, want)
	}
}

func TestMessagesForAPI_drops_results_whose_call_was_folded(t *testing.T) {
	hist := []Message{
		{Role: RoleAssistant, Content: []ContentBlock{toolUse("a", "ls")}},
		{Role: RoleUser, Content: []ContentBlock{toolResult("a", "r"), {Type: BlockText, Text: "and this"}}},
		BoundaryMessage(Boundary{KeepFrom: 1}),
		{Role: RoleUser, Kind: KindCompactSummary, Content: []ContentBlock{{Type: BlockText, Text: "s"}}},
	}
	v := MessagesForAPI(hist)
	if len(v) != 1 || len(v[0].Content) != 2 || v[0].Content[1].Text != "and this" {
		t.Fatalf("orphan result kept or text lost: %+v", v)
	}
	for _, b := range v[0].Content {
		if b.Type == BlockToolResult {
			t.Fatalf("orphan tool result sent: %+v", b)
		}
	}
}

func TestParseBoundary_round_trips(t *testing.T) {
	b := Boundary{BoundaryMeta: BoundaryMeta{Trigger: "reactive", Strategy: "summarise", PreTokens: 10, PostTokens: 2, MessagesFolded: 3, LastFoldedID: "x"}, KeepFrom: 3}
	if got := ParseBoundary(BoundaryMessage(b)); got != b {
		t.Fatalf("got %+v, want %+v", got, b)
	}
	if got := ParseBoundary(UserText("not json")); got != (Boundary{}) {
		t.Fatalf("garbage parsed as %+v", got)
	}
}

// historyFrom builds an arbitrary history from fuzz bytes: turns of every
// kind, tool calls with some, none, reordered or orphaned results,
// boundaries and summaries anywhere.
func historyFrom(data []byte) []Message {
	var msgs []Message
	var lastUses []string
	next := 0
	for i := 0; i < len(data); i++ {
		b := data[i]
		arg := int(b >> 3)
		switch b % 8 {
		case 0:
			msgs = append(msgs, UserText(fmt.Sprint("u", i)))
		case 1:
			m := Message{ID: fmt.Sprint("a", i), Role: RoleAssistant, Content: []ContentBlock{{Type: BlockText, Text: "t"}}}
			lastUses = nil
			for range arg % 4 {
				id := fmt.Sprint("call", next)
				next++
				lastUses = append(lastUses, id)
				m.Content = append(m.Content, toolUse(id, "x"))
			}
			msgs = append(msgs, m)
		case 2:
			m := Message{Role: RoleUser}
			for j := len(lastUses) - 1; j >= 0; j-- { // reversed, some left out
				if (arg>>j)&1 == 0 {
					m.Content = append(m.Content, toolResult(lastUses[j], "r"))
				}
			}
			if arg%2 == 1 {
				m.Content = append(m.Content, ContentBlock{Type: BlockText, Text: "and"})
			}
			msgs = append(msgs, m)
		case 3:
			msgs = append(msgs, Message{Role: RoleUser, Kind: KindNotice, Delivers: []string{fmt.Sprint("ce", i)}, Content: []ContentBlock{{Type: BlockText, Text: "n"}}})
		case 4:
			msgs = append(msgs, BoundaryMessage(Boundary{KeepFrom: arg % (len(msgs) + 1)}))
		case 5:
			msgs = append(msgs, Message{Role: RoleUser, Kind: KindCompactSummary, Content: []ContentBlock{{Type: BlockText, Text: "s"}}})
		case 6:
			msgs = append(msgs, Message{Role: RoleUser, Content: []ContentBlock{toolResult("orphan", "o")}})
		case 7:
			msgs = append(msgs, Message{Role: Role([]string{"user", "assistant"}[arg%2])})
		}
	}
	return msgs
}

func FuzzMessagesForAPI(f *testing.F) {
	f.Add([]byte{0, 1 | 2<<3, 2, 3, 0})
	f.Add([]byte{0, 1 | 3<<3, 2 | 5<<3, 4 | 1<<3, 5, 1 | 1<<3, 3, 6, 7})
	f.Add([]byte{1 | 1<<3, 1 | 2<<3, 7 | 8, 2 | 1<<3, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		hist := historyFrom(data)
		before := deepCopy(t, hist)
		view := MessagesForAPI(hist)
		if !reflect.DeepEqual(before, hist) {
			t.Fatal("input changed")
		}
		for i, m := range view {
			if len(m.Content) == 0 || m.Kind != KindOrdinary || m.Delivers != nil {
				t.Fatalf("view[%d] = %+v", i, m)
			}
			if i > 0 && m.Role == RoleUser && view[i-1].Role == RoleUser {
				t.Fatalf("two user turns in a row at %d", i)
			}
			var prevUses []ContentBlock
			if i > 0 {
				prevUses = view[i-1].ToolUses()
			}
			for _, u := range m.ToolUses() {
				if i+1 >= len(view) || view[i+1].Role != RoleUser {
					t.Fatalf("call %s at %d not followed by a user turn", u.ID, i)
				}
			}
			for j, b := range m.Content {
				if b.Type != BlockToolResult {
					continue
				}
				if j >= len(prevUses) || prevUses[j].ID != b.ToolUseID {
					t.Fatalf("view[%d] result %d (%s) is not the result of the previous turn's call %d", i, j, b.ToolUseID, j)
				}
			}
			if len(prevUses) > 0 {
				for j, u := range prevUses {
					if j >= len(m.Content) || m.Content[j].ToolUseID != u.ID {
						t.Fatalf("view[%d] does not open with the result of %s", i, u.ID)
					}
				}
			}
		}
	})
}

func TestMessagesForAPI_shows_images_before_a_refusal_as_notes_and_keeps_later_ones(t *testing.T) {
	img := Image{MediaType: "image/png", Data: "iVBORw0KGgo="}
	hist := []Message{
		UserImages("look", img),
		{Role: RoleAssistant, Content: []ContentBlock{toolUse("t1", "shot")}},
		{Role: RoleUser, Content: []ContentBlock{{Type: BlockToolResult, ToolUseID: "t1", Content: "shot", Images: []Image{img, img}}}},
		ImageRefusal(fmt.Errorf("Could not process image")),
		UserImages("try this one", img),
	}
	before := deepCopy(t, hist)
	v := MessagesForAPI(hist)
	if !reflect.DeepEqual(hist, before) {
		t.Fatal("the history was modified")
	}
	if len(v) != 3 {
		t.Fatalf("view has %d messages: %+v", len(v), v)
	}
	if b := v[0].Content[1]; b.Type != BlockText || b.Text != ImageRemovedNote {
		t.Errorf("the first image is %+v, want the note", b)
	}
	if b := v[2].Content[0]; b.Type != BlockToolResult || len(b.Images) != 0 || b.Content != "shot\n"+fmt.Sprintf(ToolImagesRemovedNote, 2) {
		t.Errorf("the tool result is %+v", b)
	}
	if !strings.Contains(v[2].Text(), ImageRefusedText+"Could not process image") {
		t.Errorf("the refusal is not shown: %q", v[2].Text())
	}
	if imgs := v[2].Images(); len(imgs) != 1 {
		t.Errorf("the image after the refusal was removed too: %+v", v[2])
	}
}
