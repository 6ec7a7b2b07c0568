package runner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
)

// With the session's oldest pending event already held as a notice, a
// newer event must still wait for the ones in between that are elsewhere:
// a 10-minute chaos run delivered #54 before #52 and #53 that way.
func TestAn_event_waits_for_every_older_event_of_its_session_not_only_the_oldest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, part, msgs := threeEventsInHand(t, ctx)
	// The test is the actor's goroutine: a mailbox marked running keeps a
	// message from starting another.
	a := &actor{r: r, tenant: "t1", session: "s1", part: part, log: r.log,
		held: map[string]jetstream.Msg{"first": msgs[0]}, box: mailbox{running: true}}

	if a.inOrder(ctx, delivery{msg: msgs[2]}) {
		t.Fatal("the third event may be handled while the second is still in the stream and not in hand")
	}
	a.queue = []delivery{{msg: msgs[2]}, {msg: msgs[1]}}
	if a.inOrder(ctx, delivery{msg: msgs[2]}) {
		t.Fatal("the third event may be handled before the second, queued behind it")
	}
	if got := seqOf(a.queue[0].msg); got != seqOf(msgs[1]) {
		t.Fatalf("queue head is stream sequence %d, want the second event's %d", got, seqOf(msgs[1]))
	}
	a.queue = nil
	a.held["second"] = msgs[1]
	if !a.inOrder(ctx, delivery{msg: msgs[2]}) {
		t.Fatal("the third event waits although every older one is held as a notice")
	}
}

// While a tenure is unbroken, a session's events need one lookup in the
// work stream, for its first event; the order check of every later one is
// answered from what the runner has seen. (A pull the runner had to renew
// under load may break the tenure and rightly cost a lookup more, so the
// test asks for fewer lookups than events, not exactly one.)
func TestA_session_s_events_in_an_unbroken_tenure_need_one_order_lookup(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "noted"})
	r := e.startRunner("r1", p, nil)
	const n = 5
	var ids []string
	for i := range n {
		ids = append(ids, e.publish(events.KindEvents, "t1", "s1", events.Input{Text: fmt.Sprintf("event %d", i)}))
		testutil.Eventually(t, 20*time.Second, fmt.Sprintf("run %d to end", i+1), func() bool {
			rec := e.session("t1", "s1")
			return rec.State == StateIdle && rec.Runs == i+1
		})

	}
	recs := e.records("t1", "s1")
	for _, id := range ids {
		if got := deliveries(recs)[id]; got != 1 {
			t.Fatalf("event %s delivered %d times, want once", id, got)
		}
	}
	if got := r.orderLookups.Load(); got >= n {
		t.Fatalf("%d order lookups for %d events of one session, want 1 (fewer than one per event)", got, n)
	}
}

// An event given back (lost, waitForOther) and redelivered breaks the
// tenure; a newer event delivered before the break must then be checked
// against the stream, not waved through: a chaos run handed the model #422
// before #404, which had come back and queued behind it.
func TestAn_event_delivered_before_a_redelivery_is_checked_against_the_stream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, part, msgs := threeEventsInHand(t, ctx)
	// Tenure 1 delivered all three in order; the first is held, the second
	// was given back and the third is queued. The second then comes back as
	// a redelivery, which breaks the tenure (the partition group's own
	// tests hold that), and queues behind the third.
	r.tenure = func(int) (uint64, bool) { return 1, false }
	a := &actor{r: r, tenant: "t1", session: "s1", part: part, log: r.log,
		held: map[string]jetstream.Msg{"first": msgs[0]}, box: mailbox{running: true},
		ordered: orderMark{tenure: 1, below: seqOf(msgs[0]) + 1}}
	third := delivery{msg: msgs[2], tenure: 1}

	a.queue = []delivery{third, {msg: msgs[1], tenure: 1}}
	if a.inOrder(ctx, third) {
		t.Fatal("the third event may be handled before the second, redelivered and queued behind it")
	}
	if got := seqOf(a.queue[0].msg); got != seqOf(msgs[1]) {
		t.Fatalf("queue head is stream sequence %d, want the second event's %d", got, seqOf(msgs[1]))
	}
}

// threeEventsInHand publishes three events of session t1/s1 and fetches
// them from its work partition by hand, for a runner that is not running
// (so nothing else takes them); it returns the runner and the partition.
func threeEventsInHand(t *testing.T, ctx context.Context) (*Runner, int, []jetstream.Msg) {
	t.Helper()
	e := newEnv(t)
	_, p := fakeModel(t)
	r, err := New(ctx, Config{NC: e.nc, ID: "r1", Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.openWork(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		e.publish(events.KindEvents, "t1", "s1", events.Input{Text: string(rune('a' + i))})
	}
	part := bus.PartitionFor("t1", "s1", 4)
	cons, err := e.js.Consumer(ctx, bus.WorkStream(0), bus.WorkConsumerName(part))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	deadline := time.Now().Add(10 * time.Second)
	for len(msgs) < 3 && time.Now().Before(deadline) {
		batch, err := cons.Fetch(3-len(msgs), jetstream.FetchPriorityGroup(bus.WorkGroup), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
	}
	if len(msgs) != 3 {
		t.Fatalf("fetched %d of 3 events from the work stream", len(msgs))
	}
	return r, part, msgs
}

// An older event another runner handed on and recorded waits in the shard
// until the log has copied it, which under steady load takes until the
// log's source has many events out. It is no reason to wait: a runner
// taking the partition over found such events and served nothing for ten
// seconds. What is not recorded still makes the newer event wait.
func TestAn_older_event_recorded_in_the_transcript_does_not_hold_a_newer_one_back(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, part, msgs := threeEventsInHand(t, ctx)
	a := &actor{r: r, tenant: "t1", session: "s1", part: part, log: r.log, box: mailbox{running: true},
		held: map[string]jetstream.Msg{}, seen: map[string]struct{}{}}
	if a.inOrder(ctx, delivery{msg: msgs[2]}) {
		t.Fatal("the third event may be handled while the first two are in the shard, neither in hand nor recorded")
	}
	a.seen[msgs[0].Headers().Get("ce-id")] = struct{}{}
	if a.inOrder(ctx, delivery{msg: msgs[2]}) {
		t.Fatal("the third event may be handled while the second is in the shard, neither in hand nor recorded")
	}
	a.seen[msgs[1].Headers().Get("ce-id")] = struct{}{}
	if !a.inOrder(ctx, delivery{msg: msgs[2]}) {
		t.Fatal("the third event waits for older ones the transcript records as handed on")
	}
}
