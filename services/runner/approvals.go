package runner

import (
	"context"
	"errors"

	"jetway/pkg/agent/tool"
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
// an approved call runs now, once, and the text says its result. live is
// the session's live run, "" when it has none.
func (r *Runner) decided(ctx context.Context, tenant, session, eventID string, p events.ApprovalDecided, live string) (string, error) {
	return r.approvals.Deliver(ctx, tenant, session, eventID, p, func(a rec.Approval) tool.Tool { return r.approvedTool(a, live) })
}

// approvedTool is the tool an approved call runs with: the runner's tool
// of that name, made for the session's live run when it has one, else for
// no run. Not for the run that asked: that run ended when it asked ("the
// decision comes in a later turn"), so the jobs worker's run fence would
// refuse its command. What keeps an approved call from running twice is
// the approval record's own compare-and-swap (executing, then done), not
// the run fence; a live run's id is still sent, so a runner that lost the
// session meanwhile starts nothing in its name.
func (r *Runner) approvedTool(a rec.Approval, live string) tool.Tool {
	if r.cfg.Tools == nil {
		return nil
	}
	ref := SessionRef{Tenant: a.Tenant, Session: a.Session, Run: live, Lineage: a.Lineage, Network: a.Network}
	for _, t := range r.cfg.Tools(ref) {
		if t.Spec().Name == a.Tool {
			return t
		}
	}
	return nil
}

// notDecided answers a decided event that decides nothing with a refusal
// (recorded, acked); a store that cannot be read makes it wait.
func (r *Runner) notDecided(ctx context.Context, a *actor, d delivery, err error) bool {
	if errors.Is(err, approvals.ErrNotDecided) {
		a.refuse(ctx, delivery{msg: d.msg, ev: d.ev, err: err})
		return true
	}
	a.log.Warn().Err(err).Msg("deliver approval decision")
	a.retryLater()
	return false
}
