package runner

import (
	"jetway/pkg/events"
	"jetway/services/runner/internal/partition"
)

// deliver is the partition group's Deliver: it decodes one message and
// hands it to its session's actor. It never blocks on a session.
func (r *Runner) deliver(d partition.Delivery) {
	m := d.Msg
	md, err := m.Metadata()
	if err != nil {
		return
	}
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
	r.log.Debug().Int("partition", d.Partition).Str("session", session).Str("event", he.ID).Uint64("seq", md.Sequence.Stream).
		Uint64("cseq", md.Sequence.Consumer).Uint64("delivered", md.NumDelivered).Msg("event in")
	r.actorFor(tenant, session, d.Partition).enqueue(delivery{msg: m, ev: he, err: decErr, tenure: d.Tenure})
}

// busyIn is the partition group's Busy: whether any session of partition
// n has work in hand (a live run, queued or held events), which a release
// would disturb.
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
		if a.box.busy() {
			return true
		}
	}
	return false
}
