// Package partition is the runner's pinned partition group: it shares the
// partitions of the work shards among the live runners, pulls the ones this
// runner holds and hands each message to the runner, in stream order.
//
// JetStream has no per-key consumer group, so the group is built from one
// pinned durable consumer per partition (PriorityPolicyPinned): the server
// pins each partition to one puller. On top of that the group adds what the
// server does not do: a reset when a partition is taken over (so the old
// holder's un-acked messages come back in stream order), an assignment
// every member computes alike and hand-offs that drain a partition before
// it moves (the server pins to whoever pulls first), heartbeats that say who is
// alive and who holds what, and the rescue of a partition whose messages
// were all out to a member that died.
//
// It knows nothing of sessions or agents: the runner gives it a Deliver
// callback and a Busy question, and asks it who holds a partition and
// whether a runner is alive. It lives under services/runner/internal
// because the runner is its only user and its surface is shaped by what
// the runner needs, not offered as an API.
package partition

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/pkg/bus"
)

// Config declares a member of the group.
type Config struct {
	// JS reaches the work stream and its consumers.
	JS jetstream.JetStream
	// Peers is the heartbeat bucket (bus.BucketRunners).
	Peers jetstream.KeyValue
	// ID is the member's identity, stable across restarts; Incarnation
	// tells this process from an earlier one of the same ID.
	ID, Incarnation string
	// Partitions is P, the number of work partitions; Shards is K, the
	// number of work streams they are spread over (partition p in
	// bus.WorkStreamOf(p, K); 0 counts as 1).
	Partitions int
	Shards     int
	// Heartbeat is how often the member announces itself (default 1s);
	// StaleAfter is when a silent member counts as gone (default
	// 3×Heartbeat): the lease each stored beat grants.
	Heartbeat, StaleAfter time.Duration
	// Margin is how long before the others may count it gone the member
	// gives its lease up (default Heartbeat/2, less than StaleAfter): it
	// covers the clock offset between members and servers, drift over
	// a lease, and the time its runs take to stop (see lease).
	Margin time.Duration
	// OnLeaseLost, if set, is called when no beat renewed the member's lease
	// for StaleAfter−Margin, with the incarnation that ends. It must stop
	// every run of that incarnation before it returns: the member announces
	// a new incarnation only then, and the others may take the runs over
	// once the old lease is out.
	OnLeaseLost func(incarnation string)
	// Deliver receives every message of a held partition, in the order
	// the server hands them out. It is called from the partition's pulling
	// goroutine and must not block.
	Deliver func(Delivery)
	// Busy reports whether partition n has work in hand (held messages,
	// a live run): a hand-off unpins the partition only once it is not,
	// so the next holder's reset delivers nothing handled again.
	// Nil: never busy.
	Busy func(n int) bool
	// OnBeat, if set, runs after each heartbeat, on the heartbeat's
	// goroutine: it must not wait on the bus, or the next beat waits too
	// (the runner asks for its sweep here).
	OnBeat func(ctx context.Context)
	// OnPeerGone, if set, runs when another member's lease has just run
	// out (it stopped beating), on a goroutine of the group's: it must
	// not wait on the bus (the runner asks for its sweep here, so a dead
	// runner's runs are recovered at once, not at the next beat).
	OnPeerGone func(ctx context.Context)
	// Models, if not nil, is carried in every heartbeat (Beat.Models): what
	// the member serves, for readers outside the group.
	Models []string
	Log    zerolog.Logger
}

// Delivery is one message of a held partition.
type Delivery struct {
	Partition int
	Msg       jetstream.Msg
	// Tenure counts the times this member took the partition; what the
	// receiver learnt about order holds within one tenure (see Tenure).
	Tenure uint64
}

// Group is this member's view of the partitioned work queue.
type Group struct {
	cfg   Config
	log   zerolog.Logger
	parts []*part
	peers peers
	// work are the shard streams, by shard.
	work []jetstream.Stream
	// ackWait is the work consumers' AckWait (the same on every one).
	ackWait time.Duration

	lease *lease

	rel releaseClock
	// claimsChanged asks beatLoop for a beat between ticks (announce).
	claimsChanged chan struct{}
	// wake wakes the pull loops' naps when a peer's lease runs out.
	wake   waker
	assign assigner
	// joined is when this member's current incarnation (joinedInc) sent
	// its first beat: the others count it in the assignment settleTime
	// after (settled).
	joinedMu  sync.Mutex
	joined    time.Time
	joinedInc string
	pins      pinList
	lists     atomic.Int64 // listings of the consumers' pins (a test reads it)

	cancel context.CancelFunc
	wg     sync.WaitGroup

	// stoppedMu guards stoppedPins: the pin of each partition this member
	// held when Stop began, which Leave gives up (stopping forgets them).
	stoppedMu   sync.Mutex
	stoppedPins map[int]string
}

// New checks cfg; it does no I/O (Start does).
func New(cfg Config) (*Group, error) {
	if cfg.JS == nil || cfg.Peers == nil {
		return nil, errors.New("partition: config: JS and Peers are required")
	}
	if cfg.Partitions <= 0 {
		return nil, errors.New("partition: config: Partitions must be positive")
	}
	if cfg.ID == "" || cfg.Deliver == nil {
		return nil, errors.New("partition: config: ID and Deliver are required")
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 3 * cfg.Heartbeat
	}
	if cfg.Margin <= 0 {
		cfg.Margin = cfg.Heartbeat / 2
	}
	if cfg.Margin >= cfg.StaleAfter {
		return nil, fmt.Errorf("partition: config: Margin %s must be less than StaleAfter %s", cfg.Margin, cfg.StaleAfter)
	}
	if cfg.Busy == nil {
		cfg.Busy = func(int) bool { return false }
	}
	g := &Group{
		cfg:   cfg,
		log:   cfg.Log.With().Str("runner", cfg.ID).Logger(),
		peers: peers{kv: cfg.Peers, staleAfter: cfg.StaleAfter, self: cfg.ID},
		lease: newLease(cfg.Incarnation, cfg.StaleAfter-cfg.Margin),

		claimsChanged: make(chan struct{}, 1),
	}
	return g, nil
}

// stream is the name of the shard stream holding partition n.
func (g *Group) stream(n int) string { return bus.WorkStreamOf(n, g.cfg.Shards) }

// Start announces the member, opens the work consumers and pulls until
// ctx ends or Stop is called.
func (g *Group) Start(ctx context.Context) error {
	if err := g.beat(ctx); err != nil {
		return err
	}
	g.work = make([]jetstream.Stream, max(g.cfg.Shards, 1))
	for k := range g.work {
		work, err := g.cfg.JS.Stream(ctx, bus.WorkStream(k))
		if err != nil {
			return fmt.Errorf("partition: work stream: %w", err)
		}
		g.work[k] = work
	}
	g.parts = make([]*part, g.cfg.Partitions)
	for n := range g.parts {
		cons, err := g.cfg.JS.Consumer(ctx, g.stream(n), bus.WorkConsumerName(n))
		if err != nil {
			return fmt.Errorf("partition: work consumer %d: %w", n, err)
		}
		g.parts[n] = &part{n: n, cons: cons}
		g.ackWait = cons.CachedInfo().Config.AckWait
	}
	ctx, g.cancel = context.WithCancel(ctx)
	g.peers.watch(ctx, g.log)
	g.wg.Add(3)
	go func() { defer g.wg.Done(); g.beatLoop(ctx) }()
	go func() { defer g.wg.Done(); g.watchLease(ctx) }()
	go func() { defer g.wg.Done(); g.watchExpiries(ctx) }()
	for _, p := range g.parts {
		g.wg.Add(1)
		go func() { defer g.wg.Done(); g.consume(ctx, p) }()
	}
	return nil
}

// AckWait is the work consumers' redelivery timeout, as provisioned: an
// event not acked or told "in progress" within it goes to a runner again.
func (g *Group) AckWait() time.Duration { return g.ackWait }

// Stop stops pulling and heartbeats and waits for the group's goroutines.
// The member still looks alive to the others until Leave (or StaleAfter):
// the runner lets its runs end between the two.
func (g *Group) Stop() {
	held := map[int]string{}
	for _, p := range g.parts {
		if p == nil {
			continue
		}
		if pin := p.claimedPin(); pin != "" {
			held[p.n] = pin
		}
	}
	g.stoppedMu.Lock()
	if g.stoppedPins == nil { // a second Stop finds them forgotten
		g.stoppedPins = held
	}
	g.stoppedMu.Unlock()
	if g.cancel != nil {
		g.cancel()
	}
	g.wg.Wait()
}

// Leave unpins the partitions this member held when it stopped and
// removes its heartbeat, so the others take them at once rather than
// after the pinned TTL. Stopping its pulls forgot their pins (each pull
// loop drops its partition as it ends), so Leave unpins by the pins Stop
// recorded (a hand-off under way by the pin it kept), and only a
// partition whose pin is still that one: between Stop and Leave the runs
// end, a pin may lapse and another member be pinned, and the server's
// unpin takes whatever pin there is.
func (g *Group) Leave(ctx context.Context) error {
	g.stoppedMu.Lock()
	held := g.stoppedPins
	g.stoppedMu.Unlock()
	for n, pin := range held {
		if g.stillPinnedAs(ctx, g.parts[n], pin) {
			g.unpin(ctx, n)
		}
	}
	return g.peers.remove(ctx, g.cfg.ID)
}

// Held lists the partitions this member holds.
func (g *Group) Held() []int {
	var out []int
	for _, p := range g.parts {
		if p != nil && p.holding() {
			out = append(out, p.n)
		}
	}
	return out
}

// claims lists the partitions this member's heartbeat claims (held, or
// being handed off or taken back) and those it waits for as their owner.
func (g *Group) claims() (claimed, waiting []int) {
	for _, p := range g.parts {
		switch {
		case p == nil:
		case p.claimed():
			claimed = append(claimed, p.n)
		case p.waiting():
			waiting = append(waiting, p.n)
		}
	}
	return claimed, waiting
}

// joinedAt is when incarnation inc first beat, at the latest at.
func (g *Group) joinedAt(inc string, at time.Time) time.Time {
	g.joinedMu.Lock()
	defer g.joinedMu.Unlock()
	if inc != g.joinedInc {
		g.joinedInc, g.joined = inc, at
	}
	return g.joined
}

// Tenure is partition n's current tenure (0 for one never taken) and
// whether it is unbroken so far: every delivery of the tenure came in
// stream order from the reset that began it, none missed and none again.
// While it is, every older message of the partition still in the stream
// was delivered to this member earlier in the tenure.
func (g *Group) Tenure(n int) (tenure uint64, unbroken bool) {
	if n < 0 || n >= len(g.parts) || g.parts[n] == nil {
		return 0, false
	}
	p := g.parts[n]
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tenure, p.unbroken
}

// Owners maps each partition a live member holds to that member (holders)
// and each one a live member pulls as its owner, waiting for the server
// to pin it, to that member (waiting): read from one look at the
// heartbeats.
func (g *Group) Owners(ctx context.Context) (holders, waiting map[int]string) {
	return g.peers.owners(ctx)
}

// NextExpiry is when the first other member's heartbeat, as last seen,
// stops counting: the moment a member that died is seen gone (zero when
// no other member is seen alive). watchExpiries wakes the member then.
func (g *Group) NextExpiry() time.Time { return g.peers.nextExpiry() }

// Status tells whether member id, in the given incarnation, is alive. It
// reads the bucket afresh: a recovery rests on the answer.
func (g *Group) Status(ctx context.Context, id, incarnation string) (Liveness, error) {
	return g.peers.status(ctx, id, incarnation)
}

// beat announces the member and, once the bucket stored it, renews its
// lease from the moment it was sent.
func (g *Group) beat(ctx context.Context) error {
	inc, epoch, at, err := g.lease.sending()
	if err != nil {
		return fmt.Errorf("runner %s: heartbeat: %w", g.cfg.ID, err)
	}
	claimed, waiting := g.claims()
	b := Beat{
		Incarnation: inc, Started: at.UTC(), Joined: g.joinedAt(inc, at).UTC(),
		Partitions: claimed, Pulling: waiting, LeaseMS: g.cfg.StaleAfter.Milliseconds(), Models: g.cfg.Models,
	}
	if err := g.peers.put(ctx, g.cfg.ID, b); err != nil {
		return err
	}
	g.lease.renew(epoch, at)
	return nil
}

func (g *Group) beatLoop(ctx context.Context) {
	t := time.NewTicker(g.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.claimsChanged:
			// Between ticks: the others learn of a hand-off or a takeover
			// now rather than up to a heartbeat later. The runner's sweep
			// keeps to the ticks.
			if err := g.beat(ctx); err != nil && ctx.Err() == nil {
				g.log.Debug().Err(err).Msg("heartbeat after a change of partitions")
			}
		case <-t.C:
			if err := g.beat(ctx); err != nil && ctx.Err() == nil {
				g.log.Warn().Err(err).Msg("heartbeat")
			}
			if g.cfg.OnBeat != nil {
				g.cfg.OnBeat(ctx)
			}
		}
	}
}

// announce asks for a beat now: the partitions this member claims changed.
func (g *Group) announce() {
	select {
	case g.claimsChanged <- struct{}{}:
	default:
	}
}
