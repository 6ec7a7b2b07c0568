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
	return len(r.held()) < target
}

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
		it, err := p.cons.Messages(jetstream.PullPriorityGroup(bus.WorkGroup), jetstream.PullMaxMessages(256))
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
		if !p.holding() || r.busyIn(p.n) {
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
		r.log.Info().Int("partition", p.n).Int("held", len(held)).Int("target", target).Msg("releasing partition to rebalance")
		it.Stop()
		p.mu.Lock()
		p.held = false
		p.mu.Unlock()
		r.unpin(ctx, p.n)
		return
	}
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
		p.mu.Unlock()
		if _, err := r.js.ResetConsumer(ctx, bus.StreamWork, bus.WorkConsumerName(p.n)); err != nil {
			r.log.Warn().Err(err).Int("partition", p.n).Msg("reset on takeover")
			p.mu.Lock()
			p.resetting = false
			p.mu.Unlock()
		} else {
			r.log.Info().Int("partition", p.n).Msg("took partition")
		}
		return
	}
	if p.resetting {
		if md.Sequence.Consumer != 1 {
			p.mu.Unlock()
			return
		}
		p.resetting = false
	}
	p.held = true
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
	r.actorFor(tenant, session, p.n).enqueue(delivery{msg: m, ev: he, err: decErr})
}

// busyIn reports whether any session of partition n has work in hand
// (a live run, queued or held events).
func (r *Runner) busyIn(n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.actors {
		if a.part == n && a.busy() {
			return true
		}
	}
	return false
}
