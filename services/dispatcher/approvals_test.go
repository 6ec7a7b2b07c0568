package dispatcher

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"jetway/pkg/bus"
	rec "jetway/pkg/control/approvals"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
	"jetway/services/runner"
)

// pendingApproval records a pending approval in tenant default's session
// s1 as a runner does.
func (f *fixture) pendingApproval(t *testing.T, id string, kind rec.Kind, approvers string) rec.Approval {
	t.Helper()
	ctx := context.Background()
	kv, err := f.js.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	a := rec.Approval{ID: id, Tenant: "default", Session: "s1", Run: "r-1", Kind: kind, Approvers: approvers,
		RequestedAt: now, ExpiresAt: now.Add(time.Hour), State: rec.Pending}
	if kind == rec.KindTool {
		a.Tool, a.Input = "shell", json.RawMessage(`{"command":"deploy --token=hunter2hunter2hunter2"}`)
	} else {
		a.Question, a.Choices = "Which colour?", []string{"blue", "red"}
	}
	if _, err := rec.Create(ctx, kv, a); err != nil {
		t.Fatal(err)
	}
	return a
}

// idleSession records tenant default's session s1 as idle after a run.
func (f *fixture) idleSession(t *testing.T) {
	t.Helper()
	b, _ := json.Marshal(runner.SessionRecord{Tenant: "default", Session: "s1", State: runner.StateIdle, Runs: 1})
	if _, err := f.sessions().Create(context.Background(), "default.s1", b); err != nil {
		t.Fatal(err)
	}
}

func TestApprovals_are_listed_per_session_and_tenant_wide_with_the_input_redacted(t *testing.T) {
	f := newFixture(t)
	f.pendingApproval(t, "ap-1", rec.KindTool, "tenant")
	f.pendingApproval(t, "ap-2", rec.KindQuestion, "tenant")
	got := decode[ApprovalList](t, f.do("GET", "/v1/sessions/s1/approvals", tokUser, nil), http.StatusOK)
	if len(got.Approvals) != 2 || got.Approvals[0].ID != "ap-1" || got.Approvals[1].Kind != "question" {
		t.Fatalf("approvals = %+v", got.Approvals)
	}
	if strings.Contains(string(got.Approvals[0].Input), "hunter2") {
		t.Fatalf("input not redacted: %s", got.Approvals[0].Input)
	}
	all := decode[ApprovalList](t, f.do("GET", "/v1/approvals", tokUser, nil), http.StatusOK)
	if len(all.Approvals) != 2 {
		t.Fatalf("tenant-wide approvals = %+v", all.Approvals)
	}
	other := decode[ApprovalList](t, f.do("GET", "/v1/approvals", tokAcme, nil), http.StatusOK)
	if len(other.Approvals) != 0 {
		t.Fatalf("tenant acme sees %+v", other.Approvals)
	}
}

func TestAn_approval_records_the_decision_and_wakes_the_session(t *testing.T) {
	f := newFixture(t)
	f.idleSession(t)
	f.pendingApproval(t, "ap-1", rec.KindTool, "tenant")
	got := decode[api.Approval](t, f.do("POST", "/v1/sessions/s1/approvals/ap-1", tokUser, DecisionRequest{Decision: "approve"}), http.StatusOK)
	if got.State != "approved" || got.Decision == nil || got.Decision.By != "user of default" {
		t.Fatalf("answer = %+v", got)
	}
	evs, _ := f.eventsOn("jetway.events.default.s1")
	if len(evs) != 1 || evs[0].ID != DecidedEventID("ap-1") {
		t.Fatalf("published %+v, want the decided event", evs)
	}
	if p, ok := evs[0].Payload.(events.ApprovalDecided); !ok || p.Approval != "ap-1" {
		t.Fatalf("payload = %#v", evs[0].Payload)
	}
	detail := decode[SessionDetail](t, f.do("GET", "/v1/sessions/s1", tokUser, nil), http.StatusOK)
	if len(detail.Waiting) != 0 {
		t.Fatalf("a decided approval still waits: %+v", detail.Waiting)
	}
}

func TestA_session_with_a_pending_approval_shows_waiting_for_it(t *testing.T) {
	f := newFixture(t)
	f.idleSession(t)
	f.pendingApproval(t, "ap-1", rec.KindTool, "tenant")
	detail := decode[SessionDetail](t, f.do("GET", "/v1/sessions/s1", tokUser, nil), http.StatusOK)
	if detail.State != "waiting" || len(detail.Waiting) != 1 || detail.Waiting[0].Tool != "shell" {
		t.Fatalf("detail state %q waiting %+v", detail.State, detail.Waiting)
	}
}

func TestA_second_decision_is_refused_with_the_first(t *testing.T) {
	f := newFixture(t)
	f.pendingApproval(t, "ap-1", rec.KindTool, "tenant")
	decode[api.Approval](t, f.do("POST", "/v1/sessions/s1/approvals/ap-1", tokUser, DecisionRequest{Decision: "reject", Reason: "no"}), http.StatusOK)
	pr := problemOf(t, f.do("POST", "/v1/sessions/s1/approvals/ap-1", tokAdmin, DecisionRequest{Decision: "approve"}), http.StatusConflict)
	if pr.Approval == nil || pr.Approval.State != "rejected" || pr.Approval.Decision.Reason != "no" {
		t.Fatalf("409 carries %+v, want the earlier rejection", pr.Approval)
	}
	evs, _ := f.eventsOn("jetway.events.default.s1")
	if len(evs) != 1 {
		t.Fatalf("%d decided events, want 1", len(evs))
	}
}

func TestAnother_tenant_s_approval_is_not_found(t *testing.T) {
	f := newFixture(t)
	f.pendingApproval(t, "ap-1", rec.KindTool, "tenant")
	problemOf(t, f.do("POST", "/v1/sessions/s1/approvals/ap-1", tokAcme, DecisionRequest{Decision: "approve"}), http.StatusNotFound)
	problemOf(t, f.do("POST", "/v1/sessions/s1/approvals/ap-9", tokUser, DecisionRequest{Decision: "approve"}), http.StatusNotFound)
}

func TestA_non_approver_is_forbidden_and_an_admin_decides(t *testing.T) {
	f := newFixture(t)
	f.pendingApproval(t, "ap-1", rec.KindTool, "admins")
	problemOf(t, f.do("POST", "/v1/sessions/s1/approvals/ap-1", tokUser, DecisionRequest{Decision: "approve"}), http.StatusForbidden)
	decode[api.Approval](t, f.do("POST", "/v1/sessions/s1/approvals/ap-1", tokAdmin, DecisionRequest{Decision: "approve"}), http.StatusOK)
}

func TestA_decision_that_does_not_fit_is_refused(t *testing.T) {
	f := newFixture(t)
	f.pendingApproval(t, "ap-1", rec.KindQuestion, "tenant")
	for _, d := range []DecisionRequest{{Decision: "approve"}, {Decision: "answer", Answer: "green"}, {Decision: "maybe"}} {
		problemOf(t, f.do("POST", "/v1/sessions/s1/approvals/ap-1", tokUser, d), http.StatusBadRequest)
	}
	got := decode[api.Approval](t, f.do("POST", "/v1/sessions/s1/approvals/ap-1", tokUser, DecisionRequest{Decision: "answer", Answer: "blue"}), http.StatusOK)
	if got.State != "answered" {
		t.Fatalf("answer = %+v", got)
	}
}

func TestThe_NATS_API_lists_and_decides_approvals(t *testing.T) {
	f := newFixture(t)
	f.serveNATS(t)
	f.pendingApproval(t, "ap-1", rec.KindTool, "tenant")
	ask := func(body string) []byte {
		t.Helper()
		return natsRequest(t, f, api.SubjectPrefix+".approvals", tokUser, body).Data
	}
	var list ApprovalList
	if err := json.Unmarshal(ask(`{"session":"s1"}`), &list); err != nil || len(list.Approvals) != 1 {
		t.Fatalf("list = %+v, %v", list, err)
	}
	var got api.Approval
	if err := json.Unmarshal(ask(`{"action":"decide","session":"s1","approval":"ap-1","decision":"approve","input":{"command":"deploy staging"}}`), &got); err != nil || got.State != "approved" {
		t.Fatalf("decide = %+v, %v", got, err)
	}
}

func TestA_sub_agent_s_approval_shows_on_its_root_and_is_decided_there(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	kv, err := f.js.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	child := rec.Approval{ID: "ap-c", Tenant: "default", Session: "s1-a1", Lineage: []string{"s1"}, Run: "r-c", Kind: rec.KindTool,
		Tool: "shell", Input: json.RawMessage(`{"command":"deploy"}`), Approvers: "tenant", RequestedAt: now, ExpiresAt: now.Add(time.Hour), State: rec.Pending}
	if _, err := rec.Create(ctx, kv, child); err != nil {
		t.Fatal(err)
	}
	got := decode[ApprovalList](t, f.do("GET", "/v1/sessions/s1/approvals", tokUser, nil), http.StatusOK)
	if len(got.Approvals) != 1 || got.Approvals[0].Session != "s1-a1" {
		t.Fatalf("root lists %+v", got.Approvals)
	}
	decode[api.Approval](t, f.do("POST", "/v1/sessions/s1/approvals/ap-c", tokUser, DecisionRequest{Decision: "approve"}), http.StatusOK)
	evs, _ := f.eventsOn("jetway.events.default.s1-a1")
	if len(evs) != 1 || evs[0].ID != DecidedEventID("ap-c") {
		t.Fatalf("the child was not woken: %+v", evs)
	}
	problemOf(t, f.do("POST", "/v1/sessions/s2/approvals/ap-c", tokUser, DecisionRequest{Decision: "reject"}), http.StatusNotFound)
}
