package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/control/agents"
	rec "jetway/pkg/control/approvals"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
	"jetway/services/runner/internal/approvals"
)

// newApprovalEnv is a runner whose default profile holds `shell(deploy*)`
// for a person, with a shell tool whose only side effect is a line
// appended to a file per command it ran, and a model whose first reply is
// first.
func newApprovalEnv(t *testing.T, timeout string, first llmtest.Reply) (*env, *llmtest.Anthropic, string) {
	t.Helper()
	e := newEnv(t)
	e.putProfile("t1", agents.DefaultName, agents.Profile{
		Tools:           dispatcherapi.AgentTools{Ask: []string{"shell(deploy*)"}},
		ApprovalTimeout: timeout,
	})
	ran := filepath.Join(t.TempDir(), "ran")
	model, p := fakeModel(t, first)
	model.SetFallback(llmtest.Reply{Text: "noted"})
	e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{appendingShell(ran)} })
	return e, model, ran
}

// appendingShell is a shell tool that appends each command to a file.
func appendingShell(path string) tool.Tool {
	return tool.Func{Name: "shell", Fn: func(_ context.Context, c tool.Call) (tool.Result, error) {
		var in struct{ Command string }
		_ = json.Unmarshal(c.Input, &in)
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return tool.Result{}, err
		}
		defer f.Close()
		_, _ = f.WriteString(in.Command + "\n")
		return tool.Result{Content: "ran: " + in.Command}, nil
	}}
}

func ranLines(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
}

// pending waits for the session's one pending approval.
func (e *env) pending(session string) rec.Approval {
	e.t.Helper()
	kv := e.controlKV()
	var got []rec.Approval
	testutil.Eventually(e.t, 20*time.Second, "a pending approval", func() bool {
		got, _ = rec.List(context.Background(), kv, "t1", session, true)
		return len(got) == 1 && e.session("t1", session).State == StateIdle
	})
	return got[0]
}

func (e *env) controlKV() jetstream.KeyValue {
	e.t.Helper()
	kv, err := e.js.KeyValue(context.Background(), bus.BucketControl)
	if err != nil {
		e.t.Fatal(err)
	}
	return kv
}

// decide records a decision as the dispatcher does and wakes the session.
func (e *env) decide(a rec.Approval, d rec.Decision) string {
	e.t.Helper()
	if _, err := rec.Decide(context.Background(), e.controlKV(), a.Tenant, a.Session, a.ID, d); err != nil {
		e.t.Fatal(err)
	}
	return e.publish(events.KindEvents, a.Tenant, a.Session, events.ApprovalDecided{Approval: a.ID, Decision: d.Decision})
}

// lastRequestHas waits for the model to read text in a request.
func lastRequestHas(t *testing.T, model *llmtest.Anthropic, text string) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, "the model to read "+text, func() bool {
		return countIn(model, "", text) > 0
	})
}

var deployCall = llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: "shell", Input: `{"command":"deploy prod"}`}}}

func TestAn_approved_call_runs_once_and_its_result_reaches_the_model(t *testing.T) {
	e, model, ran := newApprovalEnv(t, "", deployCall)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "ship it"})
	a := e.pending("s1")
	if a.Kind != rec.KindTool || a.Tool != "shell" || !strings.Contains(string(a.Input), "deploy prod") {
		t.Fatalf("approval = %+v", a)
	}
	if len(ranLines(ran)) != 0 {
		t.Fatal("the held call ran before a decision")
	}
	if d := time.Until(a.ExpiresAt); d < 23*time.Hour {
		t.Fatalf("expires in %s, want the default 24h", d)
	}
	e.decide(a, rec.Decision{Decision: rec.DecisionApprove, By: "ann"})
	lastRequestHas(t, model, "ran: deploy prod")
	if got := ranLines(ran); len(got) != 1 || got[0] != "deploy_prod" {
		t.Fatalf("side effects %q, want one deploy prod", got)
	}
	after, _, _ := rec.Get(context.Background(), e.controlKV(), "t1", "s1", a.ID)
	if after.State != rec.Done || after.Result != "ran: deploy prod" {
		t.Fatalf("record after = %+v", after)
	}
}

func TestA_rejected_call_never_runs_and_the_model_reads_the_reason(t *testing.T) {
	e, model, ran := newApprovalEnv(t, "", deployCall)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "ship it"})
	a := e.pending("s1")
	e.decide(a, rec.Decision{Decision: rec.DecisionReject, Reason: "not on a Friday"})
	lastRequestHas(t, model, "not on a Friday")
	if len(ranLines(ran)) != 0 {
		t.Fatal("a rejected call ran")
	}
}

func TestAn_edited_input_runs_instead_of_the_model_s(t *testing.T) {
	e, model, ran := newApprovalEnv(t, "", deployCall)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "ship it"})
	a := e.pending("s1")
	e.decide(a, rec.Decision{Decision: rec.DecisionApprove, Input: json.RawMessage(`{"command":"deploy staging"}`)})
	lastRequestHas(t, model, "ran: deploy staging")
	if got := ranLines(ran); len(got) != 1 || got[0] != "deploy_staging" {
		t.Fatalf("side effects %q, want one deploy staging", got)
	}
}

func TestA_question_s_answer_reaches_the_model(t *testing.T) {
	ask := llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: approvals.AskPersonTool, Input: `{"question":"Which colour?","choices":["blue","red"]}`}}}
	e, model, _ := newApprovalEnv(t, "", ask)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "paint it"})
	a := e.pending("s1")
	if a.Kind != rec.KindQuestion || a.Question != "Which colour?" || len(a.Choices) != 2 {
		t.Fatalf("approval = %+v", a)
	}
	e.decide(a, rec.Decision{Decision: rec.DecisionAnswer, Answer: "blue"})
	lastRequestHas(t, model, "answered your question")
	lastRequestHas(t, model, ": blue")
}

func TestA_call_nobody_decides_times_out_and_the_model_reads_the_timeout(t *testing.T) {
	e, model, ran := newApprovalEnv(t, "1s", deployCall)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "ship it"})
	a := e.pending("s1")
	lastRequestHas(t, model, "(timeout)")
	after, _, _ := rec.Get(context.Background(), e.controlKV(), "t1", "s1", a.ID)
	if after.State != rec.Expired || len(ranLines(ran)) != 0 {
		t.Fatalf("record after = %+v, side effects %q", after, ranLines(ran))
	}
}

// A decided event is only a wake-up: published without a decision in the
// record (a tenant can publish onto its session's subject), it is refused
// and nothing runs.
func TestA_forged_decided_event_decides_nothing(t *testing.T) {
	e, _, ran := newApprovalEnv(t, "", deployCall)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "ship it"})
	a := e.pending("s1")
	forged := e.publish(events.KindEvents, "t1", "s1", events.ApprovalDecided{Approval: a.ID, Decision: rec.DecisionApprove})
	testutil.Eventually(t, 20*time.Second, "the forged event refused", func() bool {
		for _, r := range e.records("t1", "s1") {
			if r.Kind == RecordRefused && r.Event == forged {
				return true
			}
		}
		return false
	})
	after, _, _ := rec.Get(context.Background(), e.controlKV(), "t1", "s1", a.ID)
	if after.State != rec.Pending || len(ranLines(ran)) != 0 {
		t.Fatalf("record after = %+v, side effects %q", after, ranLines(ran))
	}
}

// The runner died after the decision was recorded and before the call
// started: the decided event waits for the next runner, which runs the
// call once.
func TestA_decision_recorded_while_no_runner_lives_runs_the_call_once(t *testing.T) {
	e := newEnv(t)
	e.putProfile("t1", agents.DefaultName, agents.Profile{Tools: dispatcherapi.AgentTools{Ask: []string{"shell(deploy*)"}}})
	ran := filepath.Join(t.TempDir(), "ran")
	model, p := fakeModel(t, deployCall)
	model.SetFallback(llmtest.Reply{Text: "noted"})
	tools := func(SessionRef) []tool.Tool { return []tool.Tool{appendingShell(ran)} }
	ctx, stop := context.WithCancel(context.Background())
	r1, err := New(ctx, Config{NC: e.nc, ID: "r1", Provider: p, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r1.Run(ctx) }()
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "ship it"})
	a := e.pending("s1")
	stop()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("runner r1 did not stop")
	}
	e.decide(a, rec.Decision{Decision: rec.DecisionApprove})
	e.startRunner("r2", p, tools)
	lastRequestHas(t, model, "ran: deploy prod")
	if got := ranLines(ran); len(got) != 1 {
		t.Fatalf("side effects %q, want exactly one", got)
	}
}

// The runner died right after the call started: the record says executing
// for the decided event, the command's side effect happened, and the
// event was never acked. Its redelivery must not run the call again; the
// model reads that its result is unknown.
func TestA_call_started_before_its_runner_died_is_not_run_again(t *testing.T) {
	e, model, ran := newApprovalEnv(t, "", deployCall)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "ship it"})
	a := e.pending("s1")
	kv := e.controlKV()
	ctx := context.Background()
	decided, err := rec.Decide(ctx, kv, "t1", "s1", a.ID, rec.Decision{Decision: rec.DecisionApprove})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := events.New("t1", "s1", "dispatcher", events.ApprovalDecided{Approval: a.ID, Decision: rec.DecisionApprove})
	if err != nil {
		t.Fatal(err)
	}
	// What the dead runner left: executing under this event, the command run.
	_, rev, _ := rec.Get(ctx, kv, "t1", "s1", a.ID)
	decided.State, decided.DeliveredBy = rec.Executing, ev.ID()
	if _, err := rec.Update(ctx, kv, decided, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := appendingShell(ran).Run(ctx, tool.Call{Input: a.Input}); err != nil {
		t.Fatal(err)
	}
	subj, _ := events.EventsSubject("t1", "s1")
	e.send(subj, ev)
	lastRequestHas(t, model, "was not run again")
	if got := ranLines(ran); len(got) != 1 {
		t.Fatalf("side effects %q, want exactly one", got)
	}
}

// TestA_SIGKILLed_runner_never_runs_an_approved_call_twice runs `jetway
// runner` processes with a real jobs worker. Session before: the runner
// is SIGKILLed while the call waits, the decision is recorded with no
// runner alive, and the next runner runs it once. Session after: the
// decision reaches a runner, which is SIGKILLed while the command runs;
// the next one does not start it again and the model reads so. Each
// command counts its own runs in a file of its workspace.
func TestA_SIGKILLed_runner_never_runs_an_approved_call_twice(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	if _, err := buildJetway(); err != nil {
		t.Fatal(err)
	}
	srv := bustest.StartServerWith(t, 2)
	nc, js := bustest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: 2, WorkAckWait: 2 * time.Second, WorkPinnedTTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, nc: nc, js: js}
	root := t.TempDir()
	e.startWorker(root)
	e.putProfile("t1", agents.DefaultName, agents.Profile{Tools: dispatcherapi.AgentTools{Ask: []string{"shell(echo deploy*)"}}})
	model := llmtest.NewAnthropic(t)
	model.SetRouter(func(body []byte) (llmtest.Reply, bool) {
		r := readReq(body)
		switch {
		case strings.Contains(r.last, "deploy now"):
			return call("shell", map[string]any{"command": "echo deploy >> ran.txt; sleep 3; echo deployed"}), true
		}
		return llmtest.Reply{Text: "noted"}, true
	})
	ran := func(session string) []string { return ranLines(filepath.Join(root, "t1", session, "ran.txt")) }

	// Before: killed while the call waits; decided with no runner alive.
	ra := startRunnerProc(t, "ra", srv.ClientURL(), model.URL())
	e.publish(events.KindEvents, "t1", "before", events.Input{Text: "deploy now"})
	a := e.pending("before")
	ra.kill(t)
	e.decide(a, rec.Decision{Decision: rec.DecisionApprove})
	rb := startRunnerProc(t, "rb", srv.ClientURL(), model.URL())
	testutil.Eventually(t, 60*time.Second, "the approved call's result to reach the model", func() bool {
		return countIn(model, "", "and it ran") == 1
	})
	if got := ran("before"); len(got) != 1 {
		t.Fatalf("session before: the command ran %d times", len(got))
	}

	// After: killed while the approved command runs.
	e.publish(events.KindEvents, "t1", "after", events.Input{Text: "deploy now"})
	b := e.pending("after")
	e.decide(b, rec.Decision{Decision: rec.DecisionApprove})
	testutil.Eventually(t, 30*time.Second, "the command to start", func() bool {
		got, _, _ := rec.Get(context.Background(), e.controlKV(), "t1", "after", b.ID)
		return got.State == rec.Executing && len(ran("after")) == 1
	})
	rb.kill(t)
	startRunnerProc(t, "rc", srv.ClientURL(), model.URL())
	testutil.Eventually(t, 60*time.Second, "the model told the call was not run again", func() bool {
		return countIn(model, "", "was not run again") == 1
	})
	if got := ran("after"); len(got) != 1 {
		t.Fatalf("session after: the command ran %d times", len(got))
	}
}

// Ground Stop holds a decision like any event: the approved call does not
// run while a switch covers the session, and runs once it is lifted.
func TestGround_Stop_holds_an_approved_call_until_it_is_lifted(t *testing.T) {
	e, model, ran := newApprovalEnv(t, "", deployCall)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "ship it"})
	a := e.pending("s1")
	ctx := context.Background()
	control := e.controlKV()
	if _, err := groundstop.Set(ctx, control, "t1", "s1", groundstop.Record{Reason: "freeze", By: "t1"}); err != nil {
		t.Fatal(err)
	}
	held := e.workConsumer("t1", "s1")
	e.decide(a, rec.Decision{Decision: rec.DecisionApprove})
	testutil.Eventually(t, 20*time.Second, "the decision to be taken and held", func() bool {
		info, err := held.Info(ctx)
		return err == nil && info.NumAckPending == 1 && info.NumPending == 0
	})
	if got := ranLines(ran); len(got) != 0 {
		t.Fatalf("the call ran under Ground Stop: %q", got)
	}
	if err := groundstop.Clear(ctx, control, "t1", "s1"); err != nil {
		t.Fatal(err)
	}
	lastRequestHas(t, model, "ran: deploy prod")
	if got := ranLines(ran); len(got) != 1 {
		t.Fatalf("side effects %q, want exactly one", got)
	}
}

// TestEvery_decision_reaches_its_call holds that each of many sessions
// waiting one after another starts its approved call once decided, and
// logs the time from the decision to the call's start (make bench is
// where speed is measured; no wall-clock bound is asserted here).
func TestEvery_decision_reaches_its_call(t *testing.T) {
	e := newEnv(t)
	e.putProfile("t1", agents.DefaultName, agents.Profile{Tools: dispatcherapi.AgentTools{Ask: []string{"shell(deploy*)"}}})
	started := make(chan time.Time, 1)
	shell := tool.Func{Name: "shell", Fn: func(context.Context, tool.Call) (tool.Result, error) {
		started <- time.Now()
		return tool.Result{Content: "ran"}, nil
	}}
	model, p := fakeModel(t)
	model.SetRouter(func(body []byte) (llmtest.Reply, bool) {
		if strings.Contains(readReq(body).last, "ship it") {
			return deployCall, true
		}
		return llmtest.Reply{Text: "noted"}, true
	})
	e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{shell} })
	const n = 20
	var took []time.Duration
	for i := range n {
		s := fmt.Sprintf("s%d", i)
		e.publish(events.KindEvents, "t1", s, events.Input{Text: "ship it"})
		a := e.pending(s)
		e.decide(a, rec.Decision{Decision: rec.DecisionApprove})
		sent := time.Now()
		select {
		case at := <-started:
			took = append(took, at.Sub(sent))
		case <-time.After(20 * time.Second):
			t.Fatalf("session %s: the approved call never started", s)
		}
	}
	slices.Sort(took)
	p50, p99 := took[n/2], took[n*99/100]
	t.Logf("decision → call start over %d approvals: p50 %s, p99 %s, max %s", n, p50, p99, took[n-1])
}
