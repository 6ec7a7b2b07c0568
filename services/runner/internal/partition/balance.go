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

// releaseGap is how long the number of live members must hold still
// before this member gives partitions up. Counts flicker while members
// restart; without a pause every flicker moved partitions back and forth,
// and every move is a consumer reset that redelivers the partition's held
// messages. Once the count has held, partitions go one per releaseStep, so
// three members balance sixteen partitions in seconds, not half a minute.
const (
	releaseGap  = 5 * time.Second
	releaseStep = 500 * time.Millisecond
)

// wantPull decides whether this member pulls partition p now. The server
// pins a partition to whichever member it serves first, so balance needs a
// rule: a member holding ceil(P/R) partitions pulls no others, and one
// holding more gives up its idle extras (see watchRelease).
func (g *Group) wantPull(ctx context.Context, p *part) bool {
	if p.holding() {
		return true
	}
	live, err := g.peers.live(ctx)
	if err != nil {
		return true
	}
	target := (g.cfg.Partitions + live - 1) / live
	if len(g.Held()) < target {
		return true
	}
	// A partition no live member holds is pulled by everyone, whatever
	// their share: the shares are computed from heartbeats that lag, and a
	// partition every member thinks is someone else's is never delivered
	// again (its events sat in the stream until the end of a chaos run).
	// Members under their share go first: the server pins whichever
	// request waits at the head of its queue, and when members at their
	// share competed too, one of them took every released partition while
	// a new member got none.
	_, claimed := g.peers.holders(ctx)[p.n]
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

// watchRelease stops pulling p when this member holds more than its share
// and p is not busy, and unpins it so another member takes it at once
// instead of after the pinned TTL.
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
			continue
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
		if g.cfg.Busy(p.n) {
			continue
		}
		live, err := g.peers.live(ctx)
		if err != nil || live <= 1 {
			continue
		}
		target := (g.cfg.Partitions + live - 1) / live
		held := g.Held()
		if len(held) <= target || held[len(held)-1] != p.n {
			continue // release from the top, one at a time
		}
		if !g.rel.may(live) {
			continue
		}
		if !g.pinnedNow(ctx, p) {
			continue // moved meanwhile: the check above says so next tick
		}
		g.log.Info().Int("partition", p.n).Int("held", len(held)).Int("target", target).Msg("releasing partition to rebalance")
		it.Stop()
		p.mu.Lock()
		p.held = false
		p.mu.Unlock()
		g.unpin(ctx, p.n)
		return
	}
}

// releaseClock paces releases (see releaseGap).
type releaseClock struct {
	mu          sync.Mutex
	lastRelease time.Time // when this member last gave a partition up
	lastLive    int       // the live member count it last saw
	liveSince   time.Time // since when that count has held
}

// may reports whether a partition may be released now, with live members
// counted, and if so starts the next releaseStep.
func (c *releaseClock) may(live int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if live != c.lastLive {
		c.lastLive, c.liveSince = live, now
		return false
	}
	if now.Sub(c.liveSince) < releaseGap || now.Sub(c.lastRelease) < releaseStep {
		return false
	}
	c.lastRelease = now
	return true
}

// stillPinned reports whether p's pin is still the one this member was
// given, as the work consumers' pins were listed at most pinFresh ago. An
// unanswered question counts as yes: a member that cannot reach the server
// cannot be served either.
//
// Every held partition asks twice a second; asked one consumer at a time
// that was a request per partition per tick, where one listing of the
// stream's consumers answers them all. A listing can be half a second old,
// so a decision that could harm another member (an unpin) asks afresh
// first (pinnedNow).
func (g *Group) stillPinned(ctx context.Context, p *part) bool { return g.checkPin(ctx, p, true) }

// pinnedNow is stillPinned asked of p's consumer alone, now.
func (g *Group) pinnedNow(ctx context.Context, p *part) bool { return g.checkPin(ctx, p, false) }

// checkPin compares p's pin with the server's, from the shared listing
// when listed (asking the consumer when the listing has no answer: a
// permission, an election), else from the consumer.
func (g *Group) checkPin(ctx context.Context, p *part, listed bool) bool {
	p.mu.Lock()
	pin := p.pin
	p.mu.Unlock()
	if pin == "" {
		return true
	}
	got, ok := "", false
	if listed {
		got, ok = g.pins.pinOf(ctx, g, p.n)
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
	at   time.Time
	pins map[int]string // partition -> pin ("" for none); absent: not listed
}

// pinOf returns partition n's pin from a listing at most pinFresh old,
// listing again if it is older; ok is false when the listing failed or did
// not include n.
func (l *pinList) pinOf(ctx context.Context, g *Group, n int) (pin string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.at) >= pinFresh {
		l.pins, l.at = g.listPins(ctx), time.Now()
	}
	pin, ok = l.pins[n]
	return pin, ok
}

// listPins lists every work consumer's pin in one request (nil when the
// server does not answer).
func (g *Group) listPins(ctx context.Context) map[int]string {
	if g.work == nil {
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
	lister := g.work.ListConsumers(ctx)
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
