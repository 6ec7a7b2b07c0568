package runner

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/handover"
	"jetway/pkg/llm/llmtest"
)

// unreachableWorker is ChildState of a jobs worker cut off from NATS until
// reachable is set, and whose answer is then "gone"; asked counts the
// questions.
func unreachableWorker(reachable *atomic.Bool, asked *atomic.Int64) func(context.Context, SessionRef) (handover.ChildState, error) {
	return func(ctx context.Context, s SessionRef) (handover.ChildState, error) {
		asked.Add(1)
		if !reachable.Load() {
			return handover.ChildUnknown, fmt.Errorf("jobs client: child_state on worker w1: %w", context.DeadlineExceeded)
		}
		return handover.ChildGone, nil
	}
}

// A recovery whose jobs worker cannot be asked whether the interrupted
// run's commands are gone waits for it — the session record saying so,
// for the session detail — and goes on once the worker answers: a slow
// link is no reason to leave the session interrupted for a person.
func TestA_recovery_waits_for_an_unreachable_jobs_worker_and_goes_on_when_it_answers(t *testing.T) {
	e := newEnv(t)
	ghostRun(e, nil, 0)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "recovered"})
	var reachable atomic.Bool
	var asked atomic.Int64
	e.run(Config{ID: "r1", Provider: p, IdleEvict: time.Minute, ChildState: unreachableWorker(&reachable, &asked)})

	testutil.Eventually(t, 20*time.Second, "the session record to say the recovery waits for the jobs worker", func() bool {
		rec := e.session("t1", "s1")
		return rec.State == StateRunning && rec.WorkerWait != nil && strings.Contains(rec.Reason, "waits for the session's jobs worker") && asked.Load() >= 2
	})
	if n := model.RequestCount(); n != 0 {
		t.Fatalf("the model was called %d times before the worker answered", n)
	}

	reachable.Store(true)
	testutil.Eventually(t, 20*time.Second, "the recovered run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})
	if rec := e.session("t1", "s1"); rec.Cause != "recovered" || rec.State != StateIdle || rec.WorkerWait != nil {
		t.Fatalf("record after the recovery: state %s, cause %s, waited since %v, reason %q", rec.State, rec.Cause, rec.WorkerWait, rec.Reason)
	}
}

// The wait is bounded: a worker silent past RecoveryWait refuses the
// recovery as an unknown answer did, and the reason says how long it was
// waited for.
func TestA_recovery_whose_jobs_worker_stays_silent_past_the_bound_is_refused_and_says_so(t *testing.T) {
	e := newEnv(t)
	ghostRun(e, nil, 0)
	model, p := fakeModel(t)
	var reachable atomic.Bool
	var asked atomic.Int64
	e.run(Config{ID: "r1", Provider: p, IdleEvict: time.Minute, RecoveryWait: time.Second, ChildState: unreachableWorker(&reachable, &asked)})

	testutil.Eventually(t, 20*time.Second, "the session to be interrupted", func() bool {
		return e.session("t1", "s1").State == StateInterrupted
	})
	rec := e.session("t1", "s1")
	if !strings.Contains(rec.Reason, "its jobs worker did not answer for") || rec.WorkerWait != nil {
		t.Fatalf("reason %q, waited since %v", rec.Reason, rec.WorkerWait)
	}
	if model.RequestCount() != 0 {
		t.Fatal("recovered without an answer from the worker")
	}
}
