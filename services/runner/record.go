package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/handover"
)

// Session states, as the session record in KV says them.
const (
	StateIdle        = "idle"
	StateRunning     = "running"
	StateInterrupted = "interrupted" // recovery refused; waits for a person
	StateStopped     = "stopped"     // Ground Stop ended its run
)

// SessionRecord is the value of a session's key in the sessions bucket. It
// is updated only by compare-and-swap on its revision: a runner whose update
// is refused has lost the session.
type SessionRecord struct {
	Tenant  string `json:"tenant"`
	Session string `json:"session"`
	State   string `json:"state"`
	// Run, Runner and Incarnation name the live run and who drives it while
	// State is running. Incarnation tells a restarted runner (same Runner,
	// new Incarnation) from the same process.
	Run         string    `json:"run,omitempty"`
	Runner      string    `json:"runner,omitempty"`
	Incarnation string    `json:"incarnation,omitempty"`
	Since       time.Time `json:"since"`
	// Cause is the live or last run's cause; Reason why the last run ended or
	// why the session is interrupted.
	Cause  string `json:"cause,omitempty"`
	Reason string `json:"reason,omitempty"`
	Runs   int    `json:"runs"`
	// Attempts counts recoveries since the last run that ended on its own.
	Attempts handover.Attempts `json:"attempts"`
	// Inputs are the texts the live run was started with, given again to a
	// run that recovers it.
	Inputs []string `json:"inputs,omitempty"`
	// Checks counts how often a chain of layovers has been picked up and
	// found nothing yet (the resume event's `checks`).
	Checks uint32 `json:"checks,omitempty"`
	// TokensUsed is the session's token use over all runs (the Fuel rail).
	TokensUsed int64 `json:"tokens_used,omitempty"`
	// RecentRuns are the start times of its runs in the last hour.
	RecentRuns []time.Time `json:"recent_runs,omitempty"`
	// Policy overrides the recovery policy for this session.
	Policy *handover.RecoveryOverride `json:"policy,omitempty"`
}

// clone is a copy of r that shares no slice or pointer with it.
func (r SessionRecord) clone() SessionRecord {
	c := r
	c.Inputs = append([]string(nil), r.Inputs...)
	c.RecentRuns = append([]time.Time(nil), r.RecentRuns...)
	if r.Attempts.Last != nil {
		last := *r.Attempts.Last
		c.Attempts.Last = &last
	}
	if r.Policy != nil {
		p := *r.Policy
		c.Policy = &p
	}
	return c
}

// sessionKey is the session's key in the sessions bucket.
func sessionKey(tenant, session string) string { return tenant + "." + session }

// records reads and CAS-updates session records.
type records struct{ kv jetstream.KeyValue }

// ErrLostSession means a compare-and-swap on the session record was refused:
// someone else changed it since this runner read it.
var ErrLostSession = errors.New("runner: session record changed under us")

// get returns the record and its revision; a missing record is an idle one
// with revision 0.
func (r records) get(ctx context.Context, tenant, session string) (SessionRecord, uint64, error) {
	e, err := r.kv.Get(ctx, sessionKey(tenant, session))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return SessionRecord{Tenant: tenant, Session: session, State: StateIdle}, 0, nil
	}
	if err != nil {
		return SessionRecord{}, 0, fmt.Errorf("session %s/%s: read record: %w", tenant, session, err)
	}
	var rec SessionRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return SessionRecord{}, 0, fmt.Errorf("session %s/%s: decode record: %w", tenant, session, err)
	}
	return rec, e.Revision(), nil
}

// put writes rec if the stored revision is still rev (0 = must not exist)
// and returns the new revision.
func (r records) put(ctx context.Context, rec SessionRecord, rev uint64) (uint64, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("session %s/%s: encode record: %w", rec.Tenant, rec.Session, err)
	}
	key := sessionKey(rec.Tenant, rec.Session)
	var n uint64
	if rev == 0 {
		n, err = r.kv.Create(ctx, key, data)
	} else {
		n, err = r.kv.Update(ctx, key, data, rev)
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err) {
			return 0, fmt.Errorf("%w: %s/%s at revision %d", ErrLostSession, rec.Tenant, rec.Session, rev)
		}
		return 0, fmt.Errorf("session %s/%s: write record: %w", rec.Tenant, rec.Session, err)
	}
	return n, nil
}

func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
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
		return c.rec.clone(), c.rev, true, nil
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
	a.recCopy = recordCopy{rec: rec.clone(), rev: rev, ok: true}
	a.mu.Unlock()
}

func (a *actor) dropRecord() {
	a.mu.Lock()
	a.recCopy = recordCopy{}
	a.mu.Unlock()
}
