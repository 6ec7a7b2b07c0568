package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/events"
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

// consumerCreations counts the consumers created on JETWAY_TRANSCRIPTS from
// now on, by listening to the API requests that create them.
func consumerCreations(t *testing.T, e *env) func() int {
	t.Helper()
	nc, err := nats.Connect(e.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var n atomic.Int64
	if _, err := nc.Subscribe("$JS.API.CONSUMER.CREATE."+bus.StreamTranscripts+".>", func(*nats.Msg) { n.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() int {
		_ = nc.Flush()
		return int(n.Load())
	}
}

// appendTexts appends n message records of size-byte texts to a session's
// transcript, each followed by one on a neighbour session, so the two
// subjects interleave in the stream as live sessions' do.
func appendTexts(ctx context.Context, t *testing.T, e *env, session string, n, size int) {
	t.Helper()
	tr, _, err := loadTranscript(ctx, e.js, "t1", session)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := loadTranscript(ctx, e.js, "t1", session+"-neighbour")
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", size)
	for i := range n {
		m := llm.UserText(fmt.Sprintf("%d %s", i, pad))
		if err := tr.append(ctx, Record{Kind: RecordMessage, Message: &m}); err != nil {
			t.Fatal(err)
		}
		if err := other.append(ctx, Record{Kind: RecordMessage, Message: &m}); err != nil {
			t.Fatal(err)
		}
	}
}

// wantTexts checks that recs are n message records numbered 0..n-1.
func wantTexts(t *testing.T, recs []Record, n int) {
	t.Helper()
	if len(recs) != n {
		t.Fatalf("read %d records, want %d", len(recs), n)
	}
	for i, r := range recs {
		if r.Message == nil || !strings.HasPrefix(r.Message.Text(), fmt.Sprintf("%d ", i)) {
			t.Fatalf("record %d is %+v, want message %d", i, r, i)
		}
	}
}

// A session coming back after an eviction or a takeover reads its whole
// transcript, however long, in order, with the fence at its last record,
// and without a consumer created for the read: more records than one
// direct batch holds, and more bytes than one reply carries.
func TestA_long_transcript_loads_whole_and_in_order_without_a_consumer(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	appendTexts(ctx, t, e, "many", directBatch+500, 10)
	appendTexts(ctx, t, e, "large", 3*directMaxBytes/(200<<10)+2, 200<<10)
	created := consumerCreations(t, e)
	for session, n := range map[string]int{"many": directBatch + 500, "large": 3*directMaxBytes/(200<<10) + 2} {
		tr, recs, err := loadTranscript(ctx, e.js, "t1", session)
		if err != nil {
			t.Fatal(err)
		}
		wantTexts(t, recs, n)
		m := llm.UserText("next")
		if err := tr.append(ctx, Record{Kind: RecordMessage, Message: &m}); err != nil {
			t.Fatalf("%s: the fence is not at the last record: %v", session, err)
		}
	}
	if n := created(); n != 0 {
		t.Fatalf("%d consumers created to read transcripts, want none", n)
	}
}

// The fence is read first; records another runner appends after it are
// not part of the load (its next append is refused anyway), and a read
// that cannot reach the fence, as a replica behind the leader would
// answer, is refused, not taken for the whole transcript.
func TestA_direct_read_stops_at_the_fence_and_refuses_to_end_short_of_it(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	appendTexts(ctx, t, e, "s1", 5, 10)
	ts, err := openTranscripts(ctx, e.js)
	if err != nil {
		t.Fatal(err)
	}
	if !ts.direct {
		t.Fatal("JETWAY_TRANSCRIPTS does not allow direct gets")
	}
	subj, err := events.TranscriptSubject("t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	fence, ok, err := ts.lastRecord(ctx, subj)
	if err != nil || !ok {
		t.Fatalf("last record: %v, %v", ok, err)
	}
	appendTexts(ctx, t, e, "s1", 3, 10) // another runner, after the fence
	recs, err := ts.readDirect(ctx, subj, fence)
	if err != nil {
		t.Fatal(err)
	}
	wantTexts(t, recs, 5)
	last, _, err := ts.lastRecord(ctx, subj)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.readDirect(ctx, subj, last+1); !errors.Is(err, errShort) {
		t.Fatalf("a read ending before the fence returned %v, want errShort", err)
	}
}

// A stream provisioned before transcripts allowed direct gets is still
// read, whole, through a consumer, until it is provisioned again.
func TestA_transcript_on_a_stream_without_direct_gets_loads_through_a_consumer(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	appendTexts(ctx, t, e, "s1", 300, 10)
	st, err := e.js.Stream(ctx, bus.StreamTranscripts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	created := consumerCreations(t, e)
	_, recs, err := loadTranscript(ctx, e.js, "t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	wantTexts(t, recs, 300)
	if created() == 0 {
		t.Fatal("no consumer read the transcript: the load did not take the path for streams without direct gets")
	}
}

// BenchmarkTranscriptLoad reads back a six-record transcript (two runs,
// as a session at a person's pace has after two events) as a session's
// first event after an eviction does: batched direct gets, or the
// ordered consumer a stream without direct gets is read through.
func BenchmarkTranscriptLoad(b *testing.B) {
	srv := bustest.StartServer(b)
	_, js := bustest.Connect(b, srv.ClientURL())
	ctx := context.Background()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: 4}); err != nil {
		b.Fatal(err)
	}
	ts, err := openTranscripts(ctx, js)
	if err != nil {
		b.Fatal(err)
	}
	const sessions = 200
	for i := range sessions {
		tr, _, err := ts.load(ctx, "t1", fmt.Sprintf("s%d", i))
		if err != nil {
			b.Fatal(err)
		}
		for range 2 {
			m := llm.UserText("hello there")
			for _, r := range []Record{{Kind: RecordRunStarted, Message: &m}, {Kind: RecordMessage, Message: &m}, {Kind: RecordRunEnded}} {
				if err := tr.append(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	for _, direct := range []bool{true, false} {
		name := map[bool]string{true: "direct", false: "consumer"}[direct]
		b.Run(name, func(b *testing.B) {
			ts := ts
			ts.direct = direct
			i := 0
			for b.Loop() {
				_, recs, err := ts.load(ctx, "t1", fmt.Sprintf("s%d", i%sessions))
				if err != nil || len(recs) != 6 {
					b.Fatalf("load: %d records, %v", len(recs), err)
				}
				i++
			}
		})
	}
}
