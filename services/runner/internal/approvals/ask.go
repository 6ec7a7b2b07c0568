package approvals

import (
	"context"
	"errors"
	"fmt"
	"time"

	"jetway/pkg/agent/tool"
	"jetway/pkg/control/agents"
	rec "jetway/pkg/control/approvals"
	"jetway/pkg/events"
)

// ErrInCall answers a decided event for a question asked from inside a
// call (an MCP server's elicitation): the call that asked takes the
// decision from the record itself, so the event has nothing to tell the
// model.
var ErrInCall = errors.New("the decision went to the call that asked")

// closeTimeout bounds closing a question whose call ended: the run's own
// context is gone by then.
const closeTimeout = 5 * time.Second

// Ask puts q, asked from inside a call of the run, to a person: a pending
// question like ask_person's, listed, decided and timed out the same way.
// Unlike ask_person the run does not end, as the call that asked is in
// flight and takes the answer; Ask watches the record until it is decided
// and returns the decision. When ctx ends first (the call or the run
// ended, the runner stopped) the question is closed as expired, so nobody
// answers a call that is gone.
func (g *Gate) Ask(ctx context.Context, ref Ref, prof agents.Profile, q rec.Question) (rec.Reply, error) {
	a := g.request(ref, prof, tool.Call{})
	a.Kind, a.Question, a.Choices, a.InCall = rec.KindQuestion, q.Text, q.Choices, true
	a.Schedule = "t" + a.ID
	if err := g.scheduleTimeout(ctx, a); err != nil {
		return rec.Reply{}, err
	}
	if _, err := rec.Create(ctx, g.KV, a); err != nil {
		return rec.Reply{}, err
	}
	if g.Publish != nil {
		g.Publish(ctx, a.Tenant, a.Session, Requested(a))
	}
	decided, rev, err := g.await(ctx, a)
	if err != nil {
		g.closeUnanswered(a)
		return rec.Reply{}, err
	}
	g.claimForCall(decided, rev)
	reply := rec.Reply{State: decided.State}
	if d := decided.Decision; d != nil {
		reply.Answer, reply.Reason, reply.By = d.Answer, d.Reason, d.By
	}
	return reply, nil
}

// await watches a's record until it leaves pending.
func (g *Gate) await(ctx context.Context, a rec.Approval) (rec.Approval, uint64, error) {
	w, err := g.KV.Watch(ctx, rec.Key(a.Tenant, a.Session, a.ID))
	if err != nil {
		return rec.Approval{}, 0, fmt.Errorf("watch approval %s: %w", a.ID, err)
	}
	defer func() { _ = w.Stop() }() // the watch is only read here
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return rec.Approval{}, 0, fmt.Errorf("watch approval %s: ended", a.ID)
			}
			if e == nil {
				continue // the end of the initial values
			}
			now, rev, err := rec.Get(ctx, g.KV, a.Tenant, a.Session, a.ID)
			if err != nil {
				return rec.Approval{}, 0, err
			}
			if now.Decided() {
				return now, rev, nil
			}
		case <-ctx.Done():
			return rec.Approval{}, 0, fmt.Errorf("approval %s: %w", a.ID, ctx.Err())
		}
	}
}

// claimForCall records that the call that asked took the decision, so the
// record is pruned with the session's others. A lost compare-and-swap
// changes nothing: the decision stands either way.
func (g *Gate) claimForCall(a rec.Approval, rev uint64) {
	if a.DeliveredBy != "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	a.DeliveredBy = "call of run " + a.Run
	_, _ = rec.Update(ctx, g.KV, a, rev)
}

// closeUnanswered expires a question whose call ended before anyone
// decided it: it leaves the waiting list, and a late decision gets the
// 409 that says it was closed.
func (g *Gate) closeUnanswered(a rec.Approval) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	now, rev, err := rec.Get(ctx, g.KV, a.Tenant, a.Session, a.ID)
	if err != nil || now.Decided() {
		return
	}
	now.State = rec.Expired
	now.Decision = &rec.Decision{Decision: rec.DecisionTimeout, Reason: "the call that asked ended before anyone decided", At: g.now()}
	now.DeliveredBy = "call of run " + now.Run
	_, _ = rec.Update(ctx, g.KV, now, rev)
}

// inCall answers a decided event for a question asked from inside a call:
// a timeout due on one still pending expires it (which the waiting call,
// if any, reads as the end of the question); nothing reaches the model.
func (g *Gate) inCall(ctx context.Context, a rec.Approval, rev uint64, p events.ApprovalDecided) error {
	if a.State == rec.Pending && p.Decision == rec.DecisionTimeout && !g.now().Add(timeoutSkew).Before(a.ExpiresAt) {
		a.State, a.Decision = rec.Expired, &rec.Decision{Decision: rec.DecisionTimeout, At: g.now()}
		if _, err := rec.Update(ctx, g.KV, a, rev); err != nil && !rec.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("%w (approval %s)", ErrInCall, a.ID)
}
