package partition

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// The members' logs (shown for a failing test) carry milliseconds: a
// hand-off and a takeover are a second or less apart.
func init() { zerolog.TimeFieldFormat = "15:04:05.000" }

// env is one embedded JetStream server with the work stream provisioned.
type env struct {
	t    *testing.T
	urls []string // where members connect
	js   jetstream.JetStream
	p    int
}

func newEnv(t *testing.T, partitions int, ackWait time.Duration) *env {
	t.Helper()
	srv := bustest.StartServerWith(t, partitions)
	_, js := bustest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: partitions, WorkAckWait: ackWait, WorkPinnedTTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, urls: []string{srv.ClientURL()}, js: js, p: partitions}
}

// sessionIn returns a session name that lands on partition n.
func (e *env) sessionIn(n int) string {
	for i := 0; ; i++ {
		if s := fmt.Sprintf("s%d", i); bus.PartitionFor("t1", s, e.p) == n {
			return s
		}
	}
}

// publish sends one message for a session; its body names it.
func (e *env) publish(session, body string) {
	e.t.Helper()
	if _, err := e.js.Publish(context.Background(), "jetway.events.t1."+session, []byte(body)); err != nil {
		e.t.Fatal(err)
	}
}

// member is one member of the group on a connection of its own, recording
// what it is handed.
type member struct {
	id string
	nc *nats.Conn
	g  *Group

	mu  sync.Mutex
	got []string // bodies, in the order delivered
}

func (m *member) bodies() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.got)
}

// startMember starts a member whose deliver runs handle after recording
// the message; Busy reports busy(n) when set.
func (e *env) startMember(id string, handle func(*member, Delivery), busy func(int) bool) *member {
	e.t.Helper()
	return e.startMemberWith(id, handle, busy, nil)
}

// startMemberWith is startMember with tweak applied to the member's config.
func (e *env) startMemberWith(id string, handle func(*member, Delivery), busy func(int) bool, tweak func(*Config)) *member {
	e.t.Helper()
	nc, js := bustest.Connect(e.t, e.urls...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := bus.OpenBucket(ctx, js, bus.BucketRunners)
	if err != nil {
		e.t.Fatal(err)
	}
	m := &member{id: id, nc: nc}
	cfg := Config{
		JS: js, Peers: kv, ID: id, Incarnation: id + "-1", Partitions: e.p,
		Heartbeat: 300 * time.Millisecond, Busy: busy,
		Log: zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.InfoLevel).With().Timestamp().Logger(),
		Deliver: func(d Delivery) {
			checkParsed(e.t, d.Msg)
			m.mu.Lock()
			m.got = append(m.got, string(d.Msg.Data()))
			m.mu.Unlock()
			if handle != nil {
				handle(m, d)
			}
		},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	g, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	if err := g.Start(runCtx); err != nil {
		stop()
		e.t.Fatal(err)
	}
	m.g = g
	e.t.Cleanup(func() { stop(); g.Stop() })
	return m
}

// checkParsed fails the test unless msg keeps the metadata its own reply
// subject says (parsedMsg).
func checkParsed(t *testing.T, msg jetstream.Msg) {
	pm, ok := msg.(parsedMsg)
	if !ok {
		t.Errorf("delivered a %T, not a parsedMsg", msg)
		return
	}
	fresh, err := pm.Msg.Metadata()
	kept, err2 := msg.Metadata()
	if err != nil || err2 != nil || !reflect.DeepEqual(fresh, kept) {
		t.Errorf("delivered metadata %+v (%v), the reply subject says %+v (%v)", kept, err2, fresh, err)
	}
}

// holdLedger tracks which member holds each message un-acked.
type holdLedger struct {
	mu        sync.Mutex
	holder    map[uint64]string // stream sequence -> member holding it
	acked     map[string]int    // body -> acks
	twice     []string          // a message handed to a member while another held it
	heldByPar map[string]map[int]int
}

func newLedger() *holdLedger {
	return &holdLedger{holder: map[uint64]string{}, acked: map[string]int{}, heldByPar: map[string]map[int]int{}}
}

// handle holds the message, acks it (confirmed) and lets it go.
func (l *holdLedger) handle(m *member, d Delivery) {
	md, _ := d.Msg.Metadata()
	seq := md.Sequence.Stream
	l.mu.Lock()
	if h, ok := l.holder[seq]; ok && h != m.id {
		l.twice = append(l.twice, fmt.Sprintf("seq %d to %s while %s held it", seq, m.id, h))
	}
	l.holder[seq] = m.id
	if l.heldByPar[m.id] == nil {
		l.heldByPar[m.id] = map[int]int{}
	}
	l.heldByPar[m.id][d.Partition]++
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := d.Msg.DoubleAck(ctx)
	cancel()
	l.mu.Lock()
	delete(l.holder, seq)
	l.heldByPar[m.id][d.Partition]--
	if err == nil {
		l.acked[string(d.Msg.Data())]++
	}
	l.mu.Unlock()
}

// busy reports whether member id holds an un-acked message of partition n.
func (l *holdLedger) busy(id string) func(int) bool {
	return func(n int) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.heldByPar[id][n] > 0
	}
}

// A member that starts alone takes every partition; a second member that
// joins gets its share (the assignment's, two each) without either stopping, while
// messages keep flowing, and no message is handed to one member while
// another still holds it.
func TestPartitions_are_shared_out_when_a_member_joins_and_no_message_is_held_twice(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second)
	l := newLedger()
	a := e.startMember("ma", l.handle, l.busy("ma"))
	sessions := make([]string, e.p)
	for n := range sessions {
		sessions[n] = e.sessionIn(n)
	}
	var sent []string
	round := 0
	publishRound := func() {
		for _, s := range sessions {
			body := fmt.Sprintf("%s-%d", s, round)
			e.publish(s, body)
			sent = append(sent, body)
		}
		round++
	}
	publishRound()
	lastRound := time.Now()
	testutil.Eventually(t, 20*time.Second, "the lone member to hold every partition", func() bool { return len(a.g.Held()) == e.p })

	b := e.startMember("mb", l.handle, l.busy("mb"))
	// Messages keep coming: a partition changes hands only with a delivery.
	testutil.Eventually(t, 40*time.Second, "two members to hold two partitions each", func() bool {
		if time.Since(lastRound) >= 100*time.Millisecond {
			publishRound()
			lastRound = time.Now()
		}
		return len(a.g.Held()) == 2 && len(b.g.Held()) == 2
	})

	if held := append(a.g.Held(), b.g.Held()...); len(held) != e.p {
		t.Fatalf("members hold partitions %v between them, want each of %d once", held, e.p)
	} else {
		slices.Sort(held)
		if !slices.Equal(held, []int{0, 1, 2, 3}) {
			t.Fatalf("members hold partitions %v between them, want 0–3 once each", held)
		}
	}
	testutil.Eventually(t, 20*time.Second, "every message to be handled", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, body := range sent {
			if l.acked[body] == 0 {
				return false
			}
		}
		return true
	})

	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.twice) > 0 {
		t.Fatalf("messages handed to a member while another held them: %s", strings.Join(l.twice, "; "))
	}
	for _, body := range sent {
		if n := l.acked[body]; n != 1 {
			t.Errorf("message %s handled %d times, want once", body, n)
		}
	}
	if len(b.bodies()) == 0 {
		t.Fatal("the member that joined was handed nothing")
	}
}

// A member that dies holding every pending message of its partitions (each
// delivered to it, none acked) leaves the server nothing to deliver, so its
// pins lapse without moving. The next member must take every partition and
// be handed those messages, each session's in stream order, once the dead
// one's pin and heartbeat have lapsed: not when their AckWait (here a
// minute) runs out.
func TestA_dead_member_s_partitions_and_unacked_messages_go_to_the_next_in_order(t *testing.T) {
	e := newEnv(t, 4, time.Minute)
	dying := e.startMember("dying", nil, func(int) bool { return true }) // holds, never acks
	var sessions []string
	for n := range e.p {
		sessions = append(sessions, e.sessionIn(n))
	}
	sent := map[string][]string{}
	for i := range 3 {
		for _, s := range sessions {
			body := fmt.Sprintf("%s-%d", s, i)
			e.publish(s, body)
			sent[s] = append(sent[s], body)
		}
	}
	testutil.Eventually(t, 20*time.Second, "every message to be out to the dying member, un-acked, with nothing left to deliver", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for n := range e.p {
			c, err := e.js.Consumer(ctx, bus.WorkStream(0), bus.WorkConsumerName(n))
			if err != nil {
				return false
			}
			info, err := c.Info(ctx)
			if err != nil || info.NumAckPending != 3 || info.NumPending != 0 {
				return false
			}
		}
		return true
	})

	dying.nc.Close() // SIGKILL, as far as NATS can tell: no more acks, heartbeats or pulls

	l := newLedger()
	next := e.startMember("next", l.handle, l.busy("next"))
	testutil.Eventually(t, 30*time.Second, "the dead member's messages to reach the next member", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, bodies := range sent {
			for _, body := range bodies {
				if l.acked[body] == 0 {
					return false
				}
			}
		}
		return true
	})

	if held := next.g.Held(); len(held) != e.p {
		t.Errorf("the next member holds partitions %v, want all %d", held, e.p)
	}
	got := next.bodies()
	for s, want := range sent {
		var order []string
		for _, body := range got {
			if strings.HasPrefix(body, s+"-") && !slices.Contains(order, body) {
				order = append(order, body)
			}
		}
		if !slices.Equal(order, want) {
			t.Errorf("session %s handed %v, want %v (stream order)", s, order, want)
		}
	}
}

// pinOf reads the pin the server holds for work partition n ("" if none).
func (e *env) pinOf(n int) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := e.js.Consumer(ctx, bus.WorkStream(0), bus.WorkConsumerName(n))
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return pinnedTo(info)
}

// A pin that lapses while its member is alive moves the partition for
// nothing, and every move resets the consumer and redelivers held messages.
func TestA_quiet_partition_keeps_its_pin_past_the_pinned_TTL(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second) // PinnedTTL 2s
	l := newLedger()
	e.startMember("m1", l.handle, nil)
	s := e.sessionIn(1)
	e.publish(s, "hi")
	testutil.Eventually(t, 20*time.Second, "the message to be handled", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.acked["hi"] == 1
	})

	pin := e.pinOf(1)
	if pin == "" {
		t.Fatal("partition 1 has no pin after delivering a message")
	}
	// Watch the quiet partition for well over two pinned TTLs: what must
	// not happen has no event to wait for, so the pin is sampled.
	watch := time.NewTimer(5 * time.Second)
	defer watch.Stop()
	sample := time.NewTicker(200 * time.Millisecond)
	defer sample.Stop()
	for {
		if got := e.pinOf(1); got != pin {
			t.Fatalf("partition 1's pin moved from %q to %q while its member was alive and the partition quiet", pin, got)
		}
		select {
		case <-watch.C:
			return
		case <-sample.C:
		}
	}
}

// pinnedPull publishes body to a session in partition n and fetches it
// with a pull of the test's own, which the server pins: the test takes
// the partition as another member would. It returns the partition's
// consumer and the pin.
func (e *env) pinnedPull(ctx context.Context, n int, body string) (jetstream.Consumer, string) {
	e.t.Helper()
	cons, err := e.js.Consumer(ctx, bus.WorkStream(0), bus.WorkConsumerName(n))
	if err != nil {
		e.t.Fatal(err)
	}
	e.publish(e.sessionIn(n), body)
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second), jetstream.FetchPriorityGroup(bus.WorkGroup))
	if err != nil {
		e.t.Fatal(err)
	}
	for range batch.Messages() {
	}
	pin := e.pinOf(n)
	if pin == "" {
		e.t.Fatalf("the test's pull of partition %d was not pinned", n)
	}
	return cons, pin
}

// memberThatHandled starts member id and waits until it has handled a
// message of partition n: it holds n. busy is the member's Busy (nil:
// never).
func (e *env) memberThatHandled(id string, n int, busy func(int) bool) *member {
	e.t.Helper()
	l := newLedger()
	m := e.startMember(id, l.handle, busy)
	e.publish(e.sessionIn(n), "hi")
	testutil.Eventually(e.t, 20*time.Second, "the message to be handled", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.acked["hi"] == 1
	})
	return m
}

// A member that stops and leaves unpins what it held, so another takes
// it at once rather than after the pinned TTL; stopping its pulls had
// forgotten the pins, and Leave unpinned nothing.
func TestA_member_that_leaves_unpins_what_it_held(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second)
	m := e.memberThatHandled("m1", 1, nil)
	if e.pinOf(1) == "" {
		t.Fatal("partition 1 has no pin after delivering a message")
	}
	m.g.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.g.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if pin := e.pinOf(1); pin != "" {
		t.Errorf("after the member left, partition 1 is still pinned (%q)", pin)
	}
}

// Between Stop and Leave a runner lets its runs end; a pin can lapse
// meanwhile and another member be pinned. Leave must not unpin that one:
// the server's unpin takes whatever pin there is.
func TestA_member_that_leaves_late_does_not_unpin_the_partition_s_new_holder(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second)
	m := e.memberThatHandled("m1", 1, nil)
	m.g.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The pin lapses (here: is removed) and a pull of the test's own is
	// pinned with the next message.
	st, err := e.js.Stream(ctx, bus.WorkStream(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UnpinConsumer(ctx, bus.WorkConsumerName(1), bus.WorkGroup); err != nil {
		t.Fatal(err)
	}
	_, holder := e.pinnedPull(ctx, 1, "after")
	if err := m.g.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.pinOf(1); got != holder {
		t.Errorf("after the member left, partition 1's pin is %q, want its new holder's %q", got, holder)
	}
}

// A member stopped while it hands a partition off (its runs still going,
// its puller stopped and its pin dropped) unpins that partition when it
// leaves too, by the pin the hand-off kept: otherwise the partition's
// owner waits out the pinned TTL for it.
func TestA_member_stopped_mid_hand_off_unpins_the_partition_when_it_leaves(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second)
	n := ownedBy(e.p, []string{"m1", "m2"}, "m2")[0]
	// Runs never end here, so the hand-off waits for them.
	m1 := e.memberThatHandled("m1", n, func(int) bool { return true })
	pin := e.pinOf(n)
	if pin == "" {
		t.Fatalf("partition %d has no pin after delivering a message", n)
	}
	e.startMember("m2", nil, nil)
	testutil.Eventually(t, 20*time.Second, "m1 to begin handing the partition to m2", func() bool {
		return m1.g.parts[n].isDraining()
	})
	m1.g.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m1.g.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.pinOf(n); got == pin {
		t.Errorf("after m1 left mid hand-off, partition %d is still pinned to it (%q)", n, got)
	}
}

// NextExpiry is when the first other member's lease runs out, as its
// last beat says: the moment a member that died is seen gone. A member's
// own lease is not in it, and with no other member it is zero.
func TestNext_expiry_is_the_first_other_member_s_lease_end_and_never_its_own(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second)
	m1 := e.startMember("m1", nil, nil)
	testutil.Eventually(t, 20*time.Second, "m1 to see its own beat", func() bool {
		_, ok := m1.g.peers.fresh()
		return ok
	})
	if at := m1.g.NextExpiry(); !at.IsZero() {
		t.Fatalf("alone, m1's next expiry is %s, want none (its own lease is not a peer's)", at)
	}
	m2 := e.startMember("m2", nil, nil)
	testutil.Eventually(t, 20*time.Second, "m1 to see m2's lease", func() bool {
		return !m1.g.NextExpiry().IsZero()
	})
	// m2 stops beating: it is gone once the lease its last beat declared
	// is out, not before.
	m2.g.Stop()
	last := m1.g.NextExpiry()
	testutil.Eventually(t, 20*time.Second, "m2 to be gone", func() bool {
		st, err := m1.g.Status(context.Background(), "m2", "m2-1")
		return err == nil && st == Gone
	})
	if now := time.Now(); now.Before(last) {
		t.Errorf("m2 was gone at %s, before its lease end as m1 saw it (%s)", now.Format(time.StampMilli), last.Format(time.StampMilli))
	}
	if next := m1.g.NextExpiry(); !next.IsZero() {
		t.Errorf("with m2 gone, m1's next expiry is %s, want none", next)
	}
}

// A member is told when another member's lease runs out (OnPeerGone,
// the runner's sweep for a dead runner's runs), and not while the other
// beats: a live member's beats move its lease's end on before it comes.
func TestA_member_is_told_when_a_peer_s_lease_runs_out_and_not_while_it_beats(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second)
	gone := make(chan struct{}, 16)
	m1 := e.startMemberWith("m1", nil, nil, func(c *Config) {
		c.OnPeerGone = func(context.Context) { gone <- struct{}{} }
	})
	m2 := e.startMember("m2", nil, nil)
	// m2 beats: its lease's end, as m1 sees it, moves on three times.
	var ends []time.Time
	testutil.Eventually(t, 20*time.Second, "m2's lease end to move on three times", func() bool {
		if at := m1.g.NextExpiry(); !at.IsZero() && (len(ends) == 0 || at.After(ends[len(ends)-1])) {
			ends = append(ends, at)
		}
		return len(ends) >= 4
	})
	select {
	case <-gone:
		t.Fatal("m1 was told a peer is gone while m2 was beating")
	default:
	}
	m2.g.Stop() // no Leave: as if it died
	select {
	case <-gone:
	case <-time.After(20 * time.Second):
		t.Fatal("m1 was never told that m2's lease ran out")
	}
	st, err := m1.g.Status(context.Background(), "m2", "m2-1")
	if err != nil || st != Gone {
		t.Errorf("when m1 was told, m2's status is %v (%v), want gone", st, err)
	}
}

// A pull loop's nap ends when the member is woken, not at its end.
func TestA_nap_ends_when_the_member_is_woken(t *testing.T) {
	g := &Group{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan bool, 1)
	go func() { done <- g.nap(ctx, time.Hour) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case ok := <-done:
			if !ok {
				t.Fatal("the nap ended with its context, not woken")
			}
			return
		case <-tick.C:
			g.wake.broadcast() // again: the nap may not have begun at the last one
		}
	}
}

func (e *env) testLog() zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.WarnLevel)
}

// runLedger is a workload whose partitions are never idle under traffic:
// each message is a "run" that holds it un-acked for runFor (the shape of
// the workload, not a wait the test relies on), so a member holding a
// partition always has work of it in hand while messages keep coming. It
// records every delivery, for duplicates, losses and per-session order.
type runLedger struct {
	mu      sync.Mutex
	inHand  map[string]map[int]int // member -> partition -> un-acked
	got     map[string]int         // body -> deliveries, across members
	by      map[string][]string    // body -> who took each delivery, for a failure to show
	order   map[string][]int       // session -> round numbers, as delivered
	badBody []string
}

const runFor = 100 * time.Millisecond

func newRunLedger() *runLedger {
	return &runLedger{inHand: map[string]map[int]int{}, got: map[string]int{}, by: map[string][]string{}, order: map[string][]int{}}
}

// handle records d and acks it (confirmed) runFor later.
func (l *runLedger) handle(m *member, d Delivery) {
	body := string(d.Msg.Data())
	var session string
	var round int
	l.mu.Lock()
	if _, err := fmt.Sscanf(strings.Replace(body, "-", " ", 1), "%s %d", &session, &round); err != nil {
		l.badBody = append(l.badBody, body)
	}
	l.got[body]++
	md, _ := d.Msg.Metadata()
	if md != nil {
		l.by[body] = append(l.by[body], fmt.Sprintf("%s p%d tenure %d seq %d delivery %d at %s",
			m.id, d.Partition, d.Tenure, md.Sequence.Stream, md.NumDelivered, time.Now().Format("15:04:05.000")))
	}
	l.order[session] = append(l.order[session], round)
	if l.inHand[m.id] == nil {
		l.inHand[m.id] = map[int]int{}
	}
	l.inHand[m.id][d.Partition]++
	l.mu.Unlock()
	time.AfterFunc(runFor, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.Msg.DoubleAck(ctx)
		l.mu.Lock()
		l.inHand[m.id][d.Partition]--
		l.mu.Unlock()
	})
}

func (l *runLedger) busy(id string) func(int) bool {
	return func(n int) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.inHand[id][n] > 0
	}
}

// Under continuous traffic every partition always has a run in hand, so a
// member that gave up only idle partitions never gave any. The partitions
// assigned to a member that joins must still move to it (each drained
// first: its runs end and are acked before the owner takes it), and no
// message may be delivered twice, lost, or out of its session's order.
func TestBusy_partitions_move_to_a_joining_member_with_no_message_twice_lost_or_out_of_order(t *testing.T) {
	e := newEnv(t, 6, 10*time.Second)
	l := newRunLedger()
	a := e.startMember("ma", l.handle, l.busy("ma"))
	b := e.startMember("mb", l.handle, l.busy("mb"))
	sessions := make([]string, 0, 2*e.p)
	for n := range e.p {
		s := e.sessionIn(n)
		sessions = append(sessions, s, s+"x")
	}
	stop, sent := e.publishContinuously(sessions)
	testutil.Eventually(t, 60*time.Second, "two members to hold three partitions each", func() bool {
		return len(a.g.Held()) == 3 && len(b.g.Held()) == 3
	})
	c := e.startMember("mc", l.handle, l.busy("mc"))
	testutil.Eventually(t, 60*time.Second, "the joining member to be given its two partitions", func() bool {
		return len(a.g.Held()) == 2 && len(b.g.Held()) == 2 && len(c.g.Held()) == 2
	})
	if held := slices.Sorted(slices.Values(slices.Concat(a.g.Held(), b.g.Held(), c.g.Held()))); !slices.Equal(held, []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("members hold partitions %v between them, want 0–5 once each", held)
	}
	bodies := stop()
	testutil.Eventually(t, 60*time.Second, "every message to be delivered", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, body := range bodies {
			if l.got[body] == 0 {
				return false
			}
		}
		return true
	})
	l.check(t, bodies, sent)
	if len(c.bodies()) == 0 {
		t.Fatal("the member that joined was handed nothing")
	}
}

// check asserts each body was delivered once and each session's rounds in
// order.
func (l *runLedger) check(t *testing.T, bodies []string, sent map[string]int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.badBody) > 0 {
		t.Fatalf("unreadable bodies %v", l.badBody)
	}
	for _, body := range bodies {
		if n := l.got[body]; n != 1 {
			t.Errorf("message %s delivered %d times, want once: %q", body, n, l.by[body])
		}
	}
	for s, rounds := range l.order {
		want := make([]int, sent[s])
		for i := range want {
			want[i] = i
		}
		if !slices.Equal(rounds, want) {
			t.Errorf("session %s delivered rounds %v, want 0…%d in order", s, rounds, sent[s]-1)
		}
	}
}

// publishContinuously publishes a round (one message per session) every
// 20 ms until the returned stop is called; stop returns every body sent
// and the rounds per session.
func (e *env) publishContinuously(sessions []string) (stop func() []string, sent map[string]int) {
	e.t.Helper()
	done, over := make(chan struct{}), make(chan struct{})
	var bodies []string
	sent = map[string]int{}
	go func() {
		defer close(over)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for round := 0; ; round++ {
			for _, s := range sessions {
				body := fmt.Sprintf("%s-%d", s, round)
				if _, err := e.js.Publish(context.Background(), "jetway.events.t1."+s, []byte(body)); err != nil {
					e.t.Errorf("publish %s: %v", body, err)
					return
				}
				bodies = append(bodies, body)
				sent[s]++
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() []string { close(done); <-over; return bodies }, sent
}

// On a quiet bus a member waits for each partition assigned to it, and
// when a member joins, the partitions assigned to the newcomer are waited
// for by it alone: the first member stops pulling them though no message
// came to wake it. Two members waiting for one partition each took the
// other for its owner (whoever the server pinned at the first event then
// handed it off at once), and the runners' sweeps, which look at a
// partition nobody holds through the member that waits for it, each left
// it to the other.
func TestA_quiet_partition_is_waited_for_by_its_owner_alone_after_a_member_joins(t *testing.T) {
	e := newEnv(t, 4, 2*time.Second)
	kv, err := bus.OpenBucket(t.Context(), e.js, bus.BucketRunners)
	if err != nil {
		t.Fatal(err)
	}
	pulling := func(id string) ([]int, error) {
		en, err := kv.Get(t.Context(), id)
		if err != nil {
			return nil, err
		}
		var b Beat
		if err := json.Unmarshal(en.Value(), &b); err != nil {
			return nil, err
		}
		if len(b.Partitions) != 0 {
			return nil, fmt.Errorf("%s holds %v on a bus where no message was sent", id, b.Partitions)
		}
		return slices.Sorted(slices.Values(b.Pulling)), nil
	}
	e.startMember("ma", nil, nil)
	testutil.EventuallyNil(t, 20*time.Second, "the lone member to wait for every partition", func() error {
		got, err := pulling("ma")
		if err == nil && !slices.Equal(got, []int{0, 1, 2, 3}) {
			err = fmt.Errorf("ma waits for %v", got)
		}
		return err
	})

	e.startMember("mb", nil, nil)
	want := map[string][]int{"ma": ownedBy(e.p, []string{"ma", "mb"}, "ma"), "mb": ownedBy(e.p, []string{"ma", "mb"}, "mb")}
	testutil.EventuallyNil(t, 20*time.Second, "each partition waited for by its owner alone", func() error {
		for id, parts := range want {
			got, err := pulling(id)
			if err != nil {
				return err
			}
			if !slices.Equal(got, parts) {
				return fmt.Errorf("%s waits for %v, want its own %v (the assignment: ma %v, mb %v)", id, got, parts, want["ma"], want["mb"])
			}
		}
		return nil
	})
}
