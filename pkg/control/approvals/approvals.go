// Package approvals is the durable record of a person in the loop: a tool
// call a profile's tools.ask rule held back, or a question the model asked
// with ask_person. Each lives in the control bucket under
// approval.<tenant>.<session>.<id> and moves forward only, every step a
// compare-and-swap on its revision:
//
//	pending ─┬─ approved ── executing ── done
//	         ├─ rejected
//	         ├─ answered
//	         └─ expired
//
// The record, not an event, is the decision: only the dispatcher (and, for
// a timeout, the runner) writes it, and a tenant cannot reach the bucket,
// so an io.jetway.approval.decided event anyone publishes only wakes the
// session to read it. The executing step is taken before an approved call
// starts, which is what makes the call run at most once; recovery reads it.
//
// It is its own small package so the dispatcher, the runner and the CLI
// share one record without importing each other.
package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/control/sessionrec"
)

// Kind is what a person is asked.
type Kind string

// Kinds of approval.
const (
	KindTool     Kind = "tool"     // may this call run?
	KindQuestion Kind = "question" // what is the answer?
)

// State is where an approval stands.
type State string

// States of an approval; see the package comment for their order.
const (
	Pending   State = "pending"
	Approved  State = "approved"
	Rejected  State = "rejected"
	Answered  State = "answered"
	Expired   State = "expired"
	Executing State = "executing"
	Done      State = "done"
)

// Decisions a person (or the clock) takes.
const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
	DecisionAnswer  = "answer"
	DecisionTimeout = "timeout"
)

// Decision is who decided what, and when.
type Decision struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	Answer   string `json:"answer,omitempty"`
	// Input replaces the call's input when the person edited it.
	Input json.RawMessage `json:"input,omitempty"`
	By    string          `json:"by,omitempty"`
	At    time.Time       `json:"at"`
}

// Approval is one request for a person's decision.
type Approval struct {
	ID      string `json:"id"`
	Tenant  string `json:"tenant"`
	Session string `json:"session"`
	// Run is the run that asked; CallID the model's tool_use id.
	Run    string `json:"run"`
	CallID string `json:"call_id,omitempty"`
	// Lineage and Network are what the approved call runs with: the
	// session's ancestors (a sub-agent's) and its profile's network mode.
	Lineage []string `json:"lineage,omitempty"`
	Network string   `json:"network,omitempty"`
	Kind    Kind     `json:"kind"`
	// Tool and Input are the held-back call (Kind tool).
	Tool  string          `json:"tool,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// Question and Choices are what the model asked (Kind question).
	Question string   `json:"question,omitempty"`
	Choices  []string `json:"choices,omitempty"`
	// Approvers is who may decide: "tenant" or "admins".
	Approvers   string    `json:"approvers,omitempty"`
	RequestedAt time.Time `json:"requested_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	// Schedule is the id of the timeout's message schedule.
	Schedule string    `json:"schedule,omitempty"`
	State    State     `json:"state"`
	Decision *Decision `json:"decision,omitempty"`
	// DeliveredBy is the id of the decided event whose delivery took the
	// decision to the model: any other event for it is stale.
	DeliveredBy string `json:"delivered_by,omitempty"`
	// Result is what the approved call returned (state done).
	Result  string `json:"result,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// InCall marks a question asked from inside a call still under way (an
	// MCP server's elicitation): its answer goes back to that call, which
	// waits for it, not to the model's next turn.
	InCall bool `json:"in_call,omitempty"`
}

// Question is what something other than the model asks a person while a
// call waits for the answer: an MCP server's elicitation.
type Question struct {
	// Text is the question as a person reads it; Choices, when set, are
	// the only answers the decision may give.
	Text    string
	Choices []string
}

// Reply is how a Question was decided: its final state (answered,
// rejected or expired), the answer and the reason given.
type Reply struct {
	State  State
	Answer string
	Reason string
	By     string
}

// Asker puts a question to a person and waits, for as long as ctx allows,
// for the decision. It is how a service that cannot import the runner
// (package mcptools) reaches the run's approvals.
type Asker func(ctx context.Context, q Question) (Reply, error)

// Decided reports whether a decision was taken (any state past pending).
func (a Approval) Decided() bool { return a.State != Pending }

// ErrNotFound means no such approval in that session.
var ErrNotFound = errors.New("approval not found")

// AlreadyDecidedError refuses a second decision; it carries the first.
type AlreadyDecidedError struct{ Approval Approval }

func (e *AlreadyDecidedError) Error() string {
	return fmt.Sprintf("approval %s was already decided: %s", e.Approval.ID, e.Approval.State)
}

// Key is an approval's control-bucket key.
func Key(tenant, session, id string) string {
	return "approval." + tenant + "." + session + "." + id
}

// Get reads an approval and its revision.
func Get(ctx context.Context, kv jetstream.KeyValue, tenant, session, id string) (Approval, uint64, error) {
	e, err := kv.Get(ctx, Key(tenant, session, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Approval{}, 0, ErrNotFound
	}
	if err != nil {
		return Approval{}, 0, fmt.Errorf("approval %s: %w", id, err)
	}
	var a Approval
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		return Approval{}, 0, fmt.Errorf("approval %s: %w", id, err)
	}
	return a, e.Revision(), nil
}

// Create records a new approval; an id taken already is an error.
func Create(ctx context.Context, kv jetstream.KeyValue, a Approval) (uint64, error) {
	data, err := json.Marshal(a)
	if err != nil {
		return 0, err
	}
	rev, err := kv.Create(ctx, Key(a.Tenant, a.Session, a.ID), data)
	if err != nil {
		return 0, fmt.Errorf("record approval %s: %w", a.ID, err)
	}
	return rev, nil
}

// Update writes a by compare-and-swap on rev: a step taken by someone else
// first fails with jetstream's wrong-last-sequence error.
func Update(ctx context.Context, kv jetstream.KeyValue, a Approval, rev uint64) (uint64, error) {
	data, err := json.Marshal(a)
	if err != nil {
		return 0, err
	}
	n, err := kv.Update(ctx, Key(a.Tenant, a.Session, a.ID), data, rev)
	if err != nil {
		return 0, fmt.Errorf("update approval %s: %w", a.ID, err)
	}
	return n, nil
}

// Decide takes d on a pending approval. A decided one is refused with an
// *AlreadyDecidedError carrying the earlier decision; of two racing
// deciders exactly one wins the compare-and-swap.
func Decide(ctx context.Context, kv jetstream.KeyValue, tenant, session, id string, d Decision) (Approval, error) {
	for range 3 {
		a, rev, err := Get(ctx, kv, tenant, session, id)
		if err != nil {
			return Approval{}, err
		}
		if a.Decided() {
			return Approval{}, &AlreadyDecidedError{Approval: a}
		}
		if err := a.apply(d); err != nil {
			return Approval{}, err
		}
		if _, err := Update(ctx, kv, a, rev); err == nil {
			return a, nil
		} else if !wrongRevision(err) {
			return Approval{}, err
		}
	}
	a, _, err := Get(ctx, kv, tenant, session, id)
	if err != nil {
		return Approval{}, err
	}
	return Approval{}, &AlreadyDecidedError{Approval: a}
}

// InvalidDecisionError says why a decision does not fit its approval.
type InvalidDecisionError struct{ Reason string }

func (e *InvalidDecisionError) Error() string { return "invalid decision: " + e.Reason }

// apply moves a pending approval to the state d leads to.
func (a *Approval) apply(d Decision) error {
	bad := func(r string) error { return &InvalidDecisionError{Reason: r} }
	switch {
	case d.Decision == DecisionApprove && a.Kind == KindTool:
		a.State = Approved
		if len(d.Input) > 0 && !json.Valid(d.Input) {
			return bad("input is not JSON")
		}
	case d.Decision == DecisionReject:
		a.State = Rejected
	case d.Decision == DecisionAnswer && a.Kind == KindQuestion:
		if d.Answer == "" {
			return bad("answer is empty")
		}
		if len(a.Choices) > 0 && !slices.Contains(a.Choices, d.Answer) {
			return bad(fmt.Sprintf("answer %q is not one of the choices", d.Answer))
		}
		a.State = Answered
	case d.Decision == DecisionTimeout:
		a.State = Expired
	case d.Decision == DecisionApprove, d.Decision == DecisionAnswer:
		return bad(fmt.Sprintf("%s does not fit a %s approval", d.Decision, a.Kind))
	default:
		return bad(fmt.Sprintf("%q: one of approve, reject, answer", d.Decision))
	}
	if d.At.IsZero() {
		d.At = time.Now().UTC()
	}
	a.Decision = &d
	return nil
}

// wrongRevision reports whether err is a lost compare-and-swap.
func wrongRevision(err error) bool { return sessionrec.IsConflict(err) }

// IsConflict reports whether err is a lost compare-and-swap: someone took
// the step first.
func IsConflict(err error) bool { return wrongRevision(err) }

// List lists a tenant's approvals, of one session when session is set.
// Pending only when pendingOnly.
func List(ctx context.Context, kv jetstream.KeyValue, tenant, session string, pendingOnly bool) ([]Approval, error) {
	filter := "approval." + tenant + ".*.*"
	if session != "" {
		filter = "approval." + tenant + "." + session + ".*"
	}
	lister, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return []Approval{}, nil
		}
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	out := []Approval{}
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var a Approval
		if json.Unmarshal(e.Value(), &a) == nil && (!pendingOnly || a.State == Pending) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(x, y Approval) int { return x.RequestedAt.Compare(y.RequestedAt) })
	return out, nil
}

// Retention is how long a delivered approval is kept: long enough that a
// late second decision is answered 409 with the first, not 404.
const Retention = 7 * 24 * time.Hour

// Prune deletes the session's approvals delivered to the model and decided
// before cutoff. Each delete is conditional on the revision read, so a
// record that changed meanwhile stays.
func Prune(ctx context.Context, kv jetstream.KeyValue, tenant, session string, cutoff time.Time) error {
	lister, err := kv.ListKeysFiltered(ctx, "approval."+tenant+"."+session+".*")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("prune approvals: %w", err)
	}
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var a Approval
		if json.Unmarshal(e.Value(), &a) != nil || a.DeliveredBy == "" || a.Decision == nil || !a.Decision.At.Before(cutoff) {
			continue
		}
		if err := kv.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil && !IsConflict(err) {
			return fmt.Errorf("prune approval %s: %w", a.ID, err)
		}
	}
	return nil
}
