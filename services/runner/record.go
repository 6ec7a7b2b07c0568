package runner

import (
	"context"
	"sync"

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
// always reads afresh; and only writes are kept, never reads. The actor's
// sub-agent side reads it from tool calls, hence the lock.
type recordCopy struct {
	records         records
	tenant, session string

	mu  sync.Mutex
	rec SessionRecord
	rev uint64
	ok  bool
}

// get returns the session record, from the copy when there is one;
// cached says which, so a refused write knows to read and try again.
func (c *recordCopy) get(ctx context.Context) (rec SessionRecord, rev uint64, cached bool, err error) {
	c.mu.Lock()
	rec, rev, ok := c.rec, c.rev, c.ok
	c.mu.Unlock()
	if ok {
		return rec.Clone(), rev, true, nil
	}
	rec, rev, err = c.records.get(ctx, c.tenant, c.session)
	return rec, rev, false, err
}

// fresh reads the session record for a decision. The copy speaks only for
// the hot path, an idle session starting a run (starting), where the
// claim's compare-and-swap checks it. A decision to do nothing (a recovery
// "someone else made", events parked) would rest on it unchecked: a sweep
// asking an actor to recover a dead runner's run found its own old "idle"
// and did nothing, for ever.
func (c *recordCopy) fresh(ctx context.Context, starting, fresh bool) (rec SessionRecord, rev uint64, cached bool, err error) {
	if !fresh {
		rec, rev, cached, err = c.get(ctx)
		if err != nil || !cached || (starting && rec.State == StateIdle) {
			return rec, rev, cached, err
		}
		c.drop()
	}
	rec, rev, err = c.records.get(ctx, c.tenant, c.session)
	return rec, rev, false, err
}

// put CAS-writes the session record and keeps the copy in step: the new
// revision on success, no copy after a refusal.
func (c *recordCopy) put(ctx context.Context, rec SessionRecord, rev uint64) (uint64, error) {
	n, err := c.records.put(ctx, rec, rev)
	if err != nil {
		c.drop()
		return 0, err
	}
	c.mu.Lock()
	c.rec, c.rev, c.ok = rec.Clone(), n, true
	c.mu.Unlock()
	return n, nil
}

// drop forgets the copy: the next read asks the bucket.
func (c *recordCopy) drop() {
	c.mu.Lock()
	c.rec, c.rev, c.ok = SessionRecord{}, 0, false
	c.mu.Unlock()
}
