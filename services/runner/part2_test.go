package runner

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/events"
	"jetway/pkg/handover"
	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
)

func (e *env) kv(bucket string) interface {
	Put(context.Context, string, []byte) (uint64, error)
} {
	e.t.Helper()
	kv, err := e.js.KeyValue(context.Background(), bucket)
	if err != nil {
		e.t.Fatal(err)
	}
	return kv
}

func (e *env) putRecord(rec SessionRecord) {
	e.t.Helper()
	data, _ := json.Marshal(rec)
	if _, err := e.kv(bus.BucketSessions).Put(context.Background(), sessionKey(rec.Tenant, rec.Session), data); err != nil {
		e.t.Fatal(err)
	}
}

// appendRecord writes a transcript record as another runner would.
func (e *env) appendRecord(tenant, session string, r Record) {
	e.t.Helper()
	subj, _ := events.TranscriptSubject(tenant, session)
	r.Time = time.Now().UTC()
	data, _ := json.Marshal(r)
	if _, err := e.js.Publish(context.Background(), subj, data); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) actor(r *Runner, tenant, session string) *actor {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.actors[sessionKey(tenant, session)]
}

// waitNotice waits until event id is a notice waiting in the live run's
// guide. Its being held is not enough: the actor holds an event a moment
// before it pushes the notice, and a gate opened in that moment lets the
// model's next call go without it.
func (e *env) waitNotice(r *Runner, tenant, session, id string) {
	e.t.Helper()
	testutil.Eventually(e.t, 10*time.Second, "event "+id+" to wait as a notice", func() bool {
		return e.noticePending(r, tenant, session, id)
	})
}

// noticePending reports whether event id waits as a notice in the live
// run of the session's actor on r.
func (e *env) noticePending(r *Runner, tenant, session, id string) bool {
	a := e.actor(r, tenant, session)
	if a == nil {
		return false
	}
	return a.holds(func(a *actor) bool {
		_, held := a.held[id]
		return held && a.run != nil && a.run.guide.IsPending(id)
	})
}

func waitGate(t *testing.T, g *gate) {
	t.Helper()
	g.waitEntered(t)
}

func TestGround_stop_ends_the_live_run_holds_events_and_lifting_it_resumes_them_in_order(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	model, p := fakeModel(t, llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: "wait_for_gate", Input: `{}`}}})
	model.SetFallback(llmtest.Reply{Text: "ok"})
	r := e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{g.tool()} })
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "work"})
	waitGate(t, g)

	control, err := e.js.KeyValue(context.Background(), bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := groundstop.Set(context.Background(), control, "", "", groundstop.Record{Reason: "drill", By: "admin", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the session to be stopped", func() bool {
		return e.session("t1", "s1").State == StateStopped
	})

	recs := e.records("t1", "s1")
	if countKind(recs, RecordRunEnded) != 1 || !strings.HasPrefix(recs[len(recs)-1].Reason, "aborted") {
		t.Fatalf("the live run did not stop: %+v", recs[len(recs)-1])
	}
	// A tool call is never left without its result.
	if calls := toolCalls(history(recs), ""); len(calls) != 1 || !calls[0].Finished {
		t.Fatalf("tool call without result after the stop: %+v", calls)
	}
	calls := model.RequestCount()
	during := []string{
		e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "first during the stop"}),
		e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "second during the stop"}),
	}
	testutil.Eventually(t, 10*time.Second, "both events to be held", func() bool {
		a := e.actor(r, "t1", "s1")
		if a == nil {
			return false
		}
		return a.holds(func(a *actor) bool { return len(a.queue) == 2 })
	})

	if model.RequestCount() != calls || countKind(e.records("t1", "s1"), RecordRunStarted) != 1 {
		t.Fatal("a run started during Ground Stop")
	}
	if err := groundstop.Clear(context.Background(), control, "", ""); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the held events to be delivered", func() bool {
		d := deliveries(e.records("t1", "s1"))
		return d[during[0]] == 1 && d[during[1]] == 1 && e.session("t1", "s1").State == StateIdle
	})

	var order []string
	for _, rec := range e.records("t1", "s1") {
		if rec.Message != nil {
			order = append(order, rec.Message.Delivers...)
		}
	}
	if got := strings.Join(order[1:], ","); got != strings.Join(during, ",") {
		t.Fatalf("delivered %v, want %v in that order, once each", order[1:], during)
	}
}

func TestA_steer_mid_tool_stops_the_run_and_starts_a_steered_one_with_the_note(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	model, p := fakeModel(t, llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: "wait_for_gate", Input: `{}`}}})
	model.SetFallback(llmtest.Reply{Text: "redirected"})
	e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{g.tool()} })
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "deploy to staging"})
	waitGate(t, g)
	steerID := e.publish(events.KindEvents, "t1", "s1", events.Steer{Note: "use production instead"})
	testutil.Eventually(t, 20*time.Second, "the steered run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 2
	})

	recs := e.records("t1", "s1")
	var causes []string
	for _, r := range recs {
		if r.Kind == RecordRunStarted {
			causes = append(causes, r.Cause)
		}
	}
	if strings.Join(causes, ",") != "dispatch,steered" {
		t.Fatalf("run causes = %v", causes)
	}
	if deliveries(recs)[steerID] != 1 {
		t.Fatal("the steer was not delivered exactly once")
	}
	last := string(model.Requests()[model.RequestCount()-1].Body)
	if !strings.Contains(last, "use production instead") || !strings.Contains(last, "deploy to staging") {
		t.Fatalf("the steered run's request lacks the note or the original input:\n%s", last)
	}
}

func TestA_steer_for_an_idle_session_starts_a_steered_run_over_the_last_one(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "ok"})
	e.startRunner("r1", p, nil)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "write the report"})
	testutil.Eventually(t, 20*time.Second, "the first run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})

	e.publish(events.KindEvents, "t1", "s1", events.Steer{Note: "make it shorter"})
	testutil.Eventually(t, 20*time.Second, "the steered run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 2
	})

	if rec := e.session("t1", "s1"); rec.Cause != "steered" {
		t.Fatalf("cause = %q, want steered", rec.Cause)
	}
	last := string(model.Requests()[1].Body)
	if !strings.Contains(last, "make it shorter") || !strings.Contains(last, "write the report") {
		t.Fatalf("steered request lacks the note or the last run's input:\n%s", last)
	}
}

func TestA_run_cap_refuses_clearly_and_records_the_refusal(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "ok"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := New(ctx, Config{NC: e.nc, ID: "r1", Provider: p, Rails: Rails{RunsPerHour: 1}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "one"})
	testutil.Eventually(t, 20*time.Second, "the first run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})

	second := e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "two"})
	testutil.Eventually(t, 20*time.Second, "the refusal", func() bool {
		return countKind(e.records("t1", "s1"), RecordRefused) == 1
	})

	for _, rec := range e.records("t1", "s1") {
		if rec.Kind == RecordRefused && (rec.Event != second || !strings.Contains(rec.Reason, "run cap")) {
			t.Fatalf("refusal = %+v", rec)
		}
	}
	if model.RequestCount() != 1 {
		t.Fatalf("model called %d times, want 1", model.RequestCount())
	}
}

func TestA_runner_that_lost_its_fence_stops_working_on_the_session(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	model, p := fakeModel(t, llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: "wait_for_gate", Input: `{}`}}})
	model.SetFallback(llmtest.Reply{Text: "must not be asked"})
	r := e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{g.tool()} })
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "work"})
	waitGate(t, g)
	// Another runner writes to the transcript: ours is now behind the fence.
	e.appendRecord("t1", "s1", Record{Kind: RecordRunStarted, Run: "r-other", Runner: "r2", Cause: "dispatch"})
	close(g.open)
	testutil.Eventually(t, 20*time.Second, "the runner to give the session up", func() bool {
		a := e.actor(r, "t1", "s1")
		if a == nil {
			return true
		}
		return a.holds(func(a *actor) bool { return a.run == nil && !a.loaded })
	})

	if model.RequestCount() != 1 {
		t.Fatalf("model called %d times after the fence moved, want 1", model.RequestCount())
	}
	for _, rec := range e.records("t1", "s1") {
		if rec.Runner == "r1" && rec.Message != nil && len(rec.Message.Content) > 0 && rec.Message.Content[0].Type == llm.BlockToolResult {
			t.Fatal("a record was written past the fence")
		}
	}
}

// ghostRun makes s1 look like a run of a runner that died mid-tool.
func ghostRun(e *env, policy *handover.RecoveryOverride, attempts int) {
	turn := llm.UserText("count the files")
	turn.ID = "m-1"
	call := llm.Message{ID: "m-2", Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockToolUse, ID: "tu9", Name: "shell", Input: json.RawMessage(`{"command":"ls | wc -l"}`)}}}
	e.appendRecord("t1", "s1", Record{Kind: RecordRunStarted, Run: "r-ghost", Runner: "ghost", Cause: "dispatch"})
	e.appendRecord("t1", "s1", Record{Kind: RecordMessage, Run: "r-ghost", Runner: "ghost", Message: &turn})
	e.appendRecord("t1", "s1", Record{Kind: RecordMessage, Run: "r-ghost", Runner: "ghost", Message: &call})
	e.putRecord(SessionRecord{Tenant: "t1", Session: "s1", State: StateRunning, Run: "r-ghost", Runner: "ghost",
		Incarnation: "gone", Since: time.Now().UTC(), Inputs: []string{"count the files"}, Runs: 1,
		Attempts: handover.Attempts{Restarts: attempts}, Policy: policy})
}

func TestA_dead_runner_s_run_is_recovered_with_a_handover_brief_of_its_progress(t *testing.T) {
	e := newEnv(t)
	ghostRun(e, nil, 0)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "recovered"})
	e.startRunner("r1", p, nil)
	testutil.Eventually(t, 20*time.Second, "the recovered run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})

	rec := e.session("t1", "s1")
	// A recovered run that completes resets the attempts: the limit bounds a
	// crash loop, not how often a session may ever be recovered.
	if rec.Cause != "recovered" || rec.Runs != 2 || rec.Attempts.Restarts != 0 {
		t.Fatalf("record = %+v", rec)
	}
	body := string(model.Requests()[0].Body)
	for _, want := range []string{"count the files", "shell", handover.UnfinishedCallResult[:20]} {
		if !strings.Contains(body, want) {
			t.Errorf("recovered request lacks %q:\n%s", want, body)
		}
	}
}

func TestA_crash_loop_is_bounded_by_attempts_and_told_to_the_person(t *testing.T) {
	e := newEnv(t)
	ghostRun(e, nil, 3)
	model, p := fakeModel(t)
	e.startRunner("r1", p, nil)
	testutil.Eventually(t, 20*time.Second, "the session to be interrupted", func() bool {
		return e.session("t1", "s1").State == StateInterrupted
	})

	if rec := e.session("t1", "s1"); !strings.Contains(rec.Reason, "not recovered") {
		t.Fatalf("reason = %q", rec.Reason)
	}
	if model.RequestCount() != 0 {
		t.Fatal("an exhausted crash loop was restarted")
	}
	// Told once it is stored, and the record says so.
	testutil.Eventually(t, 20*time.Second, "the refusal written told", func() bool {
		return e.session("t1", "s1").Untold == ""
	})
	// Under an id of the run's own, not a guessable one.
	got := e.refusals("t1", "s1")
	var ids []string
	for id, reasons := range got {
		ids = append(ids, id)
		if !strings.HasPrefix(id, "jetway.refused/r-ghost/") || len(id) == len("jetway.refused/r-ghost/") || len(reasons) != 1 || reasons[0] != e.session("t1", "s1").Reason {
			t.Errorf("JETWAY_OUT holds refusals %q under %s, want the recorded reason once under jetway.refused/r-ghost/<random>", reasons, id)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("JETWAY_OUT holds refusals under %q, want one id", ids)
	}
}

func TestA_session_with_policy_never_or_manual_is_not_recovered_until_a_person_sends_it_on(t *testing.T) {
	for _, pol := range []handover.RecoveryPolicy{handover.Never, handover.Manual} {
		t.Run(pol.String(), func(t *testing.T) {
			e := newEnv(t)
			ghostRun(e, &handover.RecoveryOverride{Policy: &pol}, 0)
			model, p := fakeModel(t)
			model.SetFallback(llmtest.Reply{Text: "going on"})
			e.startRunner("r1", p, nil)
			testutil.Eventually(t, 20*time.Second, "the session to be interrupted", func() bool {
				return e.session("t1", "s1").State == StateInterrupted
			})

			if model.RequestCount() != 0 {
				t.Fatal("recovered against the policy")
			}
			e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "go on please"})
			// The record goes idle after run_ended is in the transcript.
			testutil.Eventually(t, 20*time.Second, "the person's run to end", func() bool {
				return countKind(e.records("t1", "s1"), RecordRunEnded) == 1 && e.session("t1", "s1").State == StateIdle
			})

			if rec := e.session("t1", "s1"); rec.Cause != "steered" || rec.State != StateIdle {
				t.Fatalf("record = %+v", rec)
			}
		})
	}
}

func TestA_newer_notice_of_a_function_task_supersedes_an_undelivered_older_one(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	model, p := fakeModel(t, llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: "wait_for_gate", Input: `{}`}}})
	model.SetFallback(llmtest.Reply{Text: "ok"})
	r := e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{g.tool()} })
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "watch the deploy"})
	waitGate(t, g)
	older := e.publish(events.KindJobEvents, "t1", "s1", events.JobOverdue{ID: 4, Program: "watch", RunningForMS: 60_000, Tail: "progress 10%", TaskRef: events.TaskRef{Task: "4", Seq: 1}})
	newer := e.publish(events.KindJobEvents, "t1", "s1", events.JobOverdue{ID: 4, Program: "watch", RunningForMS: 120_000, Tail: "progress 80%", TaskRef: events.TaskRef{Task: "4", Seq: 2}})
	e.waitNotice(r, "t1", "s1", newer)
	close(g.open)
	testutil.Eventually(t, 20*time.Second, "the run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})

	recs := e.records("t1", "s1")
	d := deliveries(recs)
	if d[newer] != 1 || d[older] != 0 {
		t.Fatalf("deliveries: newer %d, older %d; want 1 and 0", d[newer], d[older])
	}
	body := string(model.Requests()[1].Body)
	if strings.Contains(body, "progress 10%") || !strings.Contains(body, "progress 80%") {
		t.Fatalf("the model read the superseded notice or missed the newer one:\n%s", body)
	}
	refused := false
	for _, rec := range recs {
		if rec.Kind == RecordRefused && rec.Event == older && strings.Contains(rec.Reason, "superseded") {
			refused = true
		}
	}
	if !refused {
		t.Fatal("the superseded notice is not recorded")
	}
}

func TestA_run_whose_foreground_task_is_alive_is_recovered_only_once_it_is_confirmed_gone(t *testing.T) {
	e := newEnv(t)
	ghostRun(e, nil, 0)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "recovered"})
	var mu sync.Mutex
	alive, asked, killed := true, 0, 0
	ctx, cancel := context.WithCancel(context.Background())
	r, err := New(ctx, Config{NC: e.nc, ID: "r1", Provider: p,
		ChildState: func(_ context.Context, s SessionRef) (handover.ChildState, error) {
			mu.Lock()
			defer mu.Unlock()
			asked++
			if s.Run != "r-ghost" {
				t.Errorf("asked about run %q, want the interrupted r-ghost", s.Run)
			}
			if alive {
				return handover.ChildAlive, nil
			}
			return handover.ChildGone, nil
		},
		KillRun: func(context.Context, SessionRef) error {
			mu.Lock()
			defer mu.Unlock()
			killed++
			alive = false
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testutil.Eventually(t, 20*time.Second, "the recovered run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})

	mu.Lock()
	defer mu.Unlock()
	if killed != 1 || asked < 2 {
		t.Fatalf("killed %d times, asked %d times; want a kill between two questions", killed, asked)
	}
	if rec := e.session("t1", "s1"); rec.Cause != "recovered" {
		t.Fatalf("cause = %q", rec.Cause)
	}
}

func TestA_run_whose_foreground_task_stays_alive_is_not_recovered(t *testing.T) {
	e := newEnv(t)
	ghostRun(e, nil, 0)
	model, p := fakeModel(t)
	ctx, cancel := context.WithCancel(context.Background())
	r, err := New(ctx, Config{NC: e.nc, ID: "r1", Provider: p,
		ChildState: func(context.Context, SessionRef) (handover.ChildState, error) { return handover.ChildAlive, nil },
		KillRun:    func(context.Context, SessionRef) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testutil.Eventually(t, 20*time.Second, "the session to be interrupted", func() bool {
		return e.session("t1", "s1").State == StateInterrupted
	})

	if rec := e.session("t1", "s1"); !strings.Contains(rec.Reason, "still running") {
		t.Fatalf("reason = %q", rec.Reason)
	}
	if model.RequestCount() != 0 {
		t.Fatal("recovered beside a live process")
	}
}

// railRunner runs one runner with rails until the test ends.
func railRunner(t *testing.T, e *env, p llm.Provider, rails Rails) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, err := New(ctx, Config{NC: e.nc, ID: "r1", Provider: p, Rails: rails})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// refusal returns the reason recorded for event id, or "".
func refusal(recs []Record, id string) string {
	for _, r := range recs {
		if r.Kind == RecordRefused && r.Event == id {
			return r.Reason
		}
	}
	return ""
}

func TestA_session_out_of_fuel_is_refused_clearly(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "ok", Usage: llm.Usage{InputTokens: 60, OutputTokens: 50}})
	railRunner(t, e, p, Rails{Fuel: 100})
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "one"})
	testutil.Eventually(t, 20*time.Second, "the first run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})

	second := e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "two"})
	testutil.Eventually(t, 20*time.Second, "the refusal", func() bool { return refusal(e.records("t1", "s1"), second) != "" })
	if got := refusal(e.records("t1", "s1"), second); !strings.Contains(got, "out of fuel: the session has used 110 of its 100 tokens") {
		t.Fatalf("refusal = %q", got)
	}
	if model.RequestCount() != 1 {
		t.Fatalf("model called %d times, want 1", model.RequestCount())
	}
}

func TestThe_global_run_reserve_is_shared_by_every_session(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "ok"})
	railRunner(t, e, p, Rails{GlobalRunsPerHour: 1})
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "one"})
	testutil.Eventually(t, 20*time.Second, "the first run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})

	other := e.publish(events.KindEvents, "t1", "s2", events.Input{Text: "another session"})
	testutil.Eventually(t, 20*time.Second, "the refusal", func() bool { return refusal(e.records("t1", "s2"), other) != "" })
	if got := refusal(e.records("t1", "s2"), other); !strings.Contains(got, "global run reserve spent") {
		t.Fatalf("refusal = %q", got)
	}
	if model.RequestCount() != 1 {
		t.Fatalf("model called %d times, want 1", model.RequestCount())
	}
}

func TestA_tenants_ground_stop_stops_its_own_runs_and_other_tenants_keep_running(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	model, p := fakeModel(t, llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: "wait_for_gate", Input: `{}`}}})
	model.SetFallback(llmtest.Reply{Text: "ok"})
	e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{g.tool()} })
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "work"})
	waitGate(t, g)

	control, err := e.js.KeyValue(context.Background(), bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := groundstop.Set(context.Background(), control, "t1", "", groundstop.Record{Reason: "t1 bill", By: "t1"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "t1's session to be stopped", func() bool {
		return e.session("t1", "s1").State == StateStopped
	})

	id := e.publish(events.KindEvents, "t2", "s1", events.Input{Text: "another tenant's work"})
	testutil.Eventually(t, 20*time.Second, "t2's input to be delivered and its run to end", func() bool {
		return deliveries(e.records("t2", "s1"))[id] == 1 && e.session("t2", "s1").State == StateIdle
	})

	if countKind(e.records("t1", "s1"), RecordRunStarted) != 1 {
		t.Fatal("a run of the stopped tenant started again")
	}
}

// An event that waits for a person (its session interrupted) and comes
// again — redelivered, or sent twice under one CE id — waits once: the
// person's run hands it to the model once.
func TestA_waiting_event_that_comes_again_reaches_the_model_once(t *testing.T) {
	e := newEnv(t)
	never := handover.Never
	ghostRun(e, &handover.RecoveryOverride{Policy: &never}, 0)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "going on"})
	r := e.startRunner("r1", p, nil)
	testutil.Eventually(t, 20*time.Second, "the session to be interrupted", func() bool {
		return e.session("t1", "s1").State == StateInterrupted
	})

	ev, err := events.New("t1", "s1", "ci", events.External{Type: "com.example.ci.finished", Source: "ci", Data: []byte(`{"ok":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := events.EventsSubject("t1", "s1")
	var second uint64
	for range 2 {
		msg, err := events.Encode(context.Background(), subj, ev)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := e.js.PublishMsg(context.Background(), msg)
		if err != nil {
			t.Fatal(err)
		}
		second = ack.Sequence
	}
	testutil.Eventually(t, 20*time.Second, "the second copy to wait with the first", func() bool {
		a := e.actor(r, "t1", "s1")
		return a != nil && a.holds(func(a *actor) bool {
			return slices.ContainsFunc(a.parked, func(in input) bool { return seqOf(in.msg) == second })
		})
	})

	line := e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "go on please"})
	testutil.Eventually(t, 20*time.Second, "the person's run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1 && e.session("t1", "s1").State == StateIdle
	})
	d := deliveries(e.records("t1", "s1"))
	if d[ev.ID()] != 1 || d[line] != 1 {
		t.Fatalf("deliveries: waiting event %d, person's line %d; want 1 and 1", d[ev.ID()], d[line])
	}
}
