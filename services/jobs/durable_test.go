package jobs_test

import (
	"testing"

	"jetway/pkg/events"
)

func TestJob_answered_just_before_the_worker_dies_is_reported_lost(t *testing.T) {
	// Start answers once the job's record is on the worker's connection
	// ahead of the answer, not once it is acknowledged: a worker killed the
	// moment the caller has the id must still leave the record behind.
	t.Parallel()
	e := newEnv(t)
	child := e.childWorker("wd")
	sub := e.subscribe(tenant, session)
	j := e.start("sleep 100")
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	e.startWorker("wd")
	ev, _ := sub.next()
	x, ok := ev.Payload.(events.JobExited)
	if !ok || x.Status != events.StatusLost || x.ID != 1 || j.ID != "1" {
		t.Fatalf("event %s: %+v (job %+v), want job 1 lost", ev.Type, ev.Payload, j)
	}
}
