package runner

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/events"
)

// With the session's oldest pending event already held as a notice, a
// newer event must still wait for the ones in between that are elsewhere:
// a 10-minute chaos run delivered #54 before #52 and #53 that way.
func TestAn_event_waits_for_every_older_event_of_its_session_not_only_the_oldest(t *testing.T) {
	e := newEnv(t)
	_, p := fakeModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
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
	cons, err := e.js.Consumer(ctx, bus.StreamWork, bus.WorkConsumerName(part))
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
	// The test drives the actor by hand: running keeps a poke from
	// starting its goroutine.
	a := &actor{r: r, tenant: "t1", session: "s1", part: part, log: r.log,
		held: map[string]jetstream.Msg{"first": msgs[0]}, wake: make(chan struct{}, 1), running: true}

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
