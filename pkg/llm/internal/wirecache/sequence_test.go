package wirecache

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"jetway/pkg/llm"
)

// history is n one-block turns, alternating user and assistant.
func history(n int, text string) ([]llm.Role, [][]llm.ContentBlock) {
	roles := make([]llm.Role, n)
	turns := make([][]llm.ContentBlock, n)
	for i := range n {
		roles[i] = llm.RoleUser
		if i%2 == 1 {
			roles[i] = llm.RoleAssistant
		}
		turns[i] = []llm.ContentBlock{{Type: llm.BlockText, Text: fmt.Sprintf("%s %d", text, i)}}
	}
	return roles, turns
}

// request encodes turns as one request through a Sequence, checks every
// encoding against a fresh one, and returns how many it had to make. It
// reports with t.Errorf, so it may run on any goroutine.
func request(t *testing.T, c *Cache, roles []llm.Role, turns [][]llm.ContentBlock) int {
	t.Helper()
	made := 0
	seq := c.Sequence('m', turns[0])
	defer seq.Done()
	for i := range turns {
		encode := func() (json.RawMessage, error) {
			return json.Marshal(map[string]any{"role": roles[i], "blocks": turns[i]})
		}
		enc, err := seq.Turn(roles[i], turns[i], func() (json.RawMessage, error) { made++; return encode() })
		if err != nil {
			t.Errorf("turn %d: %v", i, err)
			return made
		}
		if want, _ := encode(); string(enc) != string(want) {
			t.Errorf("turn %d: served %s, want %s", i, enc, want)
			return made
		}
	}
	return made
}

func TestSequence_encodes_only_what_a_history_adds(t *testing.T) {
	c := New(Limit)
	roles, turns := history(12, "turn")
	if made := request(t, c, roles[:10], turns[:10]); made != 10 {
		t.Fatalf("first request: %d encodes, want 10", made)
	}
	if made := request(t, c, roles, turns); made != 2 {
		t.Fatalf("the next request of the history: %d encodes, want the 2 new turns", made)
	}
	if made := request(t, c, roles, turns); made != 0 {
		t.Fatalf("the same request again: %d encodes, want none", made)
	}
}

// A turn of the chain changed in place, or replaced by other blocks (a
// compaction, a history read back), is never served the old encoding; the
// turns after it are still found.
func TestSequence_never_serves_a_changed_turn(t *testing.T) {
	c := New(Limit)
	roles, turns := history(8, "turn")
	request(t, c, roles, turns)

	turns[3][0].Text = "changed in place"
	if made := request(t, c, roles, turns); made != 1 {
		t.Fatalf("one turn changed in place: %d encodes, want 1", made)
	}
	turns[5] = []llm.ContentBlock{{Type: llm.BlockText, Text: "replaced"}}
	if made := request(t, c, roles, turns); made != 1 {
		t.Fatalf("one turn replaced: %d encodes, want 1", made)
	}
	roles[6] = llm.RoleAssistant
	if made := request(t, c, roles, turns); made != 1 {
		t.Fatalf("one turn's role changed: %d encodes, want 1", made)
	}
	// A shorter request (turns dropped from the end) is served from the
	// chain and cuts it.
	if made := request(t, c, roles[:4], turns[:4]); made != 0 {
		t.Fatalf("a shorter request: %d encodes, want none", made)
	}
}

// Skip holds a turn's place without an encoding: the next request encodes
// it (once) and finds the rest by position.
func TestSequence_skipped_turn_is_encoded_next_time(t *testing.T) {
	c := New(Limit)
	roles, turns := history(6, "turn")
	seq := c.Sequence('m', turns[0])
	for i := range 5 {
		if _, err := seq.Turn(roles[i], turns[i], func() (json.RawMessage, error) { return json.Marshal(turns[i]) }); err != nil {
			t.Fatal(err)
		}
	}
	seq.Skip()
	seq.Done()
	calls := 0
	seq = c.Sequence('m', turns[0])
	for i := range 6 {
		if _, err := seq.Turn(roles[i], turns[i], func() (json.RawMessage, error) { calls++; return json.Marshal(turns[i]) }); err != nil {
			t.Fatal(err)
		}
	}
	seq.Done()
	if calls != 1 {
		t.Fatalf("after a skipped last turn: %d encodes, want that one turn", calls)
	}
}

func TestSequence_stays_within_the_limit(t *testing.T) {
	const limit = 256 << 10
	c := New(limit)
	for s := range 400 {
		roles, turns := history(20, fmt.Sprintf("session %d", s))
		request(t, c, roles, turns)
		if held := c.Bytes(); held > limit {
			t.Fatalf("after %d histories the cache holds %d bytes, over its limit of %d", s+1, held, limit)
		}
	}
}

// Requests of one history at once (which a runner never makes) each get
// the right encodings.
func TestSequence_requests_of_one_history_at_once(t *testing.T) {
	c := New(Limit)
	roles, turns := history(40, "turn")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range 50 {
				n := 2 + (g*50+k)%38
				request(t, c, roles[:n], turns[:n])
			}
		})
	}
	wg.Wait()
}
