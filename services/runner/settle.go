package runner

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// settleTimeout bounds how long the server has to confirm one ack.
const settleTimeout = 10 * time.Second

// settle acks events whose fate is recorded (delivered to the model, or
// refused). It does not wait: a confirmed ack is not needed for exactly
// once, which rests on the CE ids in the transcript (a lost ack means a
// redelivery, and a redelivered id already recorded is dropped). What must
// hold is order: until the server confirms, the events still sit in the
// work stream, and a newer event of the session would wait for them as if
// they were elsewhere (order.go). So they count as in hand until then.
//
// The acks go out together, each confirmed (DoubleAck), so a turn that
// delivered twenty notices costs one round trip, not twenty in a row.
func (a *actor) settle(msgs ...jetstream.Msg) {
	a.pruneAcked()
	msgs = slices.DeleteFunc(slices.Clone(msgs), func(m jetstream.Msg) bool { return m == nil })
	if len(msgs) == 0 {
		return // most recorded turns deliver no event: nothing to ack
	}
	var seqs []uint64
	for _, m := range msgs {
		if seq := seqOf(m); seq != 0 {
			if a.acking == nil {
				a.acking = make(map[uint64]int)
			}
			a.acking[seq]++
			seqs = append(seqs, seq)
		}
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		defer cancel()
		var wg sync.WaitGroup
		for _, m := range msgs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := m.DoubleAck(ctx); err != nil {
					a.log.Debug().Err(err).Uint64("seq", seqOf(m)).Msg("ack not confirmed; a redelivery will be dropped as already recorded")
				}
			}()
		}
		wg.Wait()
		// A newer event may be waiting for these to leave the stream: the
		// message wakes the actor.
		now := time.Now()
		a.send(func(a *actor) { a.settled(seqs, now) })
	}()
}

// settled counts acks as confirmed at now.
func (a *actor) settled(seqs []uint64, now time.Time) {
	for _, seq := range seqs {
		if a.acking[seq]--; a.acking[seq] <= 0 {
			delete(a.acking, seq)
		}
		a.markAckedAt(seq, now)
	}
}

// ackedMemory is how long a confirmed ack counts as in hand. The server
// confirms an ack before a work queue stream has removed the message (the
// removal is queued behind it), so for a moment an acked event still looks
// pending; nobody else will be handed it again, so it is no reason to wait.
const ackedMemory = 10 * time.Second

// settling reports whether the event with stream sequence seq is being
// acked, or was acked moments ago.
func (a *actor) settling(seq uint64) bool {
	if _, ok := a.acking[seq]; ok {
		return true
	}
	_, ok := a.acked[seq]
	return ok
}

// markAcked counts seq as acked now.
func (a *actor) markAcked(seq uint64) { a.markAckedAt(seq, time.Now()) }

func (a *actor) markAckedAt(seq uint64, at time.Time) {
	if seq == 0 {
		return
	}
	if a.acked == nil {
		a.acked = make(map[uint64]time.Time)
	}
	a.acked[seq] = at
}

// pruneAcked forgets confirmed acks past ackedMemory.
func (a *actor) pruneAcked() {
	for seq, at := range a.acked {
		if time.Since(at) > ackedMemory {
			delete(a.acked, seq)
		}
	}
}

// msgsOf lists the messages of inputs.
func msgsOf(ins []input) []jetstream.Msg {
	out := make([]jetstream.Msg, 0, len(ins))
	for _, in := range ins {
		out = append(out, in.msg)
	}
	return out
}
