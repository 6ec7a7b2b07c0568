package runner

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/control/sessionrec"
)

// The session record and its compare-and-swap live in package sessionrec,
// shared with the dispatcher; these names are the runner's words for them.
const (
	StateIdle        = sessionrec.StateIdle
	StateRunning     = sessionrec.StateRunning
	StateInterrupted = sessionrec.StateInterrupted
	StateStopped     = sessionrec.StateStopped
)

// SessionRecord is the value of a session's key in the sessions bucket.
type SessionRecord = sessionrec.Record

// sessionKey is the session's key in the sessions bucket.
func sessionKey(tenant, session string) string { return sessionrec.Key(tenant, session) }

// records reads and CAS-updates session records.
type records struct{ kv jetstream.KeyValue }

// ErrLostSession means a compare-and-swap on the session record was refused:
// someone else changed it since this runner read it.
var ErrLostSession = sessionrec.ErrLost

// get returns the record and its revision; a missing record is an idle one
// with revision 0.
func (r records) get(ctx context.Context, tenant, session string) (SessionRecord, uint64, error) {
	return sessionrec.Get(ctx, r.kv, tenant, session)
}

// put writes rec if the stored revision is still rev (0 = must not exist)
// and returns the new revision.
func (r records) put(ctx context.Context, rec SessionRecord, rev uint64) (uint64, error) {
	return sessionrec.Put(ctx, r.kv, rec, rev)
}

// recordCopy is an actor's copy of its session record as it last wrote
// it, which spares an idle session's next run a read. It is trusted only
// where a compare-and-swap checks it (start uses it for an idle session's
// claim, setState to end its own run): a copy that went stale (another
// runner, an operator's policy change) then costs one refused write and a
// fresh read. A decision to wait or to do nothing writes nothing, so it
// always reads afresh; and only writes are kept, never reads.
type recordCopy struct {
	rec SessionRecord
	rev uint64
	ok  bool
}

// record returns the session record, from the actor's copy when it has
// one (see recordCopy); cached says which, so a refused write knows to
// read and try again.
func (a *actor) record(ctx context.Context) (rec SessionRecord, rev uint64, cached bool, err error) {
	a.mu.Lock()
	c := a.recCopy
	a.mu.Unlock()
	if c.ok {
		return c.rec.Clone(), c.rev, true, nil
	}
	rec, rev, err = a.r.records.get(ctx, a.tenant, a.session)
	return rec, rev, false, err
}

// putRecord CAS-writes the session record and keeps the copy in step: the
// new revision on success, no copy after a refusal.
func (a *actor) putRecord(ctx context.Context, rec SessionRecord, rev uint64) (uint64, error) {
	n, err := a.r.records.put(ctx, rec, rev)
	if err != nil {
		a.dropRecord()
		return 0, err
	}
	a.keepRecord(rec, n)
	return n, nil
}

func (a *actor) keepRecord(rec SessionRecord, rev uint64) {
	a.mu.Lock()
	a.recCopy = recordCopy{rec: rec.Clone(), rev: rev, ok: true}
	a.mu.Unlock()
}

func (a *actor) dropRecord() {
	a.mu.Lock()
	a.recCopy = recordCopy{}
	a.mu.Unlock()
}
