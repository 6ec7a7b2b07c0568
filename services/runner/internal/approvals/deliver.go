package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"jetway/pkg/agent/tool"
	rec "jetway/pkg/control/approvals"
	"jetway/pkg/events"
)

// timeoutSkew is how much earlier than its expiry a timeout is taken: the
// schedule fires by the server's clock, the check is by this runner's, and
// a timeout refused for a skew would never fire again. A forged timeout
// gains at most this much.
const timeoutSkew = time.Minute

// Find returns the tool an approved call runs with; nil when there is none.
type Find func(a rec.Approval) tool.Tool

// Deliver turns the decided event eventID of the session into what the
// model reads. An approved call runs here, once: the record says executing
// before it starts and done with its result after, each step a
// compare-and-swap, so a second delivery (the same event again after a
// crash, two runners racing) never starts it again. ErrNotDecided refuses
// an event that decides nothing.
func (g *Gate) Deliver(ctx context.Context, tenant, session, eventID string, p events.ApprovalDecided, find Find) (string, error) {
	for range 4 {
		a, rev, err := rec.Get(ctx, g.KV, tenant, session, p.Approval)
		if errors.Is(err, rec.ErrNotFound) {
			return "", fmt.Errorf("%w: no approval %s in this session", ErrNotDecided, p.Approval)
		}
		if err != nil {
			return "", err
		}
		if a.InCall {
			return "", g.inCall(ctx, a, rev, p)
		}
		if a.DeliveredBy != "" && a.DeliveredBy != eventID {
			return "", fmt.Errorf("%w: approval %s was delivered by event %s", ErrNotDecided, a.ID, a.DeliveredBy)
		}
		text, retry, err := g.step(ctx, a, rev, eventID, p, find)
		if !retry {
			if err == nil {
				// Delivered: the session's old ones have served their time.
				_ = rec.Prune(ctx, g.KV, tenant, session, g.now().Add(-rec.Retention))
			}
			return text, err
		}
	}
	return "", fmt.Errorf("approval %s: the record kept changing", p.Approval)
}

// step takes one delivery step on a at rev; retry is a lost
// compare-and-swap, to be read again.
func (g *Gate) step(ctx context.Context, a rec.Approval, rev uint64, eventID string, p events.ApprovalDecided, find Find) (text string, retry bool, err error) {
	switch a.State {
	case rec.Pending:
		if p.Decision != rec.DecisionTimeout || g.now().Add(timeoutSkew).Before(a.ExpiresAt) {
			return "", false, fmt.Errorf("%w: approval %s is still pending", ErrNotDecided, a.ID)
		}
		a.State, a.Decision = rec.Expired, &rec.Decision{Decision: rec.DecisionTimeout, At: g.now()}
		return g.claim(ctx, a, rev, eventID)
	case rec.Approved:
		a.State = rec.Executing
		a.DeliveredBy = eventID
		n, err := rec.Update(ctx, g.KV, a, rev)
		if err != nil {
			return "", rec.IsConflict(err), err
		}
		a = g.execute(ctx, a, find)
		// Should recording the result fail, it still reaches the model; a
		// redelivery would say it is unknown, never run the call again.
		_, _ = rec.Update(ctx, g.KV, a, n)
		return Text(a), false, nil
	case rec.Rejected, rec.Answered, rec.Expired:
		return g.claim(ctx, a, rev, eventID)
	}
	return Text(a), false, nil // executing or done: never run again
}

// claim records that eventID delivers a's decision.
func (g *Gate) claim(ctx context.Context, a rec.Approval, rev uint64, eventID string) (string, bool, error) {
	if a.DeliveredBy == eventID {
		return Text(a), false, nil
	}
	a.DeliveredBy = eventID
	if _, err := rec.Update(ctx, g.KV, a, rev); err != nil {
		return "", rec.IsConflict(err), err
	}
	return Text(a), false, nil
}

// execute runs an approved call with the input the person approved.
func (g *Gate) execute(ctx context.Context, a rec.Approval, find Find) rec.Approval {
	a.State = rec.Done
	t := find(a)
	if t == nil {
		a.Result, a.IsError = fmt.Sprintf("tool %s is not available to this run", a.Tool), true
		return a
	}
	input := a.Input
	if a.Decision != nil && len(a.Decision.Input) > 0 {
		input = a.Decision.Input
	}
	res, err := t.Run(ctx, tool.Call{ID: a.CallID, Input: input, Progress: func(string) {}})
	if err != nil {
		res = tool.Result{Content: err.Error(), IsError: true}
	}
	a.Result, a.IsError = res.Content, res.IsError
	return a
}

// Text is what the model reads of a decided approval.
func Text(a rec.Approval) string {
	d := rec.Decision{}
	if a.Decision != nil {
		d = *a.Decision
	}
	by := "A person"
	if d.By != "" {
		by = "A person (" + d.By + ")"
	}
	what := fmt.Sprintf("your call of %s (approval %s)", a.Tool, a.ID)
	if a.Kind == rec.KindQuestion {
		what = fmt.Sprintf("your question %q (approval %s)", a.Question, a.ID)
	}
	switch a.State {
	case rec.Rejected:
		return fmt.Sprintf("%s rejected %s; it did not run. Reason: %s", by, what, orNone(d.Reason))
	case rec.Answered:
		return fmt.Sprintf("%s answered %s: %s", by, what, d.Answer)
	case rec.Expired:
		outcome := "so it was rejected and did not run"
		if a.Kind == rec.KindQuestion {
			outcome = "so there is no answer"
		}
		return fmt.Sprintf("Nobody decided on %s before its timeout at %s, %s (timeout).",
			what, a.ExpiresAt.Format("2006-01-02T15:04:05Z07:00"), outcome)
	case rec.Executing:
		return fmt.Sprintf("%s approved %s. It was started by a runner that stopped before recording its result, and was not run again: "+
			"whether it finished is unknown. Check its effects (shell_job_list shows the session's commands) before running it again.", by, what)
	}
	edited := ""
	if len(d.Input) > 0 && !jsonEqual(d.Input, a.Input) {
		edited = fmt.Sprintf(" with its input edited to %s", d.Input)
	}
	status := "Its result"
	if a.IsError {
		status = "It failed"
	}
	return fmt.Sprintf("%s approved %s%s, and it ran. %s:\n%s", by, what, edited, status, a.Result)
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(none given)"
	}
	return s
}

func jsonEqual(x, y json.RawMessage) bool {
	var a, b any
	if json.Unmarshal(x, &a) != nil || json.Unmarshal(y, &b) != nil {
		return false
	}
	ax, _ := json.Marshal(a)
	bx, _ := json.Marshal(b)
	return string(ax) == string(bx)
}
