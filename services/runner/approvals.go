package runner

import (
	"context"
	"errors"

	"jetway/pkg/agent/tool"
	"jetway/pkg/control/agents"
	rec "jetway/pkg/control/approvals"
	"jetway/pkg/events"
	"jetway/services/runner/internal/approvals"
)

// The runner's hooks into package approvals: a run's tools go through its
// Gate (launch), and a decided event becomes the text the model reads
// (handle). Everything else about a person in the loop lives there, so the
// actor does not grow a method for it.

// approvalRef is the run a request comes from, for package approvals.
func approvalRef(ref SessionRef) approvals.Ref {
	return approvals.Ref{Tenant: ref.Tenant, Session: ref.Session, Run: ref.Run, Lineage: ref.Lineage, Network: ref.Network}
}

// decided delivers the decision an io.jetway.approval.decided event names:
// an approved call runs now, once, and the text says its result. A call
// decided while a run is live runs under that run's fence, so a run that
// lost its session starts nothing for it; decided between runs there is no
// live run to fence with, and the approval's own compare-and-swap to
// executing (taken on a held lease) is what keeps it to one start.
func (r *Runner) decided(ctx context.Context, tenant, session, eventID string, p events.ApprovalDecided, live *liveRun) (string, error) {
	fence := ""
	if live != nil {
		fence = live.id
	}
	return r.approvals.Deliver(ctx, tenant, session, eventID, p, r.approvedTool(fence))
}

// approvedTool finds the tool an approved call runs with: the runner's
// tool of that name, made for the run whose fence it carries.
func (r *Runner) approvedTool(fence string) approvals.Find {
	return func(a rec.Approval) tool.Tool {
		if r.cfg.Tools == nil {
			return nil
		}
		ref := SessionRef{Tenant: a.Tenant, Session: a.Session, Run: fence, Lineage: a.Lineage, Network: a.Network}
		for _, t := range r.cfg.Tools(ref) {
			if t.Spec().Name == a.Tool {
				return t
			}
		}
		return nil
	}
}

// asker puts the run's in-call questions (an MCP server's elicitation)
// to a person, with the profile's approvers and timeout.
func (r *Runner) asker(ref SessionRef, prof agents.Profile) rec.Asker {
	return func(ctx context.Context, q rec.Question) (rec.Reply, error) {
		return r.approvals.Ask(ctx, approvalRef(ref), prof, q)
	}
}

// notDecided answers a decided event that decides nothing with a refusal
// (recorded, acked); one for a question asked from inside a call is
// recorded as answered there, and nothing reaches the model; a store that
// cannot be read makes it wait.
func (r *Runner) notDecided(ctx context.Context, a *actor, d delivery, err error) bool {
	if errors.Is(err, approvals.ErrInCall) {
		a.drop(ctx, RecordAnswered, d.ev.ID, d.ev.Type, d.msg, err.Error())
		return true
	}
	if errors.Is(err, approvals.ErrNotDecided) {
		return a.refuse(ctx, delivery{msg: d.msg, ev: d.ev, err: err})
	}
	a.log.Warn().Err(err).Msg("deliver approval decision")
	a.retryLater()
	return false
}
