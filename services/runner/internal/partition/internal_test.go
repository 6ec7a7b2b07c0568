package partition

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
)

// group builds a member for tests that drive its parts by hand (no Start).
func (e *env) group(id string) *Group {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := bus.OpenBucket(ctx, e.js, bus.BucketRunners)
	if err != nil {
		e.t.Fatal(err)
	}
	g, err := New(Config{JS: e.js, Peers: kv, ID: id, Incarnation: id + "-1", Partitions: e.p, Heartbeat: time.Minute, Deliver: func(Delivery) {}})
	if err != nil {
		e.t.Fatal(err)
	}
	return g
}

// groupListing is group with the work stream Start would give it, so its
// pin checks can list the work consumers.
func (e *env) groupListing(ctx context.Context, id string) *Group {
	e.t.Helper()
	g := e.group(id)
	work, err := e.js.Stream(ctx, bus.WorkStream(0))
	if err != nil {
		e.t.Fatal(err)
	}
	g.work = []jetstream.Stream{work}
	return g
}

// ownedBy returns the partitions of p that the assignment over members
// gives to id.
func ownedBy(p int, members []string, id string) []int {
	var out []int
	for n, o := range assign(p, members) {
		if o == id {
			out = append(out, n)
		}
	}
	return out
}

// A member pulls the partitions assigned to it once their holder has let
// them go, and no others, except one that no live member holds or waits
// for: heartbeats lag, and a partition every member thinks is someone
// else's must still be pulled by someone, or its messages wait in the
// stream for ever.
func TestA_member_pulls_its_assigned_partitions_once_free_and_an_orphan_after_a_grace(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := e.group("r1")
	g.parts = make([]*part, 4)
	for n := range g.parts {
		g.parts[n] = &part{n: n}
	}
	mine, theirs := ownedBy(4, []string{"r1", "r2"}, "r1"), ownedBy(4, []string{"r1", "r2"}, "r2")
	if len(mine) != 2 || len(theirs) != 2 {
		t.Fatalf("the assignment gives r1 %v and r2 %v of 4 partitions, want two each", mine, theirs)
	}
	// r2 still holds one of r1's partitions and waits for one of its own.
	if err := g.peers.put(ctx, "r1", Beat{Incarnation: "r1-1"}); err != nil {
		t.Fatal(err)
	}
	if err := g.peers.put(ctx, "r2", Beat{Incarnation: "other", Partitions: []int{mine[0]}, Pulling: []int{theirs[0]}}); err != nil {
		t.Fatal(err)
	}
	if g.wantPull(ctx, g.parts[mine[0]]) {
		t.Errorf("r1 pulls partition %d, assigned to it, while r2 still holds it: it must wait for r2's hand-off", mine[0])
	}
	if !g.wantPull(ctx, g.parts[mine[1]]) {
		t.Errorf("r1 does not pull partition %d, assigned to it and free", mine[1])
	}
	for _, n := range theirs {
		if g.wantPull(ctx, g.parts[n]) {
			t.Errorf("r1 pulls partition %d, assigned to r2, at once", n)
		}
		g.parts[n].mu.Lock()
		g.parts[n].unclaimedSince = time.Now().Add(-orphanGrace)
		g.parts[n].mu.Unlock()
	}
	if g.wantPull(ctx, g.parts[theirs[0]]) {
		t.Errorf("r1 pulls partition %d, which r2 waits for as its owner", theirs[0])
	}
	if !g.wantPull(ctx, g.parts[theirs[1]]) {
		t.Errorf("r1 does not pull partition %d, which no live member has held or waited for in %s: its messages would never be delivered", theirs[1], orphanGrace)
	}
}

// Every member computes the same owners from the same members, whatever
// order it lists them in, and the shares differ by at most one.
func TestThe_assignment_is_the_same_for_every_member_and_balanced(t *testing.T) {
	for _, p := range []int{1, 4, 12, 16, 256} {
		for r := 1; r <= 7; r++ {
			var members []string
			for i := range r {
				members = append(members, fmt.Sprintf("runner-%d", i))
			}
			a := assign(p, members)
			b := assign(p, slices.Concat(members[r/2:], members[:r/2]))
			if !slices.Equal(a, b) {
				t.Fatalf("P=%d R=%d: the owners depend on the order the members are listed in", p, r)
			}
			count := map[string]int{}
			for n, o := range a {
				if o == "" {
					t.Fatalf("P=%d R=%d: partition %d has no owner", p, r, n)
				}
				count[o]++
			}
			lo, hi := p/r, (p+r-1)/r
			for _, m := range members {
				if c := count[m]; c < lo || c > hi {
					t.Errorf("P=%d R=%d: %s owns %d partitions, want %d to %d", p, r, m, c, lo, hi)
				}
			}
		}
	}
}

// A member joining takes its share and the others keep most of theirs:
// every move is a drain and a consumer reset.
func TestA_joining_member_moves_little_more_than_its_share(t *testing.T) {
	for _, p := range []int{16, 256} {
		for r := 1; r <= 6; r++ {
			var members []string
			for i := range r {
				members = append(members, fmt.Sprintf("runner-%d", i))
			}
			before := assign(p, members)
			after := assign(p, append(members, "joiner"))
			moved := 0
			for n := range before {
				if before[n] != after[n] {
					moved++
				}
			}
			share := (p + r) / (r + 1)
			if moved > share+share/4+1 {
				t.Errorf("P=%d, member %d joining: %d partitions change owner, for a share of %d", p, r+1, moved, share)
			}
		}
	}
}

// A member counts in the assignment only once it has been live for
// settleTime in its incarnation: one that restarts over and over (a new
// Joined each time) never takes partitions from the others.
func TestA_member_counts_in_the_assignment_only_once_settled(t *testing.T) {
	now := time.Now()
	old := Beat{Joined: now.Add(-time.Minute)}
	beats := map[string]Beat{"a": old, "b": old, "new": {Joined: now.Add(-settleTime / 2)}}
	if got := settled(beats, now); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("members counted %v, want a and b: new joined %s ago", got, settleTime/2)
	}
	if got := settled(beats, now.Add(settleTime)); !slices.Equal(got, []string{"a", "b", "new"}) {
		t.Errorf("members counted %v, want all three once new has been live for %s", got, settleTime)
	}
	lone := map[string]Beat{"new": {Joined: now}}
	if got := settled(lone, now); !slices.Equal(got, []string{"new"}) {
		t.Errorf("members counted %v, want the lone new member: a cold start must not wait", got)
	}
}

// Every held partition checks twice a second that its pin is still this
// member's. One listing of the work consumers answers them all (not a
// request per partition), and it tells a pin that moved from one that
// did not.
func TestThe_pin_checks_of_all_held_partitions_share_one_listing(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := e.groupListing(ctx, "r1")
	g.parts = make([]*part, 4)
	for n := range g.parts {
		cons, err := e.js.Consumer(ctx, bus.WorkStream(0), bus.WorkConsumerName(n))
		if err != nil {
			t.Fatal(err)
		}
		g.parts[n] = &part{n: n, cons: cons, held: true, pin: "r1-pin"}
	}
	// Partition 2 is pinned to someone else: a pull of the test's own.
	e.publish(e.sessionIn(2), "hi")
	batch, err := g.parts[2].cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second), jetstream.FetchPriorityGroup(bus.WorkGroup))
	if err != nil {
		t.Fatal(err)
	}
	for range batch.Messages() {
	}
	other := e.pinOf(2)
	if other == "" {
		t.Fatal("the test's pull was not pinned")
	}

	before := g.lists.Load()
	for _, n := range []int{0, 1, 3} {
		if !g.stillPinned(ctx, g.parts[n]) {
			t.Errorf("partition %d, pinned to nobody else, reads as moved", n)
		}
	}
	if g.stillPinned(ctx, g.parts[2]) {
		t.Errorf("partition 2, pinned to %s, reads as still this member's", other)
	}
	if got := g.lists.Load() - before; got != 1 {
		t.Errorf("four partitions' checks made %d listings, want 1", got)
	}
	g.pins.mu.Lock()
	listed := len(g.pins.pins)
	g.pins.mu.Unlock()
	if listed != 4 {
		t.Errorf("the listing has the pins of %d partitions, want all 4", listed)
	}
	if g.pinnedNow(ctx, g.parts[2]) {
		t.Errorf("asked afresh, partition 2, pinned to %s, reads as still this member's", other)
	}
}

// A listing of the pins asked for before this member took a partition
// still names the member that handed it off. Read as "moved", it made the
// new holder stop pulling moments after its takeover, pull again under a
// new pin and reset the consumer, which delivered its work in hand a
// second time (two deliveries of one message, 8 ms apart, in the busy
// hand-off test). The check lists again instead.
func TestA_listing_older_than_a_takeover_does_not_say_the_partition_moved(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := e.groupListing(ctx, "r1")
	// This member takes partition 1: a pull of its own, pinned.
	cons, pin := e.pinnedPull(ctx, 1, "hi")
	// The listing, fresh by its age, was asked for just before the
	// takeover, when the previous holder had the pin.
	g.pins.mu.Lock()
	g.pins.pins, g.pins.at = map[int]string{1: "the-previous-holder"}, time.Now().Add(-10*time.Millisecond)
	g.pins.mu.Unlock()
	p := &part{n: 1, cons: cons, held: true, pin: pin, pinSince: time.Now()}

	if !g.stillPinned(ctx, p) {
		t.Fatal("a listing asked for before the takeover made the new holder read its partition as moved")
	}
	g.pins.mu.Lock()
	relisted := g.pins.at.After(p.pinSince)
	g.pins.mu.Unlock()
	if !relisted {
		t.Error("the check did not list the pins again")
	}
	// A listing asked for after the takeover is believed: the pin moved.
	p.pinSince = time.Now().Add(-time.Second)
	g.pins.mu.Lock()
	g.pins.pins, g.pins.at = map[int]string{1: "someone-else"}, time.Now()
	g.pins.mu.Unlock()
	if g.stillPinned(ctx, p) {
		t.Error("a listing newer than the takeover, naming another pin, reads as still this member's")
	}
}

// A drain can end after the pin lapsed and the owner was pinned: the
// member that handed the partition off must not unpin the new holder (the
// server's unpin takes whatever pin there is), which would take it again
// under a new pin and reset the consumer, delivering its work in hand a
// second time.
func TestA_hand_off_ending_after_the_pin_lapsed_leaves_the_new_holder_pinned(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := e.group("r1")
	g.cfg.Busy = func(int) bool { return false }
	// The new holder: a pull of the test's own, pinned.
	cons, holder := e.pinnedPull(ctx, 1, "hi")
	// This member drained partition 1 under the pin it had before.
	p := &part{n: 1, cons: cons, draining: true} // its puller stopped and dropped it
	g.handOff(ctx, p, time.Now().Add(-time.Minute), "r1-lapsed-pin")

	if got := e.pinOf(1); got != holder {
		t.Fatalf("after the hand-off the pin is %q, want the new holder's %q", got, holder)
	}
	if p.isDraining() {
		t.Error("the hand-off did not end")
	}
	// Still pinned here, the drain unpins.
	p = &part{n: 1, cons: cons, draining: true}
	g.handOff(ctx, p, time.Now().Add(-time.Minute), holder)
	if got := e.pinOf(1); got != "" {
		t.Errorf("after a hand-off under its own pin the partition is pinned to %q, want nobody", got)
	}
}

// After the reset that begins a tenure, deliveries numbered 1, 2, 3 … and
// each delivered for the first time are the partition's messages in stream
// order. A gap (a delivery that went to a dropped pull) or a redelivery
// breaks that for the rest of the tenure; only the next reset restores it.
func TestA_tenure_is_in_stream_order_until_a_gap_or_a_redelivery(t *testing.T) {
	md := func(cseq, delivered uint64) *jetstream.MsgMetadata {
		return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Consumer: cseq, Stream: 100 + cseq}, NumDelivered: delivered}
	}
	p := &part{}
	inOrder := func(m *jetstream.MsgMetadata) bool { p.streamOrder(m); return p.unbroken }
	if inOrder(md(1, 1)) {
		t.Fatal("in order with no reset behind it")
	}
	p.unbroken, p.nextCseq = true, 1 // what the reset's first delivery sets
	for c := uint64(1); c <= 3; c++ {
		if !inOrder(md(c, 1)) {
			t.Fatalf("delivery %d of an unbroken tenure is out of order", c)
		}
	}
	if inOrder(md(5, 1)) {
		t.Fatal("in order across a gap in the consumer sequence")
	}
	if inOrder(md(6, 1)) {
		t.Fatal("a gap did not break the rest of the tenure")
	}
	p.unbroken, p.nextCseq = true, 1
	if !inOrder(md(1, 1)) || inOrder(md(2, 2)) {
		t.Fatal("a redelivery did not break the tenure")
	}
}

// The balance rule reads live members and partition holders from the
// mirror of the heartbeat bucket; this holds it to what the bucket says: a
// put counts, a delete does not, a heartbeat past staleAfter does not, and
// the answers are the ones a fresh listing gives.
func TestThe_peer_view_follows_the_heartbeat_bucket(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := bus.OpenBucket(ctx, e.js, bus.BucketRunners)
	if err != nil {
		t.Fatal(err)
	}
	const stale = 2 * time.Second
	watched := peers{kv: kv, staleAfter: stale}
	listed := peers{kv: kv, staleAfter: stale} // no mirror: lists the bucket
	wctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	watched.watch(wctx, e.testLog())

	agree := func(what string, live int, holders map[int]string) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, what, func() bool {
			if _, ok := watched.fresh(); !ok {
				return false
			}
			gotLive, err := watched.live(ctx)
			return err == nil && gotLive == live && maps.Equal(watched.holders(ctx), holders)
		})

		listedLive, _ := listed.live(ctx)
		if listedLive != live || !maps.Equal(listed.holders(ctx), holders) {
			t.Fatalf("%s: the bucket listed says %d live, holders %v; the mirror says %d, %v", what, listedLive, listed.holders(ctx), live, holders)
		}
	}

	if err := watched.put(ctx, "ra", Beat{Incarnation: "i1", Partitions: []int{0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := watched.put(ctx, "rb", Beat{Incarnation: "i2", Partitions: []int{2}}); err != nil {
		t.Fatal(err)
	}
	agree("two heartbeats", 2, map[int]string{0: "ra", 1: "ra", 2: "rb"})

	if err := watched.put(ctx, "rb", Beat{Incarnation: "i2", Partitions: []int{2, 3}}); err != nil {
		t.Fatal(err)
	}
	agree("rb took partition 3", 2, map[int]string{0: "ra", 1: "ra", 2: "rb", 3: "rb"})

	if err := watched.remove(ctx, "ra"); err != nil {
		t.Fatal(err)
	}
	agree("ra left", 1, map[int]string{2: "rb", 3: "rb"})

	// rb goes silent: its last heartbeat ages past staleAfter and stops
	// counting, with no marker in the bucket to say so.
	testutil.Eventually(t, 10*time.Second, "rb's heartbeat to go stale", func() bool {
		beats, ok := watched.fresh()
		return ok && len(beats) == 0
	})

	if got := watched.holders(ctx); len(got) != 0 {
		t.Fatalf("a stale heartbeat still holds partitions %v", slices.Sorted(maps.Keys(got)))
	}
	if n, _ := watched.live(ctx); n != 1 {
		t.Fatalf("live = %d with no fresh heartbeat, want 1 (the caller)", n)
	}

	// A member trusts the mirror only while its own heartbeat in it is
	// fresh: that is what shows the mirror is still being updated.
	watched.self = "rb"
	if _, ok := watched.fresh(); ok {
		t.Fatal("the mirror was trusted by rb with rb's own heartbeat stale in it")
	}
	if err := watched.put(ctx, "rb", Beat{Incarnation: "i2", Partitions: []int{1}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "rb's fresh heartbeat in the mirror", func() bool {
		beats, ok := watched.fresh()
		return ok && slices.Equal(beats["rb"].Partitions, []int{1})
	})

}

// Two members may claim one partition for a moment (one hands it off as
// the other takes it, or both wait for it while the assignment settles).
// Every member reading the same heartbeats must name the same one: the
// runners' sweeps look at a partition through the member named, and two
// members each naming the other left it to nobody.
func TestA_partition_two_members_claim_is_named_the_same_by_every_reading(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := e.group("r1")
	for _, id := range []string{"r2", "r1"} {
		if err := g.peers.put(ctx, id, Beat{Incarnation: id + "-1", Partitions: []int{0}, Pulling: []int{1}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 50 {
		holders, wanted := g.Owners(ctx)
		if holders[0] != "r1" || wanted[1] != "r1" {
			t.Fatalf("partition 0 named held by %q and partition 1 waited for by %q, want r1 (the first by id) both times", holders[0], wanted[1])
		}
	}
}

// A hand-off can be begun with no puller left to stop: the pull ended by
// itself (its heartbeats missed on a cut link) just as the watcher decided
// to hand the partition off. The member must still finish it (unpin, and
// stop claiming the partition), or the partition stays claimed by a member
// that pulls it no more, and nobody else takes it: a chaos run stranded
// a partition's events so.
func TestA_hand_off_begun_with_no_puller_is_finished(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := e.group("r1")
	cons, err := e.js.Consumer(ctx, bus.WorkStream(0), bus.WorkConsumerName(0))
	if err != nil {
		t.Fatal(err)
	}
	p := &part{n: 0, cons: cons, draining: true}
	g.parts = []*part{p}
	// The partition is pinned, as the member's last pull left it.
	e.publish(e.sessionIn(0), "hi")
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second), jetstream.FetchPriorityGroup(bus.WorkGroup))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if e.pinOf(0) == "" {
		t.Fatal("the test's pull was not pinned")
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); g.consume(runCtx, p) }()
	defer func() { stop(); <-done }()
	testutil.Eventually(t, 10*time.Second, "the hand-off finished: unpinned and claimed no more", func() bool {
		return !p.claimed() && e.pinOf(0) == ""
	})
	if p.resuming() {
		t.Fatal("the hand-off was given up, though nothing of the partition was in hand")
	}
}

// A partition with messages out for acks and no live member claiming it
// was stranded by a member that died: reset once its pin has lapsed, and
// looked at again soon while the pin holds or another member's pull waits
// (a delivery to it could race the reset). Nothing out, or a live holder,
// is left alone.
func TestA_stranded_partition_is_reset_once_its_dead_holder_s_pin_lapses(t *testing.T) {
	for _, c := range []struct {
		pending int
		pin     string
		claimed bool
		waiting int
		want    orphan
	}{
		{pending: 0, pin: "", claimed: false, want: orphanWait},
		{pending: 0, pin: "p1", claimed: false, want: orphanWait},
		{pending: 2, pin: "p1", claimed: true, want: orphanWait},
		{pending: 2, pin: "", claimed: true, want: orphanWait},
		{pending: 2, pin: "p1", claimed: false, want: orphanSoon},
		{pending: 2, pin: "", claimed: false, waiting: 1, want: orphanSoon},
		{pending: 2, pin: "", claimed: false, want: orphanReset},
	} {
		if got := orphanVerdict(c.pending, c.pin, c.claimed, c.waiting); got != c.want {
			t.Errorf("orphanVerdict(pending %d, pin %q, claimed %v, waiting %d) = %d, want %d", c.pending, c.pin, c.claimed, c.waiting, got, c.want)
		}
	}
}
