package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
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

// RecoveryRequest is the body of PUT /v1/sessions/{session}/recovery. It is
// the whole override: a field absent or null clears that part, so the same
// PUT twice leaves the same record.
type RecoveryRequest struct {
	// Policy is "automatic", "manual" or "never".
	Policy *string `json:"policy"`
	// MaxAttempts is how many restarts are allowed; 0 means none on its own.
	MaxAttempts *int `json:"max_attempts"`
}

// RecoveryState answers every recovery route.
type RecoveryState struct {
	Session string `json:"session"`
	// Override is what the session record sets; null when it sets nothing.
	Override *handover.RecoveryOverride `json:"override"`
	// Effective is the defaults with Override applied: what a runner decides
	// the next recovery of this session by.
	Effective handover.RecoverySettings `json:"effective"`
	// Revision is the session record's revision after the call; 0 when the
	// session has no record.
	Revision uint64 `json:"revision"`
}

func recoveryState(session string, o *handover.RecoveryOverride, rev uint64) RecoveryState {
	eff := handover.DefaultRecoverySettings()
	if o != nil {
		eff = eff.With(*o)
	}
	return RecoveryState{Session: session, Override: o, Effective: eff, Revision: rev}
}

// override checks req and turns it into the override to store; nil when it
// sets nothing.
func (req RecoveryRequest) override() (*handover.RecoveryOverride, error) {
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
func (d *Dispatcher) Recovery(ctx context.Context, p auth.Principal, session string) (RecoveryState, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return RecoveryState{}, err
	}
	kv, err := d.bucket(ctx, bus.BucketSessions)
	if err != nil {
		return RecoveryState{}, err
	}
	if kv == nil {
		return recoveryState(session, nil, 0), nil
	}
	e, err := kv.Get(ctx, p.Tenant+"."+session)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return recoveryState(session, nil, 0), nil
	case err != nil:
		return RecoveryState{}, unavailable("read session record", err)
	}
	fields, err := recordFields(p.Tenant, session, e.Value())
	if err != nil {
		return RecoveryState{}, err
	}
	o, err := storedOverride(fields)
	if err != nil {
		return RecoveryState{}, problemf(http.StatusInternalServerError, "corrupt-record", "Session record unreadable",
			"session %s/%s: stored policy: %v", p.Tenant, session, err)
	}
	return recoveryState(session, o, e.Revision()), nil
}

// SetRecovery stores req as the session's recovery override, replacing the
// one before. A request that sets nothing clears it.
func (d *Dispatcher) SetRecovery(ctx context.Context, p auth.Principal, session string, req RecoveryRequest) (RecoveryState, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return RecoveryState{}, err
	}
	o, err := req.override()
	if err != nil {
		return RecoveryState{}, err
	}
	return d.writeRecovery(ctx, p, session, o)
}

// ClearRecovery removes the session's recovery override: the defaults apply
// again.
func (d *Dispatcher) ClearRecovery(ctx context.Context, p auth.Principal, session string) (RecoveryState, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return RecoveryState{}, err
	}
	return d.writeRecovery(ctx, p, session, nil)
}

func (d *Dispatcher) writeRecovery(ctx context.Context, p auth.Principal, session string, o *handover.RecoveryOverride) (RecoveryState, error) {
	if err := p.MayPublish(recoveryControlType); err != nil {
		return RecoveryState{}, problemf(http.StatusForbidden, "forbidden", "Forbidden",
			"changing a recovery policy needs a token that may steer (%s): %s", recoveryControlType, trimPrefix(err))
	}
	kv, err := d.bucket(ctx, bus.BucketSessions)
	if err != nil {
		return RecoveryState{}, err
	}
	if kv == nil {
		return RecoveryState{}, problemf(http.StatusServiceUnavailable, "unavailable", "Sessions bucket missing",
			"bucket %s does not exist; provision the bus first", bus.BucketSessions)
	}
	rev, err := d.casPolicy(ctx, kv, p.Tenant, session, o)
	if err != nil {
		return RecoveryState{}, err
	}
	action := "set"
	if o == nil {
		action = "cleared"
	}
	d.log.Info().Str("tenant", p.Tenant).Str("session", session).Str("action", action).
		Uint64("revision", rev).Msg("recovery policy")
	return recoveryState(session, o, rev), nil
}

// casPolicy changes only the "policy" field of the stored session record,
// by compare-and-swap on its revision, and returns the revision after.
// Every other field passes through as the bytes it was, so what a newer
// runner stores and this dispatcher does not know survives. A write refused
// because someone wrote in between is read and tried again.
func (d *Dispatcher) casPolicy(ctx context.Context, kv jetstream.KeyValue, tenant, session string, o *handover.RecoveryOverride) (uint64, error) {
	key := tenant + "." + session
	want, err := policyJSON(o)
	if err != nil {
		return 0, err
	}
	for try := range recordTries {
		if try > 0 {
			if err := backoff(ctx, try); err != nil {
				return 0, unavailable("write session record", err)
			}
		}
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if o == nil {
				return 0, nil // nothing stored, nothing to clear
			}
			if d.beforeRecordWrite != nil {
				d.beforeRecordWrite(key)
			}
			rev, err := kv.Create(ctx, key, newRecord(tenant, session, want))
			if isRevisionConflict(err) {
				continue
			}
			if err != nil {
				return 0, unavailable("create session record", err)
			}
			return rev, nil
		}
		if err != nil {
			return 0, unavailable("read session record", err)
		}
		fields, err := recordFields(tenant, session, e.Value())
		if err != nil {
			return 0, err
		}
		if old, ok := fields["policy"]; (ok && bytes.Equal(compact(old), want)) || (!ok && want == nil) {
			return e.Revision(), nil // already so: no write to disturb a runner with
		}
		if want == nil {
			delete(fields, "policy")
		} else {
			fields["policy"] = want
		}
		data, err := json.Marshal(fields)
		if err != nil {
			return 0, problemf(http.StatusInternalServerError, "corrupt-record", "Session record unreadable",
				"session %s/%s: encode record: %v", tenant, session, err)
		}
		if d.beforeRecordWrite != nil {
			d.beforeRecordWrite(key)
		}
		rev, err := kv.Update(ctx, key, data, e.Revision())
		if isRevisionConflict(err) {
			continue
		}
		if err != nil {
			return 0, unavailable("write session record", err)
		}
		return rev, nil
	}
	return 0, problemf(http.StatusConflict, "conflict", "Session record busy",
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

// newRecord is the record of a session nothing has run in yet: idle, as
// the runner reads a missing one, with only the policy set.
func newRecord(tenant, session string, policy json.RawMessage) []byte {
	b, _ := json.Marshal(struct {
		Tenant  string          `json:"tenant"`
		Session string          `json:"session"`
		State   string          `json:"state"`
		Policy  json.RawMessage `json:"policy"`
	}{tenant, session, "idle", policy})
	return b
}

// recordFields splits a stored record into its top-level fields.
func recordFields(tenant, session string, value []byte) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(value, &fields); err != nil || fields == nil {
		return nil, problemf(http.StatusInternalServerError, "corrupt-record", "Session record unreadable",
			"session %s/%s: the stored record is not a JSON object", tenant, session)
	}
	return fields, nil
}

// storedOverride decodes the record's policy field; absent, null or empty
// is no override.
func storedOverride(fields map[string]json.RawMessage) (*handover.RecoveryOverride, error) {
	raw, ok := fields["policy"]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var o handover.RecoveryOverride
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, err
	}
	if o.Policy == nil && o.MaxAttempts == nil {
		return nil, nil
	}
	return &o, nil
}

func compact(b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return b
	}
	return buf.Bytes()
}

// isRevisionConflict says a Create or Update was refused because the key's
// revision was not the one expected.
func isRevisionConflict(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) ||
		(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence)
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

func (d *Dispatcher) handleRecovery(w http.ResponseWriter, r *http.Request) {
	p, err := d.principal(r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	session := r.PathValue("session")
	var st RecoveryState
	switch r.Method {
	case http.MethodPut:
		var b []byte
		if b, err = d.readBody(w, r); err != nil {
			break
		}
		var req RecoveryRequest
		if req, err = decodeRecoveryRequest(b); err != nil {
			break
		}
		st, err = d.SetRecovery(r.Context(), p, session, req)
	case http.MethodDelete:
		st, err = d.ClearRecovery(r.Context(), p, session)
	default:
		st, err = d.Recovery(r.Context(), p, session)
	}
	if err != nil {
		d.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
