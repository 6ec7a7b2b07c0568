package runner

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// Per-session order across runners.
//
// Inside one runner, arrival order is stream order (reset on takeover). But
// when a partition moves, the runner that had it may still hold one of the
// session's events un-acked, and the new owner must not hand the model a
// later event first. A work shard keeps an event until its runner acked
// it (and the log copied it, a moment later: see settle.go's ackedMemory). So before an event is handled, the actor makes sure the
// session's older events still in the stream are all in its hands; if one
// is not, the event waits for it. It looks the stream up unless the
// partition's delivery proves it (partition.streamOrder).

// pendingFrom returns the stream sequence and CE id of the session's first
// event still in its work shard at or after sequence from (0 if none).
func (r *Runner) pendingFrom(ctx context.Context, part int, tenant, session string, from uint64) (uint64, string, error) {
	if len(r.work) == 0 {
		return 0, "", nil
	}
	r.orderLookups.Add(1)
	shard := r.work[bus.ShardOf(part, len(r.work))]
	m, err := shard.GetMsg(ctx, max(from, 1), jetstream.WithGetMsgSubject(bus.SessionFilter(part, tenant, session)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", err
	}
	return m.Sequence, m.Header.Get("ce-id"), nil
}

func (r *Runner) openWork(ctx context.Context) error {
	shards := max(r.layout.Shards, 1)
	r.work = make([]jetstream.Stream, shards)
	for k := range shards {
		st, err := r.js.Stream(ctx, bus.WorkStream(k))
		if err != nil {
			return err
		}
		r.work[k] = st
	}
	return nil
}

// seqOf is a delivery's sequence in its work shard (0 when unknown).
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

// Where an event is, for inHand.
const (
	notInHand   = iota
	queuedFirst // queued here, and now first in line
	takenInHand // held as a notice, parked or steering: already handed on in order
)

// inHand tells where the actor holds the event with stream sequence seq,
// and moves it to the head of the queue when it is queued, so it is
// handled next.
func (a *actor) inHand(seq uint64) int {
	if a.acks.settling(seq) {
		return takenInHand
	}
	for _, m := range a.held {
		if seqOf(m) == seq {
			return takenInHand
		}
	}
	for _, in := range a.parked {
		if seqOf(in.msg) == seq {
			return takenInHand
		}
	}
	if a.steering != nil && seqOf(a.steering.in.msg) == seq {
		return takenInHand
	}
	for i, d := range a.queue {
		if seqOf(d.msg) == seq {
			if i > 0 {
				a.queue = append([]delivery{d}, append(a.queue[:i:i], a.queue[i+1:]...)...)
			}
			return queuedFirst
		}
	}
	return notInHand
}

// orderMark remembers how far an actor has checked its session's order:
// every event of the session below sequence below that is still in the work
// stream is in the actor's hands. An event in hand leaves them only acked
// (gone from the stream) or by lost() and waitForOther(), which clear the
// mark, so the next check starts from below instead of from the start of
// the stream: one lookup per event, not one per held notice. A new tenure
// of the partition (a takeover, a reset) clears it too.
type orderMark struct {
	tenure uint64
	below  uint64
}

// inOrder reports whether d may be handled now: every older event of its
// session still in the stream is already in this actor's hands. Looking at
// the oldest alone is not enough: with #50 held as a notice, #54 went to
// the model before #52 and #53, which were still on their way (a 10-minute
// chaos run). An older one queued here is moved to the head of the queue
// and d waits behind it.
func (a *actor) inOrder(ctx context.Context, d delivery) bool {
	seq := seqOf(d.msg)
	if seq == 0 {
		return true
	}
	tenure, unbroken := a.r.tenure(a.part)
	from := uint64(1)
	if a.ordered.tenure == tenure && a.ordered.below > 0 {
		from = a.ordered.below
		if unbroken && d.tenure == tenure && seq >= from {
			// Everything of the session below the mark is in hand, and the
			// tenure has delivered every event in stream order, each once:
			// any older one still in the stream came before d, so it is in
			// hand too. No lookup. An event given back (lost, waitForOther)
			// comes back only as a redelivery, which breaks the tenure;
			// until then the mark stays cleared, since every lookup meets
			// it. It must be the tenure as it is now: a chaos run saw d
			// judged on a flag set at its delivery, after an older event
			// given back had come back and queued behind it.
			a.ordered.below = seq + 1
			return true
		}
	}
	for {
		older, id, err := a.r.pendingFrom(ctx, a.part, a.tenant, a.session, from)
		if err != nil {
			a.retryLater()
			return false
		}
		if older == 0 || older >= seq {
			a.ordered = orderMark{tenure: tenure, below: max(seq+1, from)}
			return true
		}
		if _, recorded := a.seen[id]; recorded && id != "" {
			// Handed on (or refused) and recorded, by this runner or the
			// one before: acked, or to be dropped as a duplicate when it
			// comes again. It waits in the shard only for the log to copy
			// it, which under steady load takes until the log's source has
			// thousands of events out (bus.SourceConsumerConfig).
			from = older + 1
			continue
		}
		switch a.inHand(older) {
		case queuedFirst:
			a.poke()
			return false
		case notInHand:
			a.log.Debug().Uint64("waiting_for", older).Uint64("event", seq).Msg("an older event of the session is elsewhere; waiting for it")
			a.retryLater()
			return false
		}
		from = older + 1
	}
}
