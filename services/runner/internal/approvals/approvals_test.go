package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	rec "jetway/pkg/control/approvals"
	"jetway/pkg/events"
)

func TestAsk_rules_naming_MCP_tools_are_denied_rather_than_let_through(t *testing.T) {
	got := Unheld([]string{"shell(git push*)", "mcp__tickets__close", " mcp__*"})
	if len(got) != 2 || got[0] != "mcp__tickets__close" {
		t.Fatalf("unheld = %q", got)
	}
}

func TestThe_model_reads_each_outcome_in_words_it_can_act_on(t *testing.T) {
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	call := rec.Approval{ID: "ap-1", Kind: rec.KindTool, Tool: "shell", Input: json.RawMessage(`{"command":"deploy"}`), ExpiresAt: at}
	with := func(st rec.State, d rec.Decision) rec.Approval { a := call; a.State, a.Decision = st, &d; return a }
	for _, c := range []struct {
		a    rec.Approval
		want string
	}{
		{with(rec.Rejected, rec.Decision{Reason: "not today", By: "ann"}), "A person (ann) rejected your call of shell (approval ap-1); it did not run. Reason: not today"},
		{with(rec.Expired, rec.Decision{}), "Nobody decided on your call of shell (approval ap-1) before its timeout at 2026-12-04T10:00:00Z, so it was rejected and did not run (timeout)."},
		{func() rec.Approval {
			a := with(rec.Done, rec.Decision{Input: json.RawMessage(`{"command":"deploy staging"}`)})
			a.Result = "ok"
			return a
		}(), "A person approved your call of shell (approval ap-1) with its input edited to {\"command\":\"deploy staging\"}, and it ran. Its result:\nok"},
	} {
		if got := Text(c.a); got != c.want {
			t.Errorf("Text(%s) =\n%s\nwant\n%s", c.a.State, got, c.want)
		}
	}
}

// gate is a Gate on a provisioned server, its clock at now.
func gate(t *testing.T, now *time.Time) *Gate {
	t.Helper()
	_, _, js := bustest.StartProvisioned(t, bus.ProvisionConfig{Partitions: 1})
	kv, err := js.KeyValue(context.Background(), bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	return &Gate{KV: kv, JS: js, Source: "test", Now: func() time.Time { return *now }}
}

func counting(n *int) Find {
	return func(rec.Approval) tool.Tool {
		return tool.Func{Name: "shell", Fn: func(context.Context, tool.Call) (tool.Result, error) {
			*n++
			return tool.Result{Content: "ran"}, nil
		}}
	}
}

func TestAn_approved_call_runs_once_however_often_its_decision_is_delivered(t *testing.T) {
	now := time.Now().UTC()
	g := gate(t, &now)
	ctx := context.Background()
	a := rec.Approval{ID: "ap-1", Tenant: "t1", Session: "s1", Kind: rec.KindTool, Tool: "shell", Input: json.RawMessage(`{}`),
		RequestedAt: now, ExpiresAt: now.Add(time.Hour), State: rec.Pending}
	if _, err := rec.Create(ctx, g.KV, a); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.Decide(ctx, g.KV, "t1", "s1", "ap-1", rec.Decision{Decision: rec.DecisionApprove}); err != nil {
		t.Fatal(err)
	}
	runs := 0
	decided := events.ApprovalDecided{Approval: "ap-1", Decision: rec.DecisionApprove}
	for range 3 {
		text, err := g.Deliver(ctx, "t1", "s1", "ev-1", decided, counting(&runs))
		if err != nil || !strings.Contains(text, "Its result:\nran") {
			t.Fatalf("delivery: %q, %v", text, err)
		}
	}
	if _, err := g.Deliver(ctx, "t1", "s1", "ev-2", decided, counting(&runs)); !errors.Is(err, ErrNotDecided) {
		t.Fatalf("another event's delivery: %v, want ErrNotDecided", err)
	}
	if runs != 1 {
		t.Fatalf("the call ran %d times", runs)
	}
}

func TestA_timeout_is_taken_only_when_due(t *testing.T) {
	now := time.Now().UTC()
	g := gate(t, &now)
	ctx := context.Background()
	a := rec.Approval{ID: "ap-1", Tenant: "t1", Session: "s1", Kind: rec.KindQuestion, Question: "colour?",
		RequestedAt: now, ExpiresAt: now.Add(time.Hour), State: rec.Pending}
	if _, err := rec.Create(ctx, g.KV, a); err != nil {
		t.Fatal(err)
	}
	timeout := events.ApprovalDecided{Approval: "ap-1", Decision: rec.DecisionTimeout}
	if _, err := g.Deliver(ctx, "t1", "s1", "ev-t", timeout, counting(new(int))); !errors.Is(err, ErrNotDecided) {
		t.Fatalf("an early timeout: %v, want ErrNotDecided", err)
	}
	now = now.Add(time.Hour - timeoutSkew/2) // the server's clock is ahead
	text, err := g.Deliver(ctx, "t1", "s1", "ev-t", timeout, counting(new(int)))
	if err != nil || !strings.Contains(text, "so there is no answer (timeout)") {
		t.Fatalf("the due timeout: %q, %v", text, err)
	}
}

func TestDelivered_approvals_are_pruned_after_their_retention(t *testing.T) {
	now := time.Now().UTC()
	g := gate(t, &now)
	ctx := context.Background()
	old := now.Add(-rec.Retention - time.Hour)
	for _, a := range []rec.Approval{
		{ID: "ap-old", State: rec.Rejected, DeliveredBy: "ev-0", Decision: &rec.Decision{Decision: rec.DecisionReject, At: old}},
		{ID: "ap-undelivered", State: rec.Rejected, Decision: &rec.Decision{Decision: rec.DecisionReject, At: old}},
		{ID: "ap-new", State: rec.Rejected, Decision: &rec.Decision{Decision: rec.DecisionReject, At: now}},
	} {
		a.Tenant, a.Session, a.Kind, a.Tool = "t1", "s1", rec.KindTool, "shell"
		if _, err := rec.Create(ctx, g.KV, a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Deliver(ctx, "t1", "s1", "ev-1", events.ApprovalDecided{Approval: "ap-new"}, counting(new(int))); err != nil {
		t.Fatal(err)
	}
	left, err := rec.List(ctx, g.KV, "t1", "s1", false)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range left {
		ids = append(ids, a.ID)
	}
	if slices.Contains(ids, "ap-old") || !slices.Contains(ids, "ap-undelivered") || !slices.Contains(ids, "ap-new") {
		t.Fatalf("left %v: want the old delivered one pruned, the others kept", ids)
	}
}
