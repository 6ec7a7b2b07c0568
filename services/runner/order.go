package runner

import (
	"context"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// Per-session order across runners.
//
// Inside one runner, arrival order is stream order (reset on takeover). But
// when a partition moves, the runner that had it may still hold one of the
// session's events un-acked, and the new owner must not hand the model a
// later event first. JETWAY_WORK is a work queue: an event leaves it only
// when acked. So before an event is handled, the actor looks up the
// session's oldest event still in the stream; if that is an older one this
// actor does not have in hand, the event waits for it.

// oldestPending returns the stream sequence of the session's oldest event
// still in JETWAY_WORK (0 if none).
func (r *Runner) oldestPending(ctx context.Context, part int, tenant, session string) (uint64, error) {
	if r.work == nil {
		return 0, nil
	}
	filter := strconv.Itoa(part) + ".jetway.*." + tenant + "." + session
	m, err := r.work.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(filter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.Sequence, nil
}

func (r *Runner) openWork(ctx context.Context) error {
	st, err := r.js.Stream(ctx, bus.StreamWork)
	if err != nil {
		return err
	}
	r.work = st
	return nil
}

// seqOf is a delivery's sequence in JETWAY_WORK (0 when unknown).
func seqOf(m jetstream.Msg) uint64 {
	if m == nil {
		return 0
	}
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}

// inHand reports whether the actor holds the event with stream sequence
// seq (queued, held as a notice, parked or steering), and moves it to the
// head of the queue when it is queued, so it is handled next.
func (a *actor) inHand(seq uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range a.held {
		if seqOf(m) == seq {
			return true
		}
	}
	for _, in := range a.parked {
		if seqOf(in.msg) == seq {
			return true
		}
	}
	if a.steering != nil && seqOf(a.steering.in.msg) == seq {
		return true
	}
	for i, d := range a.queue {
		if seqOf(d.msg) == seq {
			if i > 0 {
				a.queue = append([]delivery{d}, append(a.queue[:i:i], a.queue[i+1:]...)...)
			}
			return true
		}
	}
	return false
}

// inOrder reports whether d may be handled now: no older event of its
// session is still in the stream outside this actor's hands. When the older
// one is queued here, it has been moved to the head of the queue and d
// waits behind it.
func (a *actor) inOrder(ctx context.Context, d delivery) bool {
	seq := seqOf(d.msg)
	if seq == 0 {
		return true
	}
	oldest, err := a.r.oldestPending(ctx, a.part, a.tenant, a.session)
	if err != nil || oldest == 0 || oldest >= seq {
		return err == nil
	}
	if a.inHand(oldest) {
		a.mu.Lock()
		moved := len(a.queue) > 0 && seqOf(a.queue[0].msg) == oldest
		a.mu.Unlock()
		if moved {
			a.poke()
			return false
		}
		return true // held as a notice, parked or steering: already in order
	}
	a.log.Debug().Uint64("waiting_for", oldest).Uint64("event", seq).Msg("an older event of the session is elsewhere; waiting for it")
	a.retryLater()
	return false
}
