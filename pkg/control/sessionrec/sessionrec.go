// Package sessionrec is the session record: the value of a session's key in
// the sessions bucket, which says whether a run is live, which one, and on
// which runner. Runners write it on every run start and end; the dispatcher
// reads it for answers and writes the session's recovery policy into it.
// Every writer updates it only by compare-and-swap on its revision, so a
// writer whose update is refused knows someone else changed it since its
// read (for a runner: it has lost the session).
//
// Both services read and write it through the one type here. A record
// written by a newer version may carry fields this one does not know; they
// are kept byte for byte through Get (or Decode) and Put (or Encode), so an
// older writer never drops what a newer one stored.
package sessionrec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/handover"
)

// Session states, as the record says them.
const (
	StateIdle        = "idle"
	StateRunning     = "running"
	StateInterrupted = "interrupted" // recovery refused; waits for a person
	StateStopped     = "stopped"     // Ground Stop ended its run
)

// Record is a session record.
type Record struct {
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
	// Untold is set while the refusal Reason records (the session is
	// interrupted) has not been stored as a run.refused event: it is that
	// event's CE id, so its dedupe id in JETWAY_OUT. The runner that
	// refused tells it and writes the record told (Untold empty); when
	// that runner dies in between, the partition's next holder finds the
	// record untold and tells it under the same id, so a refusal is never
	// only in a record a person's next line overwrites, and is stored
	// once. The id is random: the stream's other writer (the notifier)
	// cannot read this record, so it cannot occupy the id first.
	Untold string `json:"untold,omitempty"`
	Runs   int    `json:"runs"`
	// Attempts counts recoveries since the last run that ended on its own.
	Attempts handover.Attempts `json:"attempts"`
	// Inputs are the texts the live run was started with, given again to a
	// run that recovers it.
	Inputs []string `json:"inputs,omitempty"`
	// Checks counts how often a chain of layovers has been picked up and
	// found nothing yet.
	Checks uint32 `json:"checks,omitempty"`
	// TokensUsed is the session's token use over all runs (the Fuel rail).
	TokensUsed int64 `json:"tokens_used,omitempty"`
	// RecentRuns are the start times of its runs in the last hour.
	RecentRuns []time.Time `json:"recent_runs,omitempty"`
	// WorkerWait is when a recovery of the live run began to wait for the
	// session's jobs worker, which did not answer whether the interrupted
	// run's commands are gone (nil: no recovery waits). It is kept here,
	// not in a runner, so the wait stays bounded when another runner asks
	// next; Reason says what it waits for.
	WorkerWait *time.Time `json:"worker_wait,omitempty"`
	// Policy overrides the recovery policy for this session.
	Policy *handover.RecoveryOverride `json:"policy,omitempty"`
	// Agent is the agent profile the session is bound to; empty is the
	// default profile.
	Agent string `json:"agent,omitempty"`
	// AgentVersion is the version of Agent the live or last run went by
	// (0: the implicit default): a recovered or steered run goes on with it.
	AgentVersion uint64 `json:"agent_version,omitempty"`
	// NextAgent is an agent profile an event named while a run was live:
	// the session is bound to it from its next run on. It is kept here,
	// not in the runner that took the event, so a run that follows on
	// another runner — a recovery after that runner died — still goes by
	// it; the next run's claim moves it into Agent.
	NextAgent string `json:"next_agent,omitempty"`

	// Lineage is set on a sub-agent's session: its ancestors, root first,
	// its parent last. Ground Stop of any of them covers it.
	Lineage []string `json:"lineage,omitempty"`
	// Number is a sub-agent's number among its parent's children (1, 2, …).
	Number int `json:"number,omitempty"`
	// RootFuel is the root session's token budget (0: none) that a
	// sub-agent's runs count against; its use is added to the root's
	// TokensUsed.
	RootFuel int64 `json:"root_fuel,omitempty"`
	// Children are the sub-agents this session's runs started, in order.
	Children []Child `json:"children,omitempty"`

	// unknown holds the fields of a stored record this version does not
	// know: Decode keeps them, Encode writes them back as they were.
	unknown map[string]json.RawMessage
}

// Child is one sub-agent a session started: its own session (whose
// record says how it is doing), its profile and number, when and by which
// run it was started.
type Child struct {
	Session string    `json:"session"`
	Agent   string    `json:"agent,omitempty"`
	Number  int       `json:"number"`
	Run     string    `json:"run,omitempty"`
	Started time.Time `json:"started"`
}

// Parent is the session that started this one ("" for a root session).
func (r Record) Parent() string {
	if len(r.Lineage) == 0 {
		return ""
	}
	return r.Lineage[len(r.Lineage)-1]
}

// Root is the first session of this one's lineage (itself for a root).
func (r Record) Root() string {
	if len(r.Lineage) == 0 {
		return r.Session
	}
	return r.Lineage[0]
}

// Clone is a copy of r that shares no slice, map or pointer with it.
func (r Record) Clone() Record {
	c := r
	c.Inputs = append([]string(nil), r.Inputs...)
	c.RecentRuns = append([]time.Time(nil), r.RecentRuns...)
	c.Lineage = append([]string(nil), r.Lineage...)
	c.Children = append([]Child(nil), r.Children...)
	if r.Attempts.Last != nil {
		last := *r.Attempts.Last
		c.Attempts.Last = &last
	}
	if r.Policy != nil {
		p := *r.Policy
		c.Policy = &p
	}
	if r.WorkerWait != nil {
		w := *r.WorkerWait
		c.WorkerWait = &w
	}
	c.unknown = maps.Clone(r.unknown)
	return c
}

// knownNames are the JSON names of Record's fields.
var knownNames = sync.OnceValue(func() map[string]bool {
	names := map[string]bool{}
	t := reflect.TypeFor[Record]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names[name] = true
		}
	}
	return names
})

// Key is the session's key in the sessions bucket.
func Key(tenant, session string) string { return tenant + "." + session }

// ErrLost means a compare-and-swap on the session record was refused:
// someone else changed it since it was read.
var ErrLost = errors.New("session record changed under us")

// ErrUnreadable means a stored record is not a record (not a JSON object
// of its fields).
var ErrUnreadable = errors.New("session record unreadable")

// Decode reads a stored record, keeping the fields it does not know for
// Encode. A record with only known fields, the usual case, is decoded once.
func Decode(value []byte) (Record, error) {
	var rec Record
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	err := dec.Decode(&rec)
	if err != nil && strings.HasPrefix(err.Error(), "json: unknown field") {
		rec, err = decodeWithUnknown(value)
	}
	if err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrUnreadable, err)
	}
	return rec, nil
}

func decodeWithUnknown(value []byte) (Record, error) {
	var rec Record
	if err := json.Unmarshal(value, &rec); err != nil {
		return Record{}, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(value, &fields); err != nil {
		return Record{}, err
	}
	names := knownNames()
	for f := range fields {
		if names[f] {
			delete(fields, f)
		}
	}
	rec.unknown = fields
	return rec, nil
}

// Encode is the stored form of rec: its known fields, and the unknown ones
// Decode found, as they were. (json.Marshal of a Record writes only the
// known ones.)
func Encode(rec Record) ([]byte, error) {
	b, err := json.Marshal(rec)
	if err != nil || len(rec.unknown) == 0 {
		return b, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	for k, v := range rec.unknown {
		if _, ok := fields[k]; !ok {
			fields[k] = v
		}
	}
	return json.Marshal(fields)
}

// Get returns the record and its revision; a missing record is an idle one
// with revision 0.
func Get(ctx context.Context, kv jetstream.KeyValue, tenant, session string) (Record, uint64, error) {
	e, err := kv.Get(ctx, Key(tenant, session))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Record{Tenant: tenant, Session: session, State: StateIdle}, 0, nil
	}
	if err != nil {
		return Record{}, 0, fmt.Errorf("session %s/%s: read record: %w", tenant, session, err)
	}
	rec, err := Decode(e.Value())
	if err != nil {
		return Record{}, 0, fmt.Errorf("session %s/%s: %w", tenant, session, err)
	}
	return rec, e.Revision(), nil
}

// Put writes rec if the stored revision is still rev (0: the record must
// not exist yet) and returns the new revision. A refusal wraps ErrLost.
func Put(ctx context.Context, kv jetstream.KeyValue, rec Record, rev uint64) (uint64, error) {
	data, err := Encode(rec)
	if err != nil {
		return 0, fmt.Errorf("session %s/%s: encode record: %w", rec.Tenant, rec.Session, err)
	}
	key := Key(rec.Tenant, rec.Session)
	var n uint64
	if rev == 0 {
		n, err = kv.Create(ctx, key, data)
	} else {
		n, err = kv.Update(ctx, key, data, rev)
	}
	if err != nil {
		if IsConflict(err) {
			return 0, fmt.Errorf("%w: %s/%s at revision %d", ErrLost, rec.Tenant, rec.Session, rev)
		}
		return 0, fmt.Errorf("session %s/%s: write record: %w", rec.Tenant, rec.Session, err)
	}
	return n, nil
}

// IsConflict says a KV Create or Update was refused because the key's
// revision was not the one expected.
func IsConflict(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) ||
		(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence)
}
