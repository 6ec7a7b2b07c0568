package partition

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// part is this member's view of one work consumer.
type part struct {
	n    int
	cons jetstream.Consumer

	mu sync.Mutex
	// pin is the last Nats-Pin-Id seen; a new one means the server just
	// gave this member the partition. pinSince is when it was seen: a
	// listing of the pins asked for before then cannot know it.
	pin      string
	pinSince time.Time
	// resetting: after ResetConsumer, deliveries are ignored until the
	// consumer sequence restarts at 1, so the stream's order holds.
	resetting bool
	// held: this member has received messages under the current pin.
	held bool
	// unclaimedSince is when this member first saw the partition held by
	// no live member (zero while someone holds it).
	unclaimedSince time.Time
	// wanted: the partition is assigned to this member, which pulls it
	// and waits for the server to pin it here (its heartbeat says so,
	// so no other member takes it for an orphan).
	wanted bool
	// draining: a hand-off is under way; the member no longer pulls the
	// partition but still claims it until its work in hand is over.
	// drainPin is the pin it held the partition under, which its stopped
	// puller dropped (drop): the hand-off unpins by it, and a Stop in the
	// middle of the hand-off records it for Leave to.
	draining bool
	drainPin string
	// resume: a hand-off was given up; the member pulls the partition
	// again, claiming it, whoever it is assigned to, until it is held.
	resume bool
	// quietAt is when the requests of this member's last batch pull of p
	// have expired: nothing more is delivered to them, and a takeover's
	// reset waits for it (see await).
	quietAt time.Time
	// handOffAfter: no hand-off begins before then (after one given up).
	handOffAfter time.Time
	// tenure counts the times this member took the partition.
	tenure uint64
	// unbroken: every delivery of this tenure so far came in stream order
	// from the reset that began it (see streamOrder); nextCseq is the
	// consumer sequence that keeps it so.
	unbroken bool
	nextCseq uint64
}

// streamOrder records one delivery of the tenure in p.unbroken. A reset
// leaves the consumer at its ack floor with no pending or redelivery state,
// so from there it hands out the partition's messages in stream order,
// consumer sequence 1, 2, 3, …, each delivered for the first time. A gap in
// the consumer sequence (a delivery that went to a pull this member
// dropped) or a redelivery (a nak, an expired AckWait) breaks it for the
// rest of the tenure. Call with p.mu held.
func (p *part) streamOrder(md *jetstream.MsgMetadata) {
	p.unbroken = p.unbroken && md.Sequence.Consumer == p.nextCseq && md.NumDelivered == 1
	p.nextCseq = md.Sequence.Consumer + 1
}

func (p *part) holding() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// claimed reports whether this member's heartbeat claims the partition:
// held, being handed off, or being taken back after a hand-off gave up.
func (p *part) claimed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held || p.draining || p.resume
}

// claimedPin is the pin of a partition this member claims ("" for one it
// does not claim): the puller's, or a hand-off's under way.
func (p *part) claimedPin() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.held || p.resume:
		return p.pin
	case p.draining:
		return p.drainPin
	}
	return ""
}

func (p *part) isDraining() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.draining
}

func (p *part) resuming() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resume
}

// waiting reports whether this member pulls the partition as its owner
// without holding it yet.
func (p *part) waiting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wanted && !p.held
}

func (p *part) setWanted(w bool) {
	p.mu.Lock()
	p.wanted = w
	p.mu.Unlock()
}

// mayHandOff reports whether a hand-off may begin (none was given up
// within drainBackoff).
func (p *part) mayHandOff() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !time.Now().Before(p.handOffAfter)
}

// endDrain ends a hand-off: done, or given up (the member pulls the
// partition again and tries no hand-off for drainBackoff).
func (p *part) endDrain(done bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draining, p.drainPin = false, ""
	if !done {
		p.resume, p.handOffAfter = true, time.Now().Add(drainBackoff)
	}
}

// orphaned reports whether the partition has gone unclaimed (no live
// member holds it or waits for it) for orphanGrace, as this member saw.
func (p *part) orphaned(claimed bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if claimed {
		p.unclaimedSince = time.Time{}
		return false
	}
	if p.unclaimedSince.IsZero() {
		p.unclaimedSince = time.Now()
	}
	return time.Since(p.unclaimedSince) >= orphanGrace
}

// drop forgets that this member holds p and returns the pin it held p
// under ("" for none), which a hand-off still needs (handOff). While p is
// draining it keeps that pin as the hand-off's, and returns the one kept
// when the puller had none left to drop.
func (p *part) drop() (pin string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pin = p.pin
	p.held, p.pin = false, ""
	if !p.draining {
		return pin
	}
	if pin != "" {
		p.drainPin = pin
	}
	return p.drainPin
}

// consume pulls partition p while this member wants it: one message at a
// time until the server pins p here (await), then in batches (pull).
func (g *Group) consume(ctx context.Context, p *part) {
	for ctx.Err() == nil {
		if p.isDraining() {
			// A hand-off begun with no puller to stop: finish it, or the
			// partition stays claimed here and pulled by nobody.
			g.handOff(ctx, p, time.Now(), p.drop())
			continue
		}
		if !g.wantPull(ctx, p) {
			if !g.nap(ctx, rebalanceTick) {
				return
			}
			continue
		}
		if !p.holding() {
			g.await(ctx, p)
			continue
		}
		g.pull(ctx, p)
	}
}

// Resetting a work consumer (a takeover, a stranded partition) is safe only
// while nothing can be delivered from it. The server applies a reset
// through the consumer's Raft log, and a delivery made between the
// reset's proposal and its application lands after the reset in the
// replicated state, with a stream sequence past the messages the reset
// hands out again; those redeliveries are then missing from the
// replicated pending set. A new consumer leader, or the stream's interest
// check, takes them for acked: an event its runner let go un-acked (a
// lost session) was neither delivered again nor kept in the stream
// (nats-server v2.15.2; a chaos run lost two events this way, and
// TestA_reset_that_a_delivery_races_leaves_messages_out_of_the_replicated_state
// shows it on the server alone). So a member that does not hold p pulls
// it one message at a time: when the server pins p here, the request that
// carried the message is spent, no other member is served while the pin
// is this member's, and the takeover's reset has nothing to race.

// await pulls p one message at a time until the server pins it here, and
// looks between pulls for messages stranded with a member that died
// (lookForOrphan). It returns when p is held, or is no longer to be
// waited for (wantPull, asked again after every pull).
func (g *Group) await(ctx context.Context, p *part) {
	look := time.Now().Add(orphanLapse) // a member that begins to wait may do so because p's holder just died
	var reset time.Time
	for ctx.Err() == nil {
		wait := max(min(pullExpiry(p.cons), time.Until(look)), orphanLapse)
		batch, err := p.cons.Fetch(1, jetstream.FetchPriorityGroup(bus.WorkGroup), jetstream.FetchMaxWait(wait))
		if err != nil {
			g.log.Warn().Err(err).Int("partition", p.n).Msg("pull")
			if !sleep(ctx, time.Second) {
				return
			}
			continue
		}
		for m := range batch.Messages() {
			g.deliver(ctx, p, m, true)
		}
		if p.holding() || p.isDraining() {
			return
		}
		if !time.Now().Before(look) {
			look = g.lookForOrphan(ctx, p, &reset)
		}
		if !g.wantPull(ctx, p) {
			return
		}
	}
}

// pull pulls p, held here, in batches until it is to stop: a hand-off,
// the pin moved away, or a new pin (deliver).
func (g *Group) pull(ctx context.Context, p *part) {
	it, err := p.cons.Messages(jetstream.PullPriorityGroup(bus.WorkGroup), jetstream.PullMaxMessages(256), jetstream.PullExpiry(pullExpiry(p.cons)))
	if err != nil {
		g.log.Warn().Err(err).Int("partition", p.n).Msg("pull")
		sleep(ctx, time.Second)
		return
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-stop:
		}
		it.Stop()
	}()
	released := make(chan struct{})
	go func() { defer close(released); g.watchRelease(ctx, p, it, stop) }()
	for {
		m, err := it.Next()
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				g.log.Debug().Err(err).Int("partition", p.n).Msg("pull ended")
			}
			break
		}
		if !g.deliver(ctx, p, m, false) {
			it.Stop()
			break
		}
	}
	stopped := time.Now()
	close(stop)
	// The pull can end by itself (its heartbeats missed on a cut
	// link) while the watcher decides to hand p off: once the watcher
	// is gone, its decision is in p.draining.
	<-released
	pin := p.drop()
	p.mu.Lock()
	p.quietAt = stopped.Add(pullExpiry(p.cons))
	p.mu.Unlock()
	if p.isDraining() {
		g.handOff(ctx, p, stopped, pin)
	}
}

// deliver applies the pin rules to one message and hands it on; single
// says it came alone, on a request now spent. It reports false when the
// batch pull it came from is to stop: the server pinned p here anew
// under it (a lapsed pin, a new consumer leader), and the takeover's reset
// must wait until that pull's requests have expired (quietAt).
func (g *Group) deliver(ctx context.Context, p *part, m jetstream.Msg, single bool) bool {
	pin := m.Headers().Get("Nats-Pin-Id")
	md, err := m.Metadata()
	if err != nil {
		return true
	}
	p.mu.Lock()
	if pin != "" && pin != p.pin {
		if !single {
			p.mu.Unlock()
			g.log.Info().Int("partition", p.n).Msg("pinned here anew: taking the partition over once the pull's requests have expired")
			return false
		}
		// Takeover: the previous holder may have left messages un-acked
		// that the server would redeliver out of order. Reset the consumer
		// so delivery restarts from the first un-acked message.
		p.pin, p.pinSince, p.resetting, p.held, p.unbroken = pin, time.Now(), true, true, false
		p.tenure++
		quiet := p.quietAt
		p.mu.Unlock()
		if !sleep(ctx, time.Until(quiet)) {
			return true
		}
		if _, err := g.cfg.JS.ResetConsumer(ctx, g.stream(p.n), bus.WorkConsumerName(p.n)); err != nil {
			g.log.Warn().Err(err).Int("partition", p.n).Msg("reset on takeover")
			p.mu.Lock()
			p.resetting = false // delivery goes on, with no reset behind it: never unbroken
			p.mu.Unlock()
		} else {
			g.log.Info().Int("partition", p.n).Msg("took partition")
			g.announce()
		}
		return true
	}
	if p.resetting {
		if md.Sequence.Consumer != 1 {
			p.mu.Unlock()
			g.log.Debug().Int("partition", p.n).Uint64("seq", md.Sequence.Stream).Uint64("cseq", md.Sequence.Consumer).Msg("ignored while resetting")
			return true
		}
		p.resetting = false
		p.unbroken, p.nextCseq = true, 1
	}
	p.held, p.resume = true, false
	p.streamOrder(md)
	tenure := p.tenure
	p.mu.Unlock()
	g.cfg.Deliver(Delivery{Partition: p.n, Msg: parsedMsg{Msg: m, md: md}, Tenure: tenure})
	return true
}

// parsedMsg is a delivered message that keeps its metadata, parsed here
// once: the receiver asks for it several times per event (for its order,
// its ack, the words that keep it in hand), and each ask parsed the reply
// subject again. The metadata is shared: read it, never change it.
type parsedMsg struct {
	jetstream.Msg
	md *jetstream.MsgMetadata
}

// Metadata is the message's metadata as it was delivered.
func (m parsedMsg) Metadata() (*jetstream.MsgMetadata, error) { return m.md, nil }

// pullExpiry is how long one pull request waits. The server renews a pin
// only when its holder sends a new pull request; with the client's default
// 30 s expiry a quiet partition's pin lapsed after PinnedTTL and moved to
// whichever member had a request waiting, every few seconds, each move a
// reset that redelivered every held message. Pulling again well within the
// TTL keeps the pin where it is until its holder really stops.
func pullExpiry(c jetstream.Consumer) time.Duration {
	const minExpiry = time.Second // the client's floor
	ttl := c.CachedInfo().Config.PinnedTTL
	if ttl <= 0 {
		ttl = bus.DefaultWorkPinnedTTL
	}
	return max(ttl/2, minExpiry)
}

// lookForOrphan takes back a partition's messages from a member that died
// holding them, and says when to look again. The server moves a pin only
// with a delivery: when every pending message was already delivered to
// the dead member, the pin lapses after the pinned TTL with nothing left
// to deliver, and the messages came back only when their AckWait ran out.
// So a partition this member waits for, claimed by no live member, pinned
// to nobody, with messages out for acks, is reset: they are delivered
// again, from the first un-acked one, to whoever waits for it. await asks
// between its pulls, so no request of this member's is out; another's
// that waits (it too pulls p) makes the reset wait too, as a delivery to
// it could race the reset. lastReset spaces resets by orphanGrace.
func (g *Group) lookForOrphan(ctx context.Context, p *part, lastReset *time.Time) time.Time {
	next := time.Now().Add(orphanCheck)
	if time.Since(*lastReset) < orphanGrace {
		return next
	}
	// The consumer's own state first: one request, and for a quiet
	// partition (nothing out for acks) the only one.
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	info, err := p.cons.Info(ictx)
	cancel()
	if err != nil {
		return next
	}
	_, claimed := g.peers.holders(ctx)[p.n]
	switch orphanVerdict(info.NumAckPending, pinnedTo(info), claimed, info.NumWaiting) {
	case orphanWait:
		return next
	case orphanSoon:
		return time.Now().Add(orphanLapse)
	}
	if _, err := g.cfg.JS.ResetConsumer(ctx, g.stream(p.n), bus.WorkConsumerName(p.n)); err != nil {
		g.log.Warn().Err(err).Int("partition", p.n).Msg("reset an orphaned partition")
		return next
	}
	*lastReset = time.Now()
	g.log.Info().Int("partition", p.n).Int("unacked", info.NumAckPending).Msg("reset an orphaned partition: its events were out to a runner that is gone")
	return next
}

// orphanCheck is how often a member waiting for a partition looks for
// messages stranded with a member that is gone; orphanLapse how often
// while they wait for a dead member's pin to lapse.
const (
	orphanCheck = time.Second
	orphanLapse = 100 * time.Millisecond
)

// What a look at a partition this member waits for finds.
type orphan int

const (
	orphanWait  orphan = iota // nothing stranded, or its holder is live
	orphanSoon                // stranded, but pinned to a member gone, or another's pull waits
	orphanReset               // stranded, pinned to nobody, nobody else pulling: reset it
)

// orphanVerdict judges a partition this member waits for from its
// consumer's messages out for acks (pending), its pin, whether a live
// member says it holds it, and the pull requests of other members waiting
// at the server (this member has none out when it asks). Messages out
// under a pin no live member claims were delivered to a member that died:
// its pin lapses within the pinned TTL, when the partition can be reset,
// so the look comes again within orphanLapse, not a second later (a
// failover's last sessions waited for that second). Another member's
// waiting pull could be served between the reset's proposal and its
// application (see await): the look comes again soon, and if that member
// keeps pulling, the messages come back with their AckWait instead.
func orphanVerdict(pending int, pin string, claimed bool, waiting int) orphan {
	switch {
	case pending == 0 || claimed:
		return orphanWait // a live holder's acks are on their way
	case pin != "" || waiting > 0:
		return orphanSoon
	}
	return orphanReset
}

// pinnedTo is the pin of the work group in a consumer's info ("" for none).
func pinnedTo(info *jetstream.ConsumerInfo) string {
	for _, g := range info.PriorityGroups {
		if g.Group == bus.WorkGroup {
			return g.PinnedClientID
		}
	}
	return ""
}

func (g *Group) unpin(ctx context.Context, n int) {
	st, err := g.cfg.JS.Stream(ctx, g.stream(n))
	if err != nil {
		return
	}
	if err := st.UnpinConsumer(ctx, bus.WorkConsumerName(n), bus.WorkGroup); err != nil {
		g.log.Debug().Err(err).Int("partition", n).Msg("unpin")
	}
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool { return sleepUntil(ctx, d, nil) }

// sleepUntil waits d, or until woken closes (nil: never), or ctx ends;
// false when ctx ended.
func sleepUntil(ctx context.Context, d time.Duration, woken <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-woken:
	}
	return true
}
