package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"jetway/pkg/llm"
)

// A try whose answer was lost may still have landed; the next try is then
// refused by the fence the first one moved. landed tells this apart from
// another runner's write, so the run's end is not mistaken for a lost
// session, and never mistakes someone else's record for ours.
func TestA_record_that_landed_without_an_answer_is_recognised_not_taken_for_a_lost_fence(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr, _, err := loadTranscript(ctx, e.js, "t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	end := Record{Kind: RecordRunEnded, Run: "r-1", Runner: "a", Reason: "completed", Time: time.Now().UTC()}
	if err := tr.append(ctx, end); err != nil {
		t.Fatal(err)
	}
	landedAt := tr.last
	tr.last = 0 // the answer was lost: the fence did not move here
	if err := tr.append(ctx, end); !errors.Is(err, ErrFenced) {
		t.Fatalf("second try: %v, want ErrFenced", err)
	}
	other := end
	other.Runner = "b"
	if tr.landed(ctx, other) {
		t.Fatal("another runner's record was taken for ours")
	}
	if !tr.landed(ctx, end) {
		t.Fatal("our own landed record was not recognised")
	}
	if tr.last != landedAt {
		t.Fatalf("fence at %d after recognising the record, want %d", tr.last, landedAt)
	}
	if err := tr.append(ctx, Record{Kind: RecordRunStarted, Run: "r-2", Runner: "a"}); err != nil {
		t.Fatalf("append after the fence moved past our record: %v", err)
	}
}

// A run_started whose answer was lost may still have landed, and the
// client's retry then comes back "fenced". landedAtFence finds it as the
// first record after the fence, even with another runner's records after
// it, so start() does not undo the claim of a run that exists.
func TestA_run_start_that_landed_behind_a_refusal_is_found_at_the_fence(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr, _, err := loadTranscript(ctx, e.js, "t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.append(ctx, Record{Kind: RecordRunEnded, Run: "r-0", Runner: "a"}); err != nil {
		t.Fatal(err)
	}
	fence := tr.last
	begun := Record{Kind: RecordRunStarted, Run: "r-1", Runner: "a", Time: time.Now().UTC()}
	if err := tr.append(ctx, begun); err != nil {
		t.Fatal(err)
	}
	other, _, err := loadTranscript(ctx, e.js, "t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.append(ctx, Record{Kind: RecordRefused, Runner: "b", Event: "e-1"}); err != nil {
		t.Fatal(err)
	}
	tr.last = fence // the answer was lost: this runner's fence did not move
	if !tr.landedAtFence(ctx, begun) {
		t.Fatal("our run_started, first after the fence, was not found")
	}
	notOurs := begun
	notOurs.Run = "r-2"
	if tr.landedAtFence(ctx, notOurs) {
		t.Fatal("a run_started that never landed was taken for ours")
	}
	if tr.last != fence {
		t.Fatalf("the fence moved to %d; a lost session's fence stays", tr.last)
	}
}

// A run's first turn rides in its run_started record; transcripts written
// before that hold it in a message record after run_started. Both read as
// the same conversation, each turn once.
func TestHistory_reads_a_run_s_first_turn_in_either_layout(t *testing.T) {
	first, reply := llm.UserText("hi"), llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "hello"}}}
	first.Delivers = []string{"ce-1"}
	now := []Record{
		{Kind: RecordRunStarted, Run: "r-1", Cause: "dispatch", Message: &first},
		{Kind: RecordMessage, Run: "r-1", Message: &reply},
		{Kind: RecordRunEnded, Run: "r-1"},
	}
	before := []Record{
		{Kind: RecordRunStarted, Run: "r-1", Cause: "dispatch"},
		{Kind: RecordMessage, Run: "r-1", Message: &first},
		{Kind: RecordMessage, Run: "r-1", Message: &reply},
		{Kind: RecordRunEnded, Run: "r-1"},
	}
	for name, recs := range map[string][]Record{"now": now, "before": before} {
		h := history(recs)
		if len(h) != 2 || h[0].Text() != "hi" || h[1].Text() != "hello" {
			t.Errorf("%s: history = %+v, want the first turn then the reply", name, h)
		}
		if _, ok := delivered(recs)["ce-1"]; !ok {
			t.Errorf("%s: the first turn's event is not counted as delivered", name)
		}
	}
}
