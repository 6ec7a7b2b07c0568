package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	rec "jetway/pkg/control/approvals"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
	"jetway/pkg/redact"
)

// approvalsCore is the people in the loop: the tool calls and questions
// sessions wait on (docs/APPROVALS.md). A decision is a compare-and-swap
// on the approval's record in the control bucket, which no tenant can
// write, then an io.jetway.approval.decided event that wakes the session;
// the runner goes by the record, so the event alone decides nothing.
type approvalsCore struct {
	*store
	log    zerolog.Logger
	source string
	events *eventsCore // claims the decided event's id, so it is stored once
}

// ApprovalList answers GET /v1/sessions/{session}/approvals.
type ApprovalList = api.ApprovalList

// DecisionRequest is the body of POST /v1/sessions/{session}/approvals/{id}.
type DecisionRequest = api.DecisionRequest

// Approvals lists the approvals waiting in one of the caller's sessions,
// or in all of them when session is "".
func (d *approvalsCore) Approvals(ctx context.Context, p auth.Principal, session string) ([]api.Approval, error) {
	if session != "" {
		if err := events.ValidateToken("session", session); err != nil {
			return nil, err
		}
	}
	kv, err := d.controlBucket(ctx)
	if err != nil {
		return nil, err
	}
	// The tenant's, filtered: a sub-agent's approvals show on every
	// session of its lineage too, so its root decides them.
	as, err := rec.List(ctx, kv, p.Tenant, "", true)
	if err != nil {
		return nil, unavailable("list approvals", err)
	}
	out := make([]api.Approval, 0, len(as))
	for _, a := range as {
		if session == "" || concerns(a, session) {
			out = append(out, wireApproval(a))
		}
	}
	return out, nil
}

// concerns reports whether a is session's own or one of its sub-agents'.
func concerns(a rec.Approval, session string) bool {
	return a.Session == session || slices.Contains(a.Lineage, session)
}

// find reads approval id of session or of one of its sub-agents.
func (d *approvalsCore) find(ctx context.Context, kv jetstream.KeyValue, tenant, session, id string) (rec.Approval, error) {
	a, _, err := rec.Get(ctx, kv, tenant, session, id)
	if !errors.Is(err, rec.ErrNotFound) {
		return a, err
	}
	all, err := rec.List(ctx, kv, tenant, "", false)
	if err != nil {
		return rec.Approval{}, err
	}
	for _, a := range all {
		if a.ID == id && concerns(a, session) {
			return a, nil
		}
	}
	return rec.Approval{}, rec.ErrNotFound
}

// waitingApprovals are a session's pending approvals, for its detail.
func waitingApprovals(ctx context.Context, st *store, tenant, session string) ([]api.Approval, error) {
	return (&approvalsCore{store: st}).Approvals(ctx, auth.Principal{Tenant: tenant}, session)
}

// Decide takes a person's decision on one approval of the caller's
// session: 404 for one the tenant does not have, 403 for a caller the
// profile does not let decide, 409 with the earlier decision when someone
// decided first.
func (d *approvalsCore) Decide(ctx context.Context, p auth.Principal, session, id string, req DecisionRequest) (api.Approval, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return api.Approval{}, err
	}
	if err := events.ValidateToken("approval", id); err != nil {
		return api.Approval{}, err
	}
	kv, err := d.controlBucket(ctx)
	if err != nil {
		return api.Approval{}, err
	}
	a, err := d.find(ctx, kv, p.Tenant, session, id)
	if errors.Is(err, rec.ErrNotFound) {
		return api.Approval{}, noApproval(session, id)
	}
	if err != nil {
		return api.Approval{}, unavailable("read approval", err)
	}
	if a.Approvers == agents.ApproversAdmins && !p.Admin {
		return api.Approval{}, problemf(http.StatusForbidden, "forbidden", "Not an approver",
			"approval %s may be decided by an admin of tenant %s only (the profile's approvers: admins)", id, p.Tenant)
	}
	decided, err := rec.Decide(ctx, kv, p.Tenant, a.Session, id, rec.Decision{
		Decision: req.Decision, Reason: req.Reason, Answer: req.Answer, Input: req.Input, By: decider(p)})
	var already *rec.AlreadyDecidedError
	var invalid *rec.InvalidDecisionError
	switch {
	case errors.As(err, &already):
		_ = d.wake(ctx, already.Approval) // a retry after a lost wake-up repairs it
		return api.Approval{}, alreadyDecided(already.Approval)
	case errors.Is(err, rec.ErrNotFound): // pruned since it was read
		return api.Approval{}, noApproval(session, id)
	case errors.As(err, &invalid):
		pr := problem(http.StatusBadRequest, "invalid-decision", "Invalid decision", invalid.Reason)
		pr.Field = "decision"
		return api.Approval{}, pr
	case err != nil:
		return api.Approval{}, unavailable("record decision", err)
	}
	d.cancelTimeout(ctx, decided)
	if err := d.wake(ctx, decided); err != nil {
		return api.Approval{}, unavailable("wake the session", err)
	}
	return wireApproval(decided), nil
}

// wake publishes the decided event of a decided approval not yet
// delivered. Its id is the approval's and claimed first as a caller-chosen
// id is (dedupe.go), so a repeat (a retry after a lost wake-up, answered
// 409) stores it at most once.
func (d *approvalsCore) wake(ctx context.Context, a rec.Approval) error {
	if !a.Decided() || a.DeliveredBy != "" || a.Decision == nil {
		return nil
	}
	dup, release, err := d.events.claimID(ctx, a.Tenant, a.Session, DecidedEventID(a.ID))
	if err != nil || dup {
		return err
	}
	e, err := events.New(a.Tenant, a.Session, d.source, events.ApprovalDecided{Approval: a.ID, Decision: a.Decision.Decision})
	if err != nil {
		release()
		return err
	}
	e.SetID(DecidedEventID(a.ID))
	subject, _ := events.EventsSubject(a.Tenant, a.Session) // valid: the record's key held them
	msg, err := events.Encode(ctx, subject, e)
	if err != nil {
		release()
		return err
	}
	if _, err := d.js.PublishMsg(ctx, msg); err != nil {
		release()
		return err
	}
	return nil
}

// DecidedEventID is the CloudEvents id of the event that wakes a session
// for approval id's decision.
func DecidedEventID(id string) string { return "decided-" + id }

// cancelTimeout purges a decided approval's timeout schedule, so it never
// fires; one that fires anyway is refused by the runner as stale.
func (d *approvalsCore) cancelTimeout(ctx context.Context, a rec.Approval) {
	if a.Schedule == "" {
		return
	}
	holder, err := events.ScheduleSubject(a.Tenant, a.Session, a.Schedule)
	if err != nil {
		return
	}
	st, err := d.js.Stream(ctx, bus.StreamSchedules)
	if err == nil {
		err = st.Purge(ctx, jetstream.WithPurgeSubject(holder))
	}
	if err != nil {
		d.log.Warn().Err(err).Str("approval", a.ID).Msg("cancel approval timeout")
	}
}

// decider names who decided in the record and the transcript: the
// principal carries a tenant and a role, not a person's name.
func decider(p auth.Principal) string {
	if p.Admin {
		return "admin of " + p.Tenant
	}
	return "user of " + p.Tenant
}

func noApproval(session, id string) *Problem {
	return problemf(http.StatusNotFound, "not-found", "No such approval", "session %q has no approval %q", session, id)
}

func alreadyDecided(a rec.Approval) *Problem {
	w := wireApproval(a)
	pr := problemf(http.StatusConflict, "already-decided", "Already decided",
		"approval %s was already decided (%s)", a.ID, a.State)
	pr.Approval = &w
	return pr
}

// wireApproval is an approval as the API shows it, its input redacted.
func wireApproval(a rec.Approval) api.Approval {
	w := api.Approval{ID: a.ID, Session: a.Session, Kind: string(a.Kind), Tool: a.Tool, Question: a.Question,
		Choices: a.Choices, Run: a.Run, Approvers: a.Approvers, RequestedAt: a.RequestedAt, ExpiresAt: a.ExpiresAt, State: string(a.State)}
	if len(a.Input) > 0 {
		w.Input = redact.JSON(a.Input)
	}
	if d := a.Decision; d != nil {
		dec := *d
		if len(d.Input) > 0 {
			dec.Input = redact.JSON(d.Input)
		}
		w.Decision = &dec
	}
	return w
}

// decodeDecisionRequest reads a decision's body strictly: a misspelt field
// would otherwise approve without the edit or reason meant.
func decodeDecisionRequest(b []byte) (DecisionRequest, error) {
	var req DecisionRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, problemf(http.StatusBadRequest, "bad-request", "Malformed JSON body", "%v", err)
	}
	return req, nil
}
