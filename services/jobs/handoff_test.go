package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"jetway/pkg/bus"
	"jetway/pkg/control/sessionrec"
	"jetway/pkg/events"
	"jetway/pkg/handover"
	"jetway/pkg/tasks"
	"jetway/services/jobs/jobsapi"

	"github.com/nats-io/nats.go/micro"
)

// liveRun makes run the session's live run in its record, as a runner's
// claim does, and returns a function that moves the session to another.
func liveRun(t *testing.T, e *env, run string) func(next string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	kv, err := bus.OpenBucket(ctx, e.js, bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := sessionrec.Put(ctx, kv, sessionrec.Record{Tenant: tenant, Session: session, State: sessionrec.StateRunning, Run: run, Runner: "r1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return func(next string) {
		t.Helper()
		rev, err = sessionrec.Put(bg, kv, sessionrec.Record{Tenant: tenant, Session: session, State: sessionrec.StateRunning, Run: next, Runner: "r2"}, rev)
		if err != nil {
			t.Fatal(err)
		}
	}
}

func fencedRun(run, command string) jobsapi.StartRequest {
	r := req(command)
	r.Run, r.Fence, r.TimeoutMS = run, run, 600_000
	return r
}

// runInterrupted starts a run call with RunUntil, waits for its command's
// first output line, interrupts the call, and returns its answer.
func (e *env) runInterrupted(r jobsapi.StartRequest, handOff func(error) bool) (jobsapi.StartResponse, error) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	type answer struct {
		res jobsapi.StartResponse
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := e.cli.RunUntil(ctx, r, handOff)
		done <- answer{res, err}
	}()
	e.outputPids("1", 1)
	cancel()
	select {
	case a := <-done:
		return a.res, a.err
	case <-time.After(30 * time.Second):
		e.t.Fatal("the interrupted run call did not return")
	}
	return jobsapi.StartResponse{}, nil
}

func always(error) bool { return true }

// A foreground command whose run stopped waiting (a steer, the run's end)
// is handed to the background: the call answers at once with its job, and
// its exit is an ordinary job notice — not an answer held back for a
// caller that is gone.
func TestA_handed_off_foreground_command_s_exit_is_an_ordinary_job_notice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	liveRun(t, e, "r1")
	sub := e.subscribe(tenant, session)
	res, err := e.runInterrupted(fencedRun("r1", "echo pid $$; while [ ! -e gate ]; do sleep 0.01; done; echo finished"), always)
	if err != nil || !res.HandedOff || !res.Backgrounded || res.Ended || res.Job.ID != "1" || res.Job.Status != tasks.Running {
		t.Fatalf("interrupted run = %+v, %v; want job 1 handed to the background", res, err)
	}
	if st, err := e.cli.ChildState(bg, tenant, session, "r1"); err != nil || st != handover.ChildGone {
		t.Errorf("child state after the hand-off = %v, %v", st, err)
	}
	if _, err := e.cli.Start(bg, fencedRun("r1", "touch gate")); err != nil {
		t.Fatal(err)
	}
	for {
		ev, _ := sub.next()
		x, ok := ev.Payload.(events.JobExited)
		if !ok || x.ID != 1 {
			continue
		}
		if got := headline(t, ev); !strings.HasPrefix(got, "job 1 (echo) exited 0") || !strings.HasSuffix(x.Tail, "finished") {
			t.Errorf("notice of job 1: %q, tail %q", got, x.Tail)
		}
		return
	}
}

// A run that is no longer the session's live run hands nothing off: its
// command stays in the foreground, where the recovering runner finds it
// alive and kills it. And a run call that arrives after its run's hand-off
// does not start its command.
func TestA_stale_run_hands_nothing_off_and_a_handed_off_run_starts_nothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	moveTo := liveRun(t, e, "r1")
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		_, err := e.cli.RunUntil(ctx, fencedRun("r1", "echo pid $$; sleep 100"), always)
		done <- err
	}()
	e.outputPids("1", 1)
	moveTo("r2")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, jobsapi.ErrConflict) {
		t.Fatalf("stale run's hand-off: %v, want cancelled and refused", err)
	}
	if st, err := e.cli.ChildState(bg, tenant, session, "r1"); err != nil || st != handover.ChildAlive {
		t.Errorf("child state of the stale run = %v, %v; want its command still in the foreground", st, err)
	}

	// r2 is handed off with nothing in flight; its late command is refused.
	var ho jobsapi.HandOffResponse
	if err := e.request("w1", jobsapi.OpHandOff, jobsapi.HandOffRequest{
		SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session, Fence: "r2"}, Run: "r2"}, &ho); err != nil || len(ho.Jobs) != 0 {
		t.Fatalf("hand-off of r2: %+v, %v", ho, err)
	}
	_, err := e.cli.Run(bg, fencedRun("r2", "touch late"))
	if !errors.Is(err, jobsapi.ErrConflict) || !strings.Contains(err.Error(), "interrupted before this command started") {
		t.Fatalf("run call after its run's hand-off: %v", err)
	}
	if jobs, err := e.cli.List(bg, tenant, session); err != nil || len(jobs) != 1 {
		t.Errorf("jobs = %d (%v), want only r1's", len(jobs), err)
	}
}

// request sends one raw request to a worker's op and decodes the answer.
func (e *env) request(worker, op string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	msg, err := e.nc.Request(jobsapi.Subject(worker, op), body, 10*time.Second)
	if err != nil {
		return err
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return fmt.Errorf("%s: %s %s", op, code, msg.Header.Get(micro.ErrorHeader))
	}
	return json.Unmarshal(msg.Data, out)
}
