package runner

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
)

// A runner whose heartbeats stop going out — its link to NATS cut, here
// the partition group's fault — stops its in-flight model call when its
// lease lapses, before the other runner may recover the session: the
// session is never at the model twice at once, and the cut-off runner
// starts nothing more.
func TestA_runner_whose_lease_lapses_cancels_its_model_call_before_the_session_is_recovered(t *testing.T) {
	e := newEnv(t)
	// The first call hangs mid-stream until its client leaves; the
	// recovered run's call answers.
	model, p := fakeModel(t, llmtest.Reply{Text: "never finished", StallAfter: 2}, llmtest.Reply{Text: "recovered"})
	r1 := e.startRunner("r1", p, nil)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "hi"})
	testutil.Eventually(t, 20*time.Second, "r1's run to be at the model", func() bool { return model.InFlight() == 1 })
	e.startRunner("r2", p, nil)

	r1.group.FailBeats(errors.New("blackholed"))
	testutil.Eventually(t, 30*time.Second, "r2 to recover the session and its run to end", func() bool {
		rec := e.session("t1", "s1")
		return rec.Runner == "r2" && rec.Cause == "recovered" && rec.State == StateIdle
	})
	if peak := model.PeakInFlight(); peak != 1 {
		t.Fatalf("%d calls of the session at the model at once, want 1: r1's call outlived its lease", peak)
	}
	if n := model.RequestCount(); n != 2 {
		t.Fatalf("model called %d times, want 2 (r1's cancelled call, r2's recovery)", n)
	}
	if r1.group.LeaseHeld() {
		t.Fatal("r1 holds a lease though no beat of it went out")
	}
	if n := r1.live.count(); n != 0 {
		t.Fatalf("r1 still drives %d runs", n)
	}
}

// A runner frozen mid-model-call (SIGSTOP) cannot cancel anything: its
// session is recovered once by another runner when its lease is out. When
// it resumes (SIGCONT) its own clock shows the lease out before anything
// else can act: its call ends, and it makes no further model call and
// writes nothing for the session.
func TestA_runner_frozen_mid_model_call_starts_nothing_when_it_resumes(t *testing.T) {
	if testing.Short() {
		t.Skip("runner processes")
	}
	url, js := procBus(t, 2)
	// The frozen runner's call hangs mid-stream; the recovery's answers.
	model := llmtest.NewAnthropic(t, llmtest.Reply{Text: "never finished", StallAfter: 2})
	model.SetFallback(llmtest.Reply{Text: "recovered"})
	e := &env{t: t, js: js}
	ra := startRunnerProc(t, "ra", url, model.URL())
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "hi"})
	testutil.Eventually(t, 30*time.Second, "ra's run to be at the model", func() bool {
		return model.InFlight() == 1 && e.session("t1", "s1").Runner == "ra"
	})
	startRunnerProc(t, "rb", url, model.URL())

	ra.signal(t, syscall.SIGSTOP)
	t.Cleanup(func() { _ = ra.cmd.Process.Signal(syscall.SIGCONT) }) // before its stop
	testutil.Eventually(t, 30*time.Second, "rb to recover the session and its run to end", func() bool {
		rec := e.session("t1", "s1")
		return rec.Runner == "rb" && rec.Cause == "recovered" && rec.State == StateIdle
	})
	if n := model.RequestCount(); n != 2 {
		t.Fatalf("model called %d times, want 2: the frozen call and the recovery's", n)
	}
	recorded := len(e.records("t1", "s1"))

	ra.signal(t, syscall.SIGCONT)
	testutil.Eventually(t, 20*time.Second, "ra to stop its run on the lapse of its lease", func() bool {
		return model.InFlight() == 0 && ra.logged("lease lapsed: live runs stopped")
	})
	if n := model.RequestCount(); n != 2 {
		t.Fatalf("model called %d times after ra resumed, want still 2", n)
	}
	recs := e.records("t1", "s1")
	for _, r := range recs[recorded:] {
		t.Errorf("written after ra resumed: %+v", r)
	}
	if rec := e.session("t1", "s1"); rec.Runner != "rb" || rec.State != StateIdle || rec.Runs != 2 {
		t.Fatalf("session record after ra resumed: %+v", rec)
	}
}
