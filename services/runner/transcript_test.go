package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"jetway/pkg/bus"
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

// A run's start and its first turn are one atomic batch, fenced once:
// both land, or, when another runner wrote first, neither does.
func TestA_run_start_and_its_first_turn_land_together_or_not_at_all(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr, _, err := loadTranscript(ctx, e.js, "t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.js.Stream(ctx, bus.StreamTranscripts)
	if err != nil {
		t.Fatal(err)
	}
	if !st.CachedInfo().Config.AllowAtomicPublish {
		t.Fatal("JETWAY_TRANSCRIPTS is provisioned without atomic batches: the pair would go one record at a time")
	}
	started := Record{Kind: RecordRunStarted, Run: "r-1", Runner: "a"}
	first := Record{Kind: RecordMessage, Run: "r-1", Runner: "a"}
	if err := tr.appendPair(ctx, started, first); err != nil {
		t.Fatal(err)
	}
	_, recs, err := loadTranscript(ctx, e.js, "t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Kind != RecordRunStarted || recs[1].Kind != RecordMessage {
		t.Fatalf("transcript after the pair: %+v, want run_started then the message", recs)
	}

	// Another runner writes; this one's fence is now stale.
	other, _, err := loadTranscript(ctx, e.js, "t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.append(ctx, Record{Kind: RecordRunStarted, Run: "r-b", Runner: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := tr.appendPair(ctx, Record{Kind: RecordRunStarted, Run: "r-2", Runner: "a"}, Record{Kind: RecordMessage, Run: "r-2", Runner: "a"}); !errors.Is(err, ErrFenced) {
		t.Fatalf("pair over a stale fence: %v, want ErrFenced", err)
	}
	_, recs, err = loadTranscript(ctx, e.js, "t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Run == "r-2" {
			t.Fatalf("a refused pair left %s of run r-2 in the transcript", r.Kind)
		}
	}
	if len(recs) != 3 {
		t.Fatalf("%d records after the refused pair, want 3", len(recs))
	}
}

// A transcripts stream provisioned before batches were used refuses them;
// the pair then goes one record at a time, as before.
func TestA_pair_falls_back_to_single_records_where_atomic_batches_are_off(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := e.js.Stream(ctx, bus.StreamTranscripts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	tr, _, err := loadTranscript(ctx, e.js, "t1", "s2")
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.appendPair(ctx, Record{Kind: RecordRunStarted, Run: "r-1", Runner: "a"}, Record{Kind: RecordMessage, Run: "r-1", Runner: "a"}); err != nil {
		t.Fatal(err)
	}
	_, recs, err := loadTranscript(ctx, e.js, "t1", "s2")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Kind != RecordRunStarted || recs[1].Kind != RecordMessage {
		t.Fatalf("transcript after the pair: %+v, want run_started then the message", recs)
	}
}
