package runner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
)

// pinOf reads the pin the server holds for work partition n ("" if none).
func (e *env) pinOf(n int) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := e.js.Consumer(ctx, bus.StreamWork, bus.WorkConsumerName(n))
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, g := range info.PriorityGroups {
		if g.Group == bus.WorkGroup {
			return g.PinnedClientID
		}
	}
	return ""
}

// A pin that lapses while its runner is alive moves the partition for
// nothing, and every move resets the consumer and redelivers held events.
func TestA_quiet_partition_keeps_its_pin_past_the_pinned_TTL(t *testing.T) {
	e := newEnv(t) // PinnedTTL 2s
	_, p := fakeModel(t, llmtest.Reply{Text: "ok"})
	e.startRunner("r1", p, nil)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "hi"})
	waitFor(t, "the run to end", 20*time.Second, func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})
	n := bus.PartitionFor("t1", "s1", 4)
	pin := e.pinOf(n)
	if pin == "" {
		t.Fatalf("partition %d has no pin after delivering an event", n)
	}
	// Watch the quiet partition for well over two pinned TTLs: what must
	// not happen has no event to wait for, so the pin is sampled.
	watch := time.NewTimer(5 * time.Second)
	defer watch.Stop()
	sample := time.NewTicker(200 * time.Millisecond)
	defer sample.Stop()
	for {
		if got := e.pinOf(n); got != pin {
			t.Fatalf("partition %d's pin moved from %q to %q while its runner was alive and the partition quiet", n, pin, got)
		}
		select {
		case <-watch.C:
			return
		case <-sample.C:
		}
	}
}

// Shares come from heartbeats that lag: when every runner counts its share
// as full, a partition none of them holds must still be pulled by someone,
// or its events wait in the stream for ever.
func TestA_runner_with_its_share_full_still_pulls_a_partition_no_one_claims(t *testing.T) {
	e := newEnv(t) // 4 partitions
	_, p := fakeModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := New(ctx, Config{NC: e.nc, ID: "r1", Provider: p, Heartbeat: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	r.parts = make([]*partition, 4)
	for n := range r.parts {
		r.parts[n] = &partition{n: n, held: n < 2} // r1 holds 0 and 1
	}
	if err := r.peers.put(ctx, "r1", beat{Incarnation: r.incarnation, Partitions: []int{0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := r.peers.put(ctx, "r2", beat{Incarnation: "other", Partitions: []int{2}}); err != nil {
		t.Fatal(err)
	}
	// Two live runners, four partitions: r1's share of two is full.
	if r.wantPull(ctx, r.parts[2]) {
		t.Errorf("r1 pulls partition 2, which live runner r2 holds, beyond its share")
	}
	// Runners under their share get the first go at an unclaimed
	// partition; once it has stayed unclaimed for orphanGrace, r1 pulls it.
	if r.wantPull(ctx, r.parts[3]) {
		t.Errorf("r1, its share full, pulls partition 3 at once instead of leaving it to a runner under its share first")
	}
	r.parts[3].mu.Lock()
	r.parts[3].unclaimedSince = time.Now().Add(-orphanGrace)
	r.parts[3].mu.Unlock()
	if !r.wantPull(ctx, r.parts[3]) {
		t.Errorf("r1 does not pull partition 3, which no live runner has held for %s: its events would never be delivered", orphanGrace)
	}
}

// Every held partition checks twice a second that its pin is still this
// runner's. One listing of the work consumers answers them all (not a
// request per partition), and it tells a pin that moved from one that
// did not.
func TestThe_pin_checks_of_all_held_partitions_share_one_listing(t *testing.T) {
	e := newEnv(t) // 4 partitions
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
	r.parts = make([]*partition, 4)
	for n := range r.parts {
		cons, err := e.js.Consumer(ctx, bus.StreamWork, bus.WorkConsumerName(n))
		if err != nil {
			t.Fatal(err)
		}
		r.parts[n] = &partition{n: n, cons: cons, held: true, pin: "r1-pin"}
	}
	// Partition 2 is pinned to someone else: a pull of the test's own.
	var session string
	for i := 0; session == ""; i++ {
		if s := fmt.Sprintf("s%d", i); bus.PartitionFor("t1", s, 4) == 2 {
			session = s
		}
	}
	e.publish(events.KindEvents, "t1", session, events.Input{Text: "hi"})
	batch, err := r.parts[2].cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second), jetstream.FetchPriorityGroup(bus.WorkGroup))
	if err != nil {
		t.Fatal(err)
	}
	for range batch.Messages() {
	}
	other := e.pinOf(2)
	if other == "" {
		t.Fatal("the test's pull was not pinned")
	}

	before := r.pinListings.Load()
	for _, n := range []int{0, 1, 3} {
		if !r.stillPinned(ctx, r.parts[n]) {
			t.Errorf("partition %d, pinned to nobody else, reads as moved", n)
		}
	}
	if r.stillPinned(ctx, r.parts[2]) {
		t.Errorf("partition 2, pinned to %s, reads as still this runner's", other)
	}
	if got := r.pinListings.Load() - before; got != 1 {
		t.Errorf("four partitions' checks made %d listings, want 1", got)
	}
	r.pins.mu.Lock()
	listed := len(r.pins.pins)
	r.pins.mu.Unlock()
	if listed != 4 {
		t.Errorf("the listing has the pins of %d partitions, want all 4", listed)
	}
	if r.pinnedNow(ctx, r.parts[2]) {
		t.Errorf("asked afresh, partition 2, pinned to %s, reads as still this runner's", other)
	}
}
