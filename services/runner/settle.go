package runner

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/events"
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
	a.acks.prune()
	msgs = slices.DeleteFunc(slices.Clone(msgs), func(m jetstream.Msg) bool { return m == nil })
	if len(msgs) == 0 {
		return // most recorded turns deliver no event: nothing to ack
	}
	seqs := a.acks.begin(msgs)
	a.box.acking.Add(int32(len(msgs)))
	go func() {
		defer a.box.acking.Add(-int32(len(msgs)))
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
		a.send(func(a *actor) { a.acks.settled(seqs, now) })
	}()
}

// acks are the stream sequences of a session's events being acked
// (acking): still in the work stream, but no longer waiting for anything;
// and those whose ack was confirmed moments ago (acked, see ackedMemory).
type acks struct {
	acking map[uint64]int
	acked  map[uint64]time.Time
}

// begin counts msgs as being acked and returns their sequences.
func (k *acks) begin(msgs []jetstream.Msg) []uint64 {
	var seqs []uint64
	for _, m := range msgs {
		if seq := seqOf(m); seq != 0 {
			if k.acking == nil {
				k.acking = make(map[uint64]int)
			}
			k.acking[seq]++
			seqs = append(seqs, seq)
		}
	}
	return seqs
}

// settled counts acks as confirmed at now.
func (k *acks) settled(seqs []uint64, now time.Time) {
	for _, seq := range seqs {
		if k.acking[seq]--; k.acking[seq] <= 0 {
			delete(k.acking, seq)
		}
		k.mark(seq, now)
	}
}

// ackedMemory is how long a confirmed ack counts as in hand. The server
// confirms an ack before a work queue stream has removed the message (the
// removal is queued behind it), so for a moment an acked event still looks
// pending; nobody else will be handed it again, so it is no reason to wait.
const ackedMemory = 10 * time.Second

// settling reports whether the event with stream sequence seq is being
// acked, or was acked moments ago.
func (k *acks) settling(seq uint64) bool {
	if _, ok := k.acking[seq]; ok {
		return true
	}
	_, ok := k.acked[seq]
	return ok
}

// mark counts seq as acked at at.
func (k *acks) mark(seq uint64, at time.Time) {
	if seq == 0 {
		return
	}
	if k.acked == nil {
		k.acked = make(map[uint64]time.Time)
	}
	k.acked[seq] = at
}

// prune forgets confirmed acks past ackedMemory.
func (k *acks) prune() {
	for seq, at := range k.acked {
		if time.Since(at) > ackedMemory {
			delete(k.acked, seq)
		}
	}
}

// msgsOf lists the messages of inputs.
// sourcesOf says who or what each input came from (events.From of its
// CloudEvent's type), for the transcript.
func sourcesOf(ins []input) []string {
	out := make([]string, 0, len(ins))
	for _, in := range ins {
		typ := ""
		if in.msg != nil {
			typ = in.msg.Headers().Get("ce-type")
		}
		out = append(out, events.From(typ))
	}
	return out
}

func msgsOf(ins []input) []jetstream.Msg {
	out := make([]jetstream.Msg, 0, len(ins))
	for _, in := range ins {
		out = append(out, in.msg)
	}
	return out
}
