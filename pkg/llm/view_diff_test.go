package llm

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// The view is built with one arena for its blocks and folds runs of user
// turns in one pass. What it returns must be exactly what the plain version
// it replaced returned, kept here as the reference, for any history.
func TestMessagesForAPI_matches_the_plain_reference_on_random_histories(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 3000 {
		hist := randomHistory(r, r.IntN(40))
		before := deepCopy(t, hist)
		got, want := MessagesForAPI(hist), referenceMessagesForAPI(hist)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("history %d:\n%+v\nview      %+v\nreference %+v", n, hist, got, want)
		}
		if !reflect.DeepEqual(before, hist) {
			t.Fatalf("history %d was modified", n)
		}
	}
}

// Appending to one message of the view (a provider adding a block) must
// not write over the next message's blocks, which share the view's arena.
func TestMessagesForAPI_an_append_to_one_message_leaves_the_next_alone(t *testing.T) {
	hist := []Message{UserText("one"), {Role: RoleAssistant, Content: []ContentBlock{{Type: BlockText, Text: "two"}}}, UserText("three")}
	v := MessagesForAPI(hist)
	v[0].Content = append(v[0].Content, ContentBlock{Type: BlockText, Text: "added"})
	v[1].Content = append(v[1].Content, ContentBlock{Type: BlockText, Text: "added"})
	if v[1].Content[0].Text != "two" || v[2].Content[0].Text != "three" {
		t.Fatalf("an append reached the next message: %+v", v)
	}
}

func BenchmarkMessagesForAPI(b *testing.B) {
	for _, n := range []int{20, 2000} {
		var h []Message
		for i := range n / 2 {
			h = append(h, UserText(fmt.Sprintf("event %d: job 3 (gh) exited 0 after 4s", i)),
				Message{Role: RoleAssistant, Content: []ContentBlock{{Type: BlockText, Text: "noted"}}})
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				MessagesForAPI(h)
			}
		})
	}
}

func randomHistory(r *rand.Rand, n int) []Message {
	img := Image{MediaType: "image/png", Data: "iVBORw0KGgo="}
	var hist []Message
	var open []string // tool calls of the last assistant turn
	id := 0
	next := func() string { id++; return fmt.Sprintf("t%d", id) }
	for range n {
		switch k := r.IntN(12); {
		case k < 3:
			m := UserText(fmt.Sprintf("u%d", r.IntN(100)))
			if r.IntN(4) == 0 {
				m.Kind, m.Delivers = KindNotice, []string{next()}
			}
			if r.IntN(6) == 0 {
				m.Content = append(m.Content, ContentBlock{Type: BlockImage, Image: &img})
			}
			hist = append(hist, m)
		case k < 6:
			m := Message{Role: RoleAssistant}
			if r.IntN(2) == 0 {
				m.Content = append(m.Content, ContentBlock{Type: BlockText, Text: "a"})
			}
			open = nil
			for range r.IntN(3) {
				u := next()
				open = append(open, u)
				m.Content = append(m.Content, toolUse(u, "ls"))
			}
			hist = append(hist, m)
		case k < 9:
			m := Message{Role: RoleUser}
			for _, u := range open {
				if r.IntN(3) > 0 {
					b := toolResult(u, "ok")
					if r.IntN(5) == 0 {
						b.Images = []Image{img}
					}
					m.Content = append(m.Content, b)
				}
			}
			if len(open) > 0 && r.IntN(6) == 0 {
				m.Content = append(m.Content, toolResult(open[0], "a second result for the same call"))
			}
			if r.IntN(4) == 0 {
				r.Shuffle(len(m.Content), func(i, j int) { m.Content[i], m.Content[j] = m.Content[j], m.Content[i] })
			}
			if r.IntN(4) == 0 {
				m.Content = append(m.Content, toolResult("stale"+next(), "old"))
			}
			if r.IntN(2) == 0 {
				m.Content = append(m.Content, ContentBlock{Type: BlockText, Text: "note"})
			}
			hist = append(hist, m)
		case k == 9:
			hist = append(hist, BoundaryMessage(Boundary{KeepFrom: r.IntN(len(hist) + 2)}))
			if r.IntN(2) == 0 {
				hist = append(hist, Message{Role: RoleUser, Kind: KindCompactSummary, Content: []ContentBlock{{Type: BlockText, Text: "summary"}}})
			}
		case k == 10:
			hist = append(hist, ImageRefusal(fmt.Errorf("Could not process image")))
		default:
			hist = append(hist, Message{Role: RoleUser, Kind: KindReminder})
		}
	}
	return hist
}

// referenceMessagesForAPI is MessagesForAPI as it was before the arena: a
// copy of each message in turn, and runs of user turns folded pairwise.
func referenceMessagesForAPI(msgs []Message) []Message {
	_, summary, keep := VisibleRange(msgs)
	refused := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Kind == KindImageRefused {
			refused = i
			break
		}
	}
	src := make([]Message, 0, len(keep)+1)
	add := func(i int) {
		if i < refused {
			src = append(src, withoutImages(msgs[i]))
			return
		}
		src = append(src, msgs[i])
	}
	if summary >= 0 {
		add(summary)
	}
	for _, i := range keep {
		add(i)
	}
	clean := func(m Message) Message {
		return Message{ID: m.ID, Role: m.Role, Content: append([]ContentBlock(nil), m.Content...)}
	}
	out := make([]Message, 0, len(src))
	for i := 0; i < len(src); i++ {
		m := src[i]
		if len(m.Content) == 0 {
			continue
		}
		if m.Role == RoleAssistant {
			out = append(out, clean(m))
			uses := m.ToolUses()
			if len(uses) == 0 {
				continue
			}
			var next *Message
			if i+1 < len(src) && src[i+1].Role == RoleUser {
				next = &src[i+1]
				i++
			}
			out = append(out, referencePairResults(uses, next))
			continue
		}
		u := clean(m)
		u.Content = dropToolResults(u.Content)
		if len(u.Content) == 0 {
			continue
		}
		out = append(out, u)
	}
	merged := out[:0:0]
	for _, m := range out {
		if n := len(merged); n > 0 && m.Role == RoleUser && merged[n-1].Role == RoleUser {
			prev := merged[n-1]
			var results, other []ContentBlock
			for _, b := range append(append([]ContentBlock(nil), prev.Content...), m.Content...) {
				if b.Type == BlockToolResult {
					results = append(results, b)
				} else {
					other = append(other, b)
				}
			}
			prev.Content = append(results, other...)
			merged[n-1] = prev
			continue
		}
		merged = append(merged, m)
	}
	return merged
}

// referencePairResults is the plain pairing the arena's replaced.
func referencePairResults(uses []ContentBlock, next *Message) Message {
	have := map[string]ContentBlock{}
	var rest []ContentBlock
	if next != nil {
		for _, b := range next.Content {
			if b.Type == BlockToolResult {
				if _, dup := have[b.ToolUseID]; !dup {
					have[b.ToolUseID] = b
				}
				continue
			}
			rest = append(rest, b)
		}
	}
	u := Message{Role: RoleUser}
	if next != nil {
		u.ID = next.ID
	}
	for _, t := range uses {
		if r, ok := have[t.ID]; ok {
			u.Content = append(u.Content, r)
			continue
		}
		u.Content = append(u.Content, ContentBlock{Type: BlockToolResult, ToolUseID: t.ID, Content: InterruptedToolResult, IsError: true})
	}
	for _, b := range rest {
		if b.Type != BlockToolResult {
			u.Content = append(u.Content, b)
		}
	}
	return u
}
