package llm

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// A growing history viewed through one cache, a few messages at a time and
// through a fresh copy of its slice each time (as each run's loop holds
// one), gets exactly MessagesForAPI's view and EstimateTokens' size, for
// any history: boundaries, summaries and image refusals included.
func TestViewCache_matches_MessagesForAPI_as_a_history_grows(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	incremental, settledAgain := 0, 0
	for h := range 400 {
		hist := randomHistory(r, 10+r.IntN(60))
		var vc ViewCache
		var kept []Message // what the last view settled, as it was then
		var heads []Head
		for k := 0; k <= len(hist); k += 1 + r.IntN(3) {
			msgs := hist[:k]
			if r.IntN(2) == 0 {
				msgs = append([]Message(nil), msgs...)
			}
			ext := vc.extends(msgs)
			if ext {
				incremental++
			}
			got, tokens, settled := vc.View(msgs)
			want := MessagesForAPI(hist[:k])
			if ext {
				// What the view before settled begins this one, in the
				// same blocks, holding what they held then.
				if len(got) < len(kept) {
					t.Fatalf("history %d at %d messages: %d settled before, the view has %d", h, k, len(kept), len(got))
				}
				for i := range kept {
					if HeadOf(&got[i]) != heads[i] || !reflect.DeepEqual(got[i], kept[i]) {
						t.Fatalf("history %d at %d messages: settled message %d changed:\n%+v\n%+v", h, k, i, got[i], kept[i])
					}
				}
				settledAgain += len(kept)
			}
			kept, heads = deepCopy(t, got[:settled]), heads[:0]
			for i := range settled {
				heads = append(heads, HeadOf(&got[i]))
			}
			if len(got) == 0 && len(want) == 0 {
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("history %d at %d messages:\n%+v\ncached view %+v\nview        %+v", h, k, hist[:k], got, want)
			}
			if tokens != EstimateTokens(want) {
				t.Fatalf("history %d at %d messages: size %d, want %d", h, k, tokens, EstimateTokens(want))
			}
		}
	}
	if incremental == 0 || settledAgain == 0 {
		t.Fatalf("%d views built from a settled part, %d settled messages seen again: the test checks nothing incremental", incremental, settledAgain)
	}
}

// A history read back again (the same messages in other blocks), or
// another session's, is never given what the cache settled for the first.
func TestViewCache_builds_another_history_in_full(t *testing.T) {
	a := []Message{UserText("one"), {Role: RoleAssistant, Content: []ContentBlock{{Type: BlockText, Text: "two"}}}, UserText("three")}
	var vc ViewCache
	vc.View(a)
	b := deepCopy(t, a)
	b[0].Content[0].Text = "other"
	b = append(b, Message{Role: RoleAssistant, Content: []ContentBlock{{Type: BlockText, Text: "four"}}})
	if vc.extends(b) {
		t.Fatal("a history in other blocks was taken for the one viewed before")
	}
	got, _, _ := vc.View(b)
	if want := MessagesForAPI(b); !reflect.DeepEqual(got, want) {
		t.Fatalf("view %+v, want %+v", got, want)
	}
}

// A 2000-message session's next view: built in full (MessagesForAPI and
// EstimateTokens, as before the cache) and from what the cache settled.
func BenchmarkViewCache(b *testing.B) {
	var h []Message
	for i := range 1200 {
		h = append(h, UserText(fmt.Sprintf("event %d: job 3 (gh) exited 0 after 4s", i)),
			Message{Role: RoleAssistant, Content: []ContentBlock{{Type: BlockText, Text: "noted"}}})
	}
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			EstimateTokens(MessagesForAPI(h[:2000]))
		}
	})
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		var vc ViewCache
		n := 2000
		vc.View(h[:n])
		for b.Loop() {
			if n += 2; n > len(h) {
				b.StopTimer()
				vc, n = ViewCache{}, 2000
				vc.View(h[:n])
				b.StartTimer()
			}
			vc.View(h[:n])
		}
	})
}
