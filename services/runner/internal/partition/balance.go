package partition

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// rebalanceTick is how often a member reconsiders what it pulls.
const rebalanceTick = 500 * time.Millisecond

// orphanGrace is how long a partition nobody claims is left to the members
// under their share before the others pull it too.
const orphanGrace = 3 * time.Second

// releaseStep paces this member's hand-offs: one begins per step, so a
// new member's share moves within a second, not in one burst of consumer
// resets.
const releaseStep = 50 * time.Millisecond

// Hand-off limits. A partition drains while its runs finish; one whose
// runs outlast drainLimit is pulled again by the same member (nothing is
// lost or handed out twice: its events stayed in hand), and no new
// hand-off of it begins for drainBackoff, so a long run delays its
// partition's move instead of starving its other sessions over and over.
const (
	drainLimit   = 10 * time.Second
	drainBackoff = 30 * time.Second
	drainTick    = 50 * time.Millisecond
)

// wantPull decides whether this member pulls partition p now. The server
// pins a partition to whichever member it serves first, so the members
// agree on an assignment instead (assign.go): a member pulls the
// partitions assigned to it once their last holder has handed them off,
// keeps pulling what it holds until it hands it off (watchRelease), and
// pulls a partition nobody holds or waits for only after orphanGrace.
func (g *Group) wantPull(ctx context.Context, p *part) bool {
	if p.holding() || p.resuming() {
		return true
	}
	if p.isDraining() {
		return false
	}
	owner, _ := g.ownerOf(ctx, p.n)
	if owner == "" {
		return true // the members cannot be read: pull, as everyone does
	}
	holder, held := g.peers.holders(ctx)[p.n]
	if owner == g.cfg.ID {
		// Wait for the holder's hand-off: pulling now could not take the
		// pin from it, and would only queue a request the server may pin
		// while the holder still has the partition's runs in hand.
		mine := !held || holder == g.cfg.ID
		p.setWanted(mine)
		return mine
	}
	p.setWanted(false)
	// A partition no live member holds or waits for is pulled by everyone,
	// after orphanGrace: the assignment is computed from heartbeats that
	// lag, and a partition every member thinks is someone else's is never
	// delivered again (its events sat in the stream until the end of a
	// chaos run).
	_, waited := g.peers.wanted(ctx)[p.n]
	return p.orphaned(held || waited)
}

// watchRelease hands p off when the assignment gives it to another member:
// it stops pulling p and marks it draining; the consume loop then lets
// p's work in hand finish before it unpins p (handOff). It also stops
// pulling p when the server moved p's pin away.
func (g *Group) watchRelease(ctx context.Context, p *part, it jetstream.MessagesContext, stop <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-time.After(rebalanceTick):
		}
		if !p.holding() {
			it.Stop()
			return
		}
		if !g.stillPinned(ctx, p) {
			// The server moved the pin (this member stalled past the
			// pinned TTL): the client keeps pulling without a word, so the
			// member would go on claiming the partition in its heartbeat,
			// count it in its share and, worse, unpin the real holder.
			g.log.Info().Int("partition", p.n).Msg("partition moved to another runner")
			it.Stop()
			return
		}
		if g.shouldHandOff(ctx, p) {
			it.Stop()
			return
		}
	}
}

// shouldHandOff reports whether p, held here, is to go to its assigned
// owner now, and if so marks it draining.
func (g *Group) shouldHandOff(ctx context.Context, p *part) bool {
	owner, still := g.ownerOf(ctx, p.n)
	if owner == "" || owner == g.cfg.ID || !still || !p.mayHandOff() {
		return false
	}
	if !g.rel.may() || !g.pinnedNow(ctx, p) {
		return false // moved meanwhile: watchRelease says so next tick
	}
	g.log.Info().Int("partition", p.n).Str("to", owner).Msg("handing partition off: draining it")
	p.mu.Lock()
	p.draining = true
	p.mu.Unlock()
	return true
}

// handOff finishes a hand-off once p's puller stopped: it waits until the
// work p's sessions have in hand here is over (every event handled and
// acked, every run ended, per Busy) and the pull requests the member had
// waiting at the server have expired, then unpins p and beats at once, so
// the owner (waiting for p to be free) pulls it and the server pins it
// there with its next message. The owner's takeover resets the consumer,
// so any message the stopped puller had received but not handed on comes
// again, in stream order, to the owner; nothing handled here comes again,
// since it was acked first. If the work outlasts drainLimit the member
// pulls p again itself (resume) and tries later.
//
// The pin's TTL runs from this member's last pull, up to a pull expiry
// before the puller stopped, so it can lapse as the drain ends, and the
// owner be pinned already. The server's unpin takes whatever pin there is:
// unpinning then would take the new holder's, which would take p again
// under a new pin and reset the consumer, delivering its work in hand a
// second time.
// So p is unpinned only while the pin is still pin, the one this member
// held p under (its puller, stopped, has dropped it from p).
func (g *Group) handOff(ctx context.Context, p *part, stopped time.Time, pin string) {
	expiry := pullExpiry(p.cons)
	for g.cfg.Busy(p.n) || time.Since(stopped) < expiry {
		if time.Since(stopped) > drainLimit {
			g.log.Warn().Int("partition", p.n).Dur("waited", drainLimit).Msg("hand-off given up: the partition's runs are still going; pulling it again")
			p.endDrain(false)
			return
		}
		if !sleep(ctx, drainTick) {
			return
		}
	}
	if g.stillPinnedAs(ctx, p, pin) {
		g.unpin(ctx, p.n)
	} else {
		g.log.Info().Int("partition", p.n).Msg("the pin lapsed during the drain: not unpinning its new holder")
	}
	p.endDrain(true)
	g.log.Info().Int("partition", p.n).Dur("drained", time.Since(stopped)).Msg("partition handed off")
	g.announce()
}

// releaseClock paces hand-offs (see releaseStep).
type releaseClock struct {
	mu          sync.Mutex
	lastRelease time.Time // when this member last began a hand-off
}

// may reports whether a hand-off may begin now, and if so starts the next
// releaseStep.
func (c *releaseClock) may() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if now.Sub(c.lastRelease) < releaseStep {
		return false
	}
	c.lastRelease = now
	return true
}

// stillPinned reports whether p's pin is still the one this member was
// given, as the work consumers' pins were listed at most pinFresh ago and
// after the pin was given. An unanswered question counts as yes: a member
// that cannot reach the server cannot be served either.
//
// Every held partition asks twice a second; asked one consumer at a time
// that was a request per partition per tick, where one listing of the
// stream's consumers answers them all. A listing can be half a second old,
// so a decision that could harm another member (an unpin) asks afresh
// first (pinnedNow). A listing asked for before this member took p still
// names the member that handed p off: read as "moved", it would make the
// new holder stop pulling p moments after its takeover, pull again under
// a new pin and reset the consumer, delivering its work in hand a second
// time; so a listing must be asked for after the pin was given.
func (g *Group) stillPinned(ctx context.Context, p *part) bool { return g.checkPin(ctx, p, true) }

// pinnedNow is stillPinned asked of p's consumer alone, now.
func (g *Group) pinnedNow(ctx context.Context, p *part) bool { return g.checkPin(ctx, p, false) }

// checkPin compares p's pin with the server's, from the shared listing
// when listed (asking the consumer when the listing has no answer: a
// permission, an election), else from the consumer.
func (g *Group) checkPin(ctx context.Context, p *part, listed bool) bool {
	p.mu.Lock()
	pin, since := p.pin, p.pinSince
	p.mu.Unlock()
	if pin == "" {
		return true
	}
	got, ok := "", false
	if listed {
		got, ok = g.pins.pinOf(ctx, g, p.n, since)
	}
	if !ok {
		got, ok = consumerPin(ctx, p)
	}
	if !ok {
		return true
	}
	return got == pin || got == ""
}

// stillPinnedAs reports whether p's consumer is pinned as pin, asked now:
// true for an unknown pin ("") or an unanswered question, as checkPin
// counts them, and false for a consumer pinned to nobody (nothing to
// unpin) or to another pin.
func (g *Group) stillPinnedAs(ctx context.Context, p *part, pin string) bool {
	if pin == "" {
		return true
	}
	got, ok := consumerPin(ctx, p)
	return !ok || got == pin
}

// consumerPin asks p's consumer for its pin; ok is false without an answer.
func consumerPin(ctx context.Context, p *part) (pin string, ok bool) {
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
	at   time.Time      // when the listing was asked for
	pins map[int]string // partition -> pin ("" for none); absent: not listed
}

// pinOf returns partition n's pin from a listing at most pinFresh old and
// asked for after notBefore, listing again otherwise; ok is false when the
// listing failed or did not include n.
func (l *pinList) pinOf(ctx context.Context, g *Group, n int, notBefore time.Time) (pin string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.at) >= pinFresh || !l.at.After(notBefore) {
		asked := time.Now()
		l.pins, l.at = g.listPins(ctx), asked
	}
	pin, ok = l.pins[n]
	return pin, ok
}

// listPins lists every work consumer's pin in one request per shard (nil
// when the server does not answer).
func (g *Group) listPins(ctx context.Context) map[int]string {
	if len(g.work) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	g.lists.Add(1)
	names := make(map[string]int, g.cfg.Partitions)
	for n := range g.cfg.Partitions {
		names[bus.WorkConsumerName(n)] = n
	}
	pins := make(map[int]string, g.cfg.Partitions)
	for _, work := range g.work {
		lister := work.ListConsumers(ctx)
		for info := range lister.Info() {
			if n, ok := names[info.Name]; ok {
				pins[n] = pinnedTo(info)
			}
		}
		if lister.Err() != nil {
			return nil
		}
	}
	return pins
}
