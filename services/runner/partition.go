package runner

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/events"
)

// partition is this runner's view of one work consumer.
type partition struct {
	n    int
	cons jetstream.Consumer

	mu sync.Mutex
	// pin is the last Nats-Pin-Id seen; a new one means the server just
	// gave this runner the partition.
	pin string
	// resetting: after ResetConsumer, deliveries are ignored until the
	// consumer sequence restarts at 1, so the stream's order holds.
	resetting bool
	// held: this runner has received messages under the current pin.
	held bool
	// unclaimedSince is when this runner first saw the partition held by
	// no live runner (zero while someone holds it).
	unclaimedSince time.Time
	// tenure counts the times this runner took the partition: what an
	// actor learnt about its session's order holds within one tenure.
	tenure uint64
	// unbroken: every delivery of this tenure so far came in stream order
	// from the reset that began it, none missed and none again (see
	// streamOrder); nextCseq is the consumer sequence that keeps it so.
	unbroken bool
	nextCseq uint64
}

// streamOrder records one delivery of the tenure in p.unbroken. A reset leaves the consumer at its ack floor
// with no pending or redelivery state, so from there it hands out the
// partition's events in stream order, consumer sequence 1, 2, 3, …, each
// delivered for the first time. While that holds, every older event of the
// partition still in the stream came through this runner earlier in the
// tenure. A gap in the consumer sequence (a delivery that went to a pull
// this runner dropped) or a redelivery (a nak, an expired AckWait) breaks
// it for the rest of the tenure. Call with p.mu held.
func (p *partition) streamOrder(md *jetstream.MsgMetadata) {
	p.unbroken = p.unbroken && md.Sequence.Consumer == p.nextCseq && md.NumDelivered == 1
	p.nextCseq = md.Sequence.Consumer + 1
}

// tenureOf is partition n's current tenure (0 for one this runner never
// took), and whether it is unbroken so far (see streamOrder).
func (r *Runner) tenureOf(n int) (tenure uint64, unbroken bool) {
	if n < 0 || n >= len(r.parts) || r.parts[n] == nil {
		return 0, false
	}
	p := r.parts[n]
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tenure, p.unbroken
}

func (p *partition) holding() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// held lists the partitions this runner holds.
func (r *Runner) held() []int {
	var out []int
	for _, p := range r.parts {
		if p != nil && p.holding() {
			out = append(out, p.n)
		}
	}
	return out
}

// wantPull decides whether this runner pulls partition p now. The server
// pins a partition to whichever runner it serves first, so balance needs a
// rule: a runner holding ceil(P/R) partitions pulls no others, and one
// holding more gives up its idle extras (see watchRelease).
func (r *Runner) wantPull(ctx context.Context, p *partition) bool {
	if p.holding() {
		return true
	}
	live, err := r.peers.live(ctx)
	if err != nil {
		return true
	}
	target := (r.partitions + live - 1) / live
	if len(r.held()) < target {
		return true
	}
	// A partition no live runner holds is pulled by everyone, whatever
	// their share: the shares are computed from heartbeats that lag, and a
	// partition every runner thinks is someone else's is never delivered
	// again (its events sat in the stream until the end of a chaos run).
	// Runners under their share go first: the server pins whichever
	// request waits at the head of its queue, and when runners at their
	// share competed too, one of them took every released partition while
	// a new runner got none.
	_, claimed := r.peers.holders(ctx)[p.n]
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

// orphanGrace is how long a partition nobody claims is left to the runners
// under their share before the others pull it too.
const orphanGrace = 3 * time.Second

// consume pulls partition p while this runner wants it.
func (r *Runner) consume(ctx context.Context, p *partition) {
	log := r.log.With().Int("partition", p.n).Logger()
	for ctx.Err() == nil {
		if !r.wantPull(ctx, p) {
			select {
			case <-ctx.Done():
				return
			case <-r.rebalanceTick():
			}
			continue
		}
		it, err := p.cons.Messages(jetstream.PullPriorityGroup(bus.WorkGroup), jetstream.PullMaxMessages(256), jetstream.PullExpiry(pullExpiry(p.cons)))
		if err != nil {
			log.Warn().Err(err).Msg("pull")
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		stop := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
			case <-stop:
			}
			it.Stop()
		}()
		go r.watchRelease(ctx, p, it, stop)
		go r.watchOrphan(ctx, p, stop)
		for {
			m, err := it.Next()
			if err != nil {
				if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					log.Debug().Err(err).Msg("pull ended")
				}
				break
			}
			r.deliver(ctx, p, m)
		}
		close(stop)
		p.mu.Lock()
		p.held = false
		p.pin = ""
		p.mu.Unlock()
	}
}

// watchRelease stops pulling p when this runner holds more than its share
// and p has no session with work in hand, and unpins it so another runner
// takes it at once instead of after the pinned TTL.
func (r *Runner) watchRelease(ctx context.Context, p *partition, it jetstream.MessagesContext, stop <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-r.rebalanceTick():
		}
		if !p.holding() {
			continue
		}
		if !r.stillPinned(ctx, p) {
			// The server moved the pin (this runner stalled past the
			// pinned TTL): the client keeps pulling without a word, so the
			// runner would go on claiming the partition in its heartbeat,
			// count it in its share and, worse, unpin the real holder.
			r.log.Info().Int("partition", p.n).Msg("partition moved to another runner")
			it.Stop()
			return
		}
		if r.busyIn(p.n) {
			continue
		}
		live, err := r.peers.live(ctx)
		if err != nil || live <= 1 {
			continue
		}
		target := (r.partitions + live - 1) / live
		held := r.held()
		if len(held) <= target || held[len(held)-1] != p.n {
			continue // release from the top, one at a time
		}
		if !r.mayRelease(live) {
			continue
		}
		if !r.pinnedNow(ctx, p) {
			continue // moved meanwhile: the check above says so next tick
		}
		r.log.Info().Int("partition", p.n).Int("held", len(held)).Int("target", target).Msg("releasing partition to rebalance")
		it.Stop()
		p.mu.Lock()
		p.held = false
		p.mu.Unlock()
		r.unpin(ctx, p.n)
		return
	}
}

// watchOrphan takes back a partition's events from a runner that died
// holding them. The server moves a pin only with a delivery: when every
// pending event was already delivered to the dead runner (a run in
// progress, its notices, events that arrived as it died), the pin lapses
// after the pinned TTL with nothing left to deliver, and the events came
// back only when their AckWait ran out. So while this runner waits for p,
// a partition no live runner claims, pinned to nobody, with events out
// for acks, is reset: its events are delivered again, from the first
// un-acked one, to whoever waits for it.
func (r *Runner) watchOrphan(ctx context.Context, p *partition, stop <-chan struct{}) {
	reset := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-time.After(orphanCheck):
		}
		if p.holding() {
			return
		}
		if time.Since(reset) < orphanGrace {
			continue
		}
		// The consumer's own state first: one request, and for a quiet
		// partition (nothing out for acks) the only one.
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := p.cons.Info(ictx)
		cancel()
		if err != nil || info.NumAckPending == 0 || pinnedTo(info) != "" {
			continue
		}
		if _, claimed := r.peers.holders(ctx)[p.n]; claimed {
			continue // a live runner says it holds p: its acks are on their way
		}
		if _, err := r.js.ResetConsumer(ctx, bus.StreamWork, bus.WorkConsumerName(p.n)); err != nil {
			r.log.Warn().Err(err).Int("partition", p.n).Msg("reset an orphaned partition")
			continue
		}
		reset = time.Now()
		r.log.Info().Int("partition", p.n).Int("unacked", info.NumAckPending).Msg("reset an orphaned partition: its events were out to a runner that is gone")
	}
}

// orphanCheck is how often a runner waiting for a partition looks for
// events stranded with a runner that is gone.
const orphanCheck = time.Second

// pinnedTo is the pin of the work group in a consumer's info ("" for none).
func pinnedTo(info *jetstream.ConsumerInfo) string {
	for _, g := range info.PriorityGroups {
		if g.Group == bus.WorkGroup {
			return g.PinnedClientID
		}
	}
	return ""
}

// pullExpiry is how long one pull request waits. The server renews a pin
// only when its holder sends a new pull request; with the client's default
// 30 s expiry a quiet partition's pin lapsed after PinnedTTL and moved to
// whichever runner had a request waiting, every few seconds, each move a
// reset that redelivered every held event. Pulling again well within the
// TTL keeps the pin where it is until its holder really stops.
func pullExpiry(c jetstream.Consumer) time.Duration {
	const minExpiry = time.Second // the client's floor
	ttl := c.CachedInfo().Config.PinnedTTL
	if ttl <= 0 {
		ttl = bus.DefaultWorkPinnedTTL
	}
	return max(ttl/2, minExpiry)
}

// releaseGap is how long the number of live runners must hold still
// before this runner gives partitions up. Runner counts flicker while
// runners restart; without a pause every flicker moved partitions back and
// forth, and every move is a consumer reset that redelivers the partition's
// held events. Once the count has held, partitions go one per releaseStep,
// so three runners balance sixteen partitions in seconds, not half a
// minute.
const (
	releaseGap  = 5 * time.Second
	releaseStep = 500 * time.Millisecond
)

// mayRelease reports whether a partition may be released now, with live
// runners counted, and if so starts the next releaseStep.
func (r *Runner) mayRelease(live int) bool {
	r.relMu.Lock()
	defer r.relMu.Unlock()
	now := time.Now()
	if live != r.lastLive {
		r.lastLive, r.liveSince = live, now
		return false
	}
	if now.Sub(r.liveSince) < releaseGap || now.Sub(r.lastRelease) < releaseStep {
		return false
	}
	r.lastRelease = now
	return true
}

// stillPinned reports whether p's pin is still the one this runner was
// given, as the work consumers' pins were listed at most pinFresh ago. An
// unanswered question counts as yes: a runner that cannot reach the server
// cannot be served either.
//
// Every held partition asks twice a second; asked one consumer at a time
// that was a request per partition per tick (32 a second for a runner
// holding 16), where one listing of the stream's consumers answers them
// all. A listing can be half a second old, so a decision that could harm
// another runner (an unpin) asks afresh first (pinnedNow).
func (r *Runner) stillPinned(ctx context.Context, p *partition) bool {
	return r.checkPin(ctx, p, true)
}

// pinnedNow is stillPinned asked of p's consumer alone, now.
func (r *Runner) pinnedNow(ctx context.Context, p *partition) bool {
	return r.checkPin(ctx, p, false)
}

// checkPin compares p's pin with the server's, from the shared listing
// when listed (asking the consumer when the listing has no answer: a
// permission, an election), else from the consumer.
func (r *Runner) checkPin(ctx context.Context, p *partition, listed bool) bool {
	p.mu.Lock()
	pin := p.pin
	p.mu.Unlock()
	if pin == "" {
		return true
	}
	got, ok := "", false
	if listed {
		got, ok = r.pins.pinOf(ctx, r, p.n)
	}
	if !ok {
		got, ok = consumerPin(ctx, p)
	}
	if !ok {
		return true
	}
	return got == pin || got == ""
}

// consumerPin asks p's consumer for its pin; ok is false without an answer.
func consumerPin(ctx context.Context, p *partition) (pin string, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := p.cons.Info(ctx)
	if err != nil {
		return "", false
	}
	return pinnedTo(info), true
}

// pinFresh is how old a listing of the pins may be for stillPinned: under
// one rebalance tick, so each tick lists once.
const pinFresh = 400 * time.Millisecond

// pinList is the work consumers' pins, listed for all of them at once.
type pinList struct {
	mu   sync.Mutex
	at   time.Time
	pins map[int]string // partition -> pin ("" for none); absent: not listed
}

// pinOf returns partition n's pin from a listing at most pinFresh old,
// listing again if it is older; ok is false when the listing failed or did
// not include n.
func (l *pinList) pinOf(ctx context.Context, r *Runner, n int) (pin string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.at) >= pinFresh {
		l.pins, l.at = r.listPins(ctx), time.Now()
	}
	pin, ok = l.pins[n]
	return pin, ok
}

// listPins lists every work consumer's pin in one request (nil when the
// server does not answer).
func (r *Runner) listPins(ctx context.Context) map[int]string {
	if r.work == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r.pinListings.Add(1)
	names := make(map[string]int, r.partitions)
	for n := range r.partitions {
		names[bus.WorkConsumerName(n)] = n
	}
	pins := make(map[int]string, r.partitions)
	lister := r.work.ListConsumers(ctx)
	for info := range lister.Info() {
		if n, ok := names[info.Name]; ok {
			pins[n] = pinnedTo(info)
		}
	}
	if lister.Err() != nil {
		return nil
	}
	return pins
}

func (r *Runner) rebalanceTick() <-chan time.Time {
	return time.After(500 * time.Millisecond)
}

func (r *Runner) unpin(ctx context.Context, n int) {
	st, err := r.js.Stream(ctx, bus.StreamWork)
	if err != nil {
		return
	}
	if err := st.UnpinConsumer(ctx, bus.WorkConsumerName(n), bus.WorkGroup); err != nil {
		r.log.Debug().Err(err).Int("partition", n).Msg("unpin")
	}
}

func (r *Runner) unpinHeld(ctx context.Context) {
	for _, p := range r.parts {
		if p != nil && p.holding() {
			r.unpin(ctx, p.n)
		}
	}
}

// deliver applies the pin rules to one message and hands it to its
// session's actor. It never blocks on a session.
func (r *Runner) deliver(ctx context.Context, p *partition, m jetstream.Msg) {
	pin := m.Headers().Get("Nats-Pin-Id")
	md, err := m.Metadata()
	if err != nil {
		return
	}
	p.mu.Lock()
	if pin != "" && pin != p.pin {
		// Takeover: the previous holder may have left messages un-acked
		// that the server would redeliver out of order. Reset the consumer
		// so delivery restarts from the first un-acked message.
		p.pin = pin
		p.resetting = true
		p.held = true
		p.tenure++
		p.unbroken = false
		p.mu.Unlock()
		if _, err := r.js.ResetConsumer(ctx, bus.StreamWork, bus.WorkConsumerName(p.n)); err != nil {
			r.log.Warn().Err(err).Int("partition", p.n).Msg("reset on takeover")
			p.mu.Lock()
			p.resetting = false // delivery goes on, but with no reset behind it: never unbroken
			p.mu.Unlock()
		} else {
			r.log.Info().Int("partition", p.n).Msg("took partition")
		}
		return
	}
	if p.resetting {
		if md.Sequence.Consumer != 1 {
			p.mu.Unlock()
			r.log.Debug().Int("partition", p.n).Uint64("seq", md.Sequence.Stream).Uint64("cseq", md.Sequence.Consumer).Msg("ignored while resetting")
			return
		}
		p.resetting = false
		p.unbroken, p.nextCseq = true, 1
	}
	p.held = true
	p.streamOrder(md)
	tenure := p.tenure
	p.mu.Unlock()

	he, decErr := events.Decode(m.Subject(), m.Headers(), m.Data())
	tenant, session := he.Tenant, he.Session
	if decErr != nil {
		sub, err := events.ParseSubject(m.Subject())
		if err != nil {
			r.log.Warn().Err(err).Str("subject", m.Subject()).Msg("unroutable event dropped")
			_ = m.Term()
			return
		}
		tenant, session = sub.Tenant, sub.Session
	}
	r.log.Debug().Int("partition", p.n).Str("session", session).Str("event", he.ID).Uint64("seq", md.Sequence.Stream).
		Uint64("cseq", md.Sequence.Consumer).Uint64("delivered", md.NumDelivered).Msg("event in")
	r.actorFor(tenant, session, p.n).enqueue(delivery{msg: m, ev: he, err: decErr, tenure: tenure})
}

// busyIn reports whether any session of partition n has work in hand
// (a live run, queued or held events).
func (r *Runner) busyIn(n int) bool {
	// Collect first, ask after: asking takes each actor's lock, and the
	// runner's must not wait on those while deliveries need it.
	r.mu.Lock()
	var in []*actor
	for _, a := range r.actors {
		if a.part == n {
			in = append(in, a)
		}
	}
	r.mu.Unlock()
	for _, a := range in {
		if a.busy() {
			return true
		}
	}
	return false
}
