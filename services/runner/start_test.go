package runner

import (
	"context"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/events"
	"jetway/pkg/handover"
	"jetway/pkg/llm/llmtest"
)

// What a plan does to a session is decided from the record alone; every
// outcome a start can take is here, including the two that send a start
// back to decide (a refused recovery leaves the session interrupted).
func TestA_run_start_decides_from_the_record_and_the_event(t *testing.T) {
	typed := plan{ins: []input{{id: "e1", text: "hi", person: true}}}
	notice := plan{ins: []input{{id: "e2", text: "[background job notice] …"}}}
	steer := plan{ins: []input{{id: "e3", inBrief: true}}, steer: &steerReq{note: "stop"}}
	resume := plan{ins: []input{{id: "e4", inBrief: true}}, resume: &events.Resume{}}
	recovery := plan{}
	idle := SessionRecord{State: StateIdle}
	running := SessionRecord{State: StateRunning, Runner: "other"}
	interrupted := SessionRecord{State: StateInterrupted}
	stopped := SessionRecord{State: StateStopped}
	for _, c := range []struct {
		name string
		p    plan
		rec  SessionRecord
		st   liveness
		want act
	}{
		{"typed input, idle", typed, idle, alive, actDispatch},
		{"a notice, idle", notice, idle, alive, actDispatch},
		{"after a Ground Stop ended the last run", notice, stopped, alive, actDispatch},
		{"a steer, idle", steer, idle, alive, actSteer},
		{"a layover fired, idle", resume, idle, alive, actResume},
		{"another runner's run is live", typed, running, alive, actWaitOther},
		{"a sweep's recovery while that run is live", recovery, running, alive, actWaitOther},
		{"its runner is gone", typed, running, gone, actRecover},
		{"its runner restarted", recovery, running, restarted, actRecover},
		{"it died in this process", notice, running, selfCrashed, actRecover},
		{"a recovery someone else made", recovery, idle, alive, actNothing},
		{"a recovery of a session already interrupted", recovery, interrupted, alive, actNothing},
		{"a notice for an interrupted session", notice, interrupted, alive, actPark},
		{"a layover for an interrupted session", resume, interrupted, alive, actPark},
		{"a person's line sends interrupted work on", typed, interrupted, alive, actSteer},
		{"a steer sends interrupted work on", steer, interrupted, alive, actSteer},
	} {
		if got := decide(c.p, c.rec, c.st); got != c.want {
			t.Errorf("%s: decided %d, want %d", c.name, got, c.want)
		}
	}
}

// An actor's copy of its session record spares an idle session's next run
// a read; when someone else changed the record meanwhile (here an
// operator's recovery policy), the claim on the copy is refused and the
// start is decided again on a fresh read: the run starts, and the change is
// kept, not written over.
func TestA_claim_refused_on_a_stale_copy_of_the_record_starts_the_run_on_a_fresh_read(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "ok"})
	r := e.startRunner("r1", p, nil)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "first"})
	testutil.Eventually(t, 20*time.Second, "the first run to end and the session to go idle", func() bool {
		rec := e.session("t1", "s1")
		return rec.State == StateIdle && rec.Runs == 1
	})

	a := e.actor(r, "t1", "s1")
	testutil.Eventually(t, 10*time.Second, "the actor to keep its copy of the record", func() bool {
		a.record.mu.Lock()
		defer a.record.mu.Unlock()
		return a.record.ok && a.record.rec.State == StateIdle
	})

	// An operator sets the session's recovery policy, by compare-and-swap.
	kv, err := e.js.KeyValue(context.Background(), bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	recs := records{kv: kv}
	rec, rev, err := recs.get(context.Background(), "t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	never := handover.Never
	rec.Policy = &handover.RecoveryOverride{Policy: &never}
	if _, err := recs.put(context.Background(), rec, rev); err != nil {
		t.Fatal(err)
	}

	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "second"})
	testutil.Eventually(t, 20*time.Second, "the second run to end", func() bool {
		rec := e.session("t1", "s1")
		return rec.State == StateIdle && rec.Runs == 2
	})

	got := e.session("t1", "s1")
	if got.Policy == nil || got.Policy.Policy == nil || *got.Policy.Policy != handover.Never {
		t.Fatalf("the operator's policy was written over by the claim: record %+v", got)
	}
	if n := countKind(e.records("t1", "s1"), RecordRunStarted); n != 2 {
		t.Fatalf("%d runs recorded, want 2", n)
	}
}
