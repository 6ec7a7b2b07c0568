package dispatcher

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	"jetway/pkg/control/sessionrec"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
	"jetway/pkg/handover"
)

// This file lets a person set a session's recovery policy (whether its
// interrupted work restarts on its own): the
// "policy" field of the session record, which the runner merges over
// handover.DefaultRecoverySettings when it decides whether interrupted work
// restarts on its own.

// MaxRecoveryAttempts bounds max_attempts. The attempt limit exists so a
// crash loop stops on its own; a limit in the thousands would be no limit.
const MaxRecoveryAttempts = 100

// recordTries is how many times a policy write re-reads and retries after
// another writer (a runner, constantly) changed the record in between.
const recordTries = 8

// recoveryControlType is the event type a token's globs must admit to change
// a recovery policy: deciding whether interrupted work restarts without a
// person is the person's say over the session, like a steer or a resume.
const recoveryControlType = "io.jetway.steer"

// RecoveryRequest is the body of PUT /v1/sessions/{session}/recovery and
// RecoveryState the answer of every recovery route (pkg/dispatcherapi).
type (
	RecoveryRequest = api.RecoveryRequest
	RecoveryState   = api.RecoveryState
)

// recoveryState is the answer for a session whose record sets o: the
// override as stored and the defaults with it applied, in wire form.
func recoveryState(session string, base handover.RecoverySettings, o *handover.RecoveryOverride, rev uint64) RecoveryState {
	eff := base
	st := RecoveryState{Session: session, Revision: rev}
	if o != nil {
		eff = eff.With(*o)
		st.Override = &api.RecoveryOverride{MaxAttempts: o.MaxAttempts}
		if o.Policy != nil {
			pol := o.Policy.String()
			st.Override.Policy = &pol
		}
	}
	st.Effective = api.RecoverySettings{Policy: eff.Policy.String(), MaxAttempts: eff.MaxAttempts}
	return st
}

// override checks req and turns it into the override to store; nil when it
// sets nothing.
func overrideOf(req RecoveryRequest) (*handover.RecoveryOverride, error) {
	var o handover.RecoveryOverride
	if req.Policy != nil {
		pol, err := handover.ParseRecoveryPolicy(*req.Policy)
		if err != nil {
			return nil, problem(http.StatusBadRequest, "invalid-policy", "Invalid recovery policy",
				strings.TrimPrefix(err.Error(), "handover: "))
		}
		o.Policy = &pol
	}
	if req.MaxAttempts != nil {
		n := *req.MaxAttempts
		if n < 0 || n > MaxRecoveryAttempts {
			return nil, problemf(http.StatusBadRequest, "invalid-policy", "Invalid recovery policy",
				"max_attempts is %d; it must be 0 to %d (0: never restart on its own)", n, MaxRecoveryAttempts)
		}
		o.MaxAttempts = &n
	}
	if o.Policy == nil && o.MaxAttempts == nil {
		return nil, nil
	}
	return &o, nil
}

// Recovery reads one of the caller's sessions' recovery override and the
// settings in effect. A session with no record has none: the defaults apply.
func (d *sessionsCore) Recovery(ctx context.Context, p auth.Principal, session string) (RecoveryState, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return RecoveryState{}, err
	}
	sr, err := d.readRecord(ctx, p.Tenant, session)
	if err != nil {
		return RecoveryState{}, err
	}
	return d.recoveryOf(ctx, p.Tenant, session, sr)
}

// recoveryOf is the recovery answer for a record read by readRecord.
func (d *sessionsCore) recoveryOf(ctx context.Context, tenant, session string, sr storedRecord) (RecoveryState, error) {
	if !sr.Found {
		return recoveryState(session, d.recoveryBase(ctx, tenant, sessionrec.Record{}), nil, 0), nil
	}
	if sr.Err != nil {
		var pr *Problem
		if errors.As(sr.Err, &pr) {
			return RecoveryState{}, pr
		}
		return RecoveryState{}, problemf(http.StatusInternalServerError, "corrupt-record", "Session record unreadable",
			"session %s/%s: stored record: %v", tenant, session, sr.Err)
	}
	return recoveryState(session, d.recoveryBase(ctx, tenant, sr.Rec), setOverride(sr.Rec.Policy), sr.Revision), nil
}

// recoveryBase is what a session's override applies over: the defaults
// with the recovery policy of the agent profile its next recovery goes by
// (the version its last run had). A profile that cannot be read leaves
// the defaults.
func (d *sessionsCore) recoveryBase(ctx context.Context, tenant string, rec sessionrec.Record) handover.RecoverySettings {
	base := handover.DefaultRecoverySettings()
	kv, err := d.bucket(ctx, bus.BucketAgents)
	if err != nil || kv == nil {
		return base
	}
	name := cmp.Or(rec.Agent, agents.DefaultName)
	var prof agents.Profile
	if rec.AgentVersion > 0 {
		prof, err = agents.GetVersion(ctx, kv, tenant, name, rec.AgentVersion)
	} else {
		prof, err = agents.Get(ctx, kv, tenant, name)
	}
	if err != nil || prof.Recovery == "" {
		return base
	}
	if pol, err := handover.ParseRecoveryPolicy(prof.Recovery); err == nil {
		base.Policy = pol
	}
	return base
}

// loadRecord reads a session record through the one type runners write it
// with; a missing one is idle at revision 0.
func (d *sessionsCore) loadRecord(ctx context.Context, kv jetstream.KeyValue, tenant, session string) (sessionrec.Record, uint64, error) {
	rec, rev, err := sessionrec.Get(ctx, kv, tenant, session)
	switch {
	case errors.Is(err, sessionrec.ErrUnreadable):
		return rec, 0, problemf(http.StatusInternalServerError, "corrupt-record", "Session record unreadable", "%v", err)
	case err != nil:
		return rec, 0, unavailable("read session record", err)
	}
	return rec, rev, nil
}

// setOverride is o when it sets something, nil when it sets nothing.
func setOverride(o *handover.RecoveryOverride) *handover.RecoveryOverride {
	if o == nil || (o.Policy == nil && o.MaxAttempts == nil) {
		return nil
	}
	return o
}

// SetRecovery stores req as the session's recovery override, replacing the
// one before. A request that sets nothing clears it.
func (d *sessionsCore) SetRecovery(ctx context.Context, p auth.Principal, session string, req RecoveryRequest) (RecoveryState, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return RecoveryState{}, err
	}
	o, err := overrideOf(req)
	if err != nil {
		return RecoveryState{}, err
	}
	return d.writeRecovery(ctx, p, session, o)
}

// ClearRecovery removes the session's recovery override: the defaults apply
// again.
func (d *sessionsCore) ClearRecovery(ctx context.Context, p auth.Principal, session string) (RecoveryState, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return RecoveryState{}, err
	}
	return d.writeRecovery(ctx, p, session, nil)
}

func (d *sessionsCore) writeRecovery(ctx context.Context, p auth.Principal, session string, o *handover.RecoveryOverride) (RecoveryState, error) {
	if err := p.MayPublish(recoveryControlType); err != nil {
		return RecoveryState{}, problemf(http.StatusForbidden, "forbidden", "Forbidden",
			"changing a recovery policy needs a token that may steer (%s): %s", recoveryControlType, trimPrefix(err))
	}
	kv, err := d.requiredBucket(ctx, bus.BucketSessions, "Sessions")
	if err != nil {
		return RecoveryState{}, err
	}
	rev, rec, err := d.casPolicy(ctx, kv, p.Tenant, session, o)
	if err != nil {
		return RecoveryState{}, err
	}
	action := "set"
	if o == nil {
		action = "cleared"
	}
	d.log.Info().Str("tenant", p.Tenant).Str("session", session).Str("action", action).
		Uint64("revision", rev).Msg("recovery policy")
	return recoveryState(session, d.recoveryBase(ctx, p.Tenant, rec), o, rev), nil
}

// casPolicy changes only the policy of the stored session record, by
// compare-and-swap on its revision, and returns the revision after. The
// record is read and written through sessionrec.Record, which keeps the
// fields a newer runner stores and this dispatcher does not know. A write
// refused because someone wrote in between is read and tried again.
func (d *sessionsCore) casPolicy(ctx context.Context, kv jetstream.KeyValue, tenant, session string, o *handover.RecoveryOverride) (uint64, sessionrec.Record, error) {
	want, err := policyJSON(o)
	if err != nil {
		return 0, sessionrec.Record{}, err
	}
	for try := range recordTries {
		if try > 0 {
			if err := backoff(ctx, try); err != nil {
				return 0, sessionrec.Record{}, unavailable("write session record", err)
			}
		}
		rec, rev, err := d.loadRecord(ctx, kv, tenant, session)
		if err != nil {
			return 0, rec, err
		}
		if rev == 0 && o == nil {
			return 0, rec, nil // nothing stored, nothing to clear
		}
		if old, _ := policyJSON(setOverride(rec.Policy)); rev != 0 && bytes.Equal(old, want) {
			return rev, rec, nil // already so: no write to disturb a runner with
		}
		rec.Policy = o
		if d.beforeRecordWrite != nil {
			d.beforeRecordWrite(sessionrec.Key(tenant, session))
		}
		n, err := sessionrec.Put(ctx, kv, rec, rev)
		if errors.Is(err, sessionrec.ErrLost) {
			continue
		}
		if err != nil {
			return 0, rec, unavailable("write session record", err)
		}
		return n, rec, nil
	}
	return 0, sessionrec.Record{}, problemf(http.StatusConflict, "conflict", "Session record busy",
		"session %s/%s: the record changed under %d writes in a row; try again", tenant, session, recordTries)
}

// policyJSON is the stored form of o: compact JSON, or nil for no override.
func policyJSON(o *handover.RecoveryOverride) (json.RawMessage, error) {
	if o == nil {
		return nil, nil
	}
	b, err := json.Marshal(o)
	if err != nil {
		return nil, problemf(http.StatusBadRequest, "invalid-policy", "Invalid recovery policy", "%v", err)
	}
	return b, nil
}

// backoff waits a little longer on each retry, so a runner mid-burst of
// writes gets its burst done before the next read.
func backoff(ctx context.Context, try int) error {
	t := time.NewTimer(time.Duration(try) * 5 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// decodeRecoveryRequest reads a PUT body strictly: a misspelt field would
// otherwise read as absent and silently clear that part of the override.
func decodeRecoveryRequest(b []byte) (RecoveryRequest, error) {
	var req RecoveryRequest
	if len(bytes.TrimSpace(b)) == 0 {
		return req, problem(http.StatusBadRequest, "bad-request", "Missing body",
			`send {"policy": "automatic"|"manual"|"never", "max_attempts": n}; DELETE clears the override`)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, problemf(http.StatusBadRequest, "bad-request", "Malformed JSON body", "%v", err)
	}
	if dec.More() {
		return req, problem(http.StatusBadRequest, "bad-request", "Malformed JSON body", "more than one JSON value")
	}
	return req, nil
}
