package runner

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/events"
)

// settle acks events whose fate is recorded (delivered to the model, or
// refused). Each ack is a single message the server does not answer: a
// confirmed ack is not needed for exactly once, which rests on the CE ids
// in the transcript (a lost ack means a redelivery, and a redelivered id
// already recorded is dropped), and asking for the confirmation cost every
// event a reply on the runner's connection. What must hold is order: until
// the server has removed them, the events still sit in the work stream,
// and a newer event of the session would wait for them as if they were
// elsewhere (order.go). So they count as in hand for ackedMemory.
func (a *actor) settle(msgs ...jetstream.Msg) {
	a.acks.prune()
	now := time.Now()
	for _, m := range msgs {
		if m == nil {
			continue // most recorded turns deliver no event: nothing to ack
		}
		if err := m.Ack(); err != nil {
			a.log.Debug().Err(err).Uint64("seq", seqOf(m)).Msg("ack not sent; a redelivery will be dropped as already recorded")
		}
		a.acks.mark(seqOf(m), now)
	}
}

// acks are the stream sequences of a session's events acked moments ago
// (see ackedMemory): perhaps still in the work stream, but no longer
// waiting for anything.
type acks struct {
	acked map[uint64]time.Time
	// oldest is the earliest time in acked (zero when it is empty): prune
	// looks through acked only once that is past ackedMemory, not at
	// every settle (a session that took a thousand events in ten seconds
	// went through all of them for each).
	oldest time.Time
}

// ackedMemory is how long an ack counts as in hand. The server removes an
// acked message from a work queue stream a moment after the ack reaches
// it, so for that moment an acked event still looks pending; nobody else
// will be handed it again, so it is no reason to wait. Ten seconds is
// longer than the work consumers' AckWait: an ack lost on the way has
// been followed by a redelivery by then.
const ackedMemory = 10 * time.Second

// settling reports whether the event with stream sequence seq was acked
// moments ago.
func (k *acks) settling(seq uint64) bool {
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
	if k.oldest.IsZero() || at.Before(k.oldest) {
		k.oldest = at
	}
}

// prune forgets confirmed acks past ackedMemory.
func (k *acks) prune() {
	if k.oldest.IsZero() || time.Since(k.oldest) <= ackedMemory {
		return // nothing in acked is that old
	}
	k.oldest = time.Time{}
	for seq, at := range k.acked {
		if time.Since(at) > ackedMemory {
			delete(k.acked, seq)
		} else if k.oldest.IsZero() || at.Before(k.oldest) {
			k.oldest = at
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
