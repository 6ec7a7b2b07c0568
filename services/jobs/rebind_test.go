package jobs_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/events"
	"jetway/services/jobs"
	"jetway/services/jobs/client"
)

func TestA_session_bound_to_a_stopped_worker_is_rebound_to_a_live_one_with_a_headline(t *testing.T) {
	e := newEnv(t)
	w1, err := jobs.New(jobs.Config{NC: e.nc, WorkerID: "w1", Root: e.root, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stopW1 := e.run(w1)
	t.Cleanup(stopW1)
	e.start("echo first")
	if w, err := e.cli.Binding(bg, tenant, session); err != nil || w != "w1" {
		t.Fatalf("binding = %q, %v; want w1", w, err)
	}
	stopW1()
	e.startWorker("w2")
	// This client moves a session once its worker has been away a moment;
	// the default waits long enough for a restart to come back.
	cli, err := client.New(client.Config{NC: e.nc, RebindAfter: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	out, err := events.OutSubject(tenant, session)
	if err != nil {
		t.Fatal(err)
	}
	headlines := make(chan *nats.Msg, 4)
	sub, err := e.nc.ChanSubscribe(out, headlines)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// The first call that finds w1 gone fails and the session stays; once
	// w1 has been away longer than RebindAfter, the call is made on w2.
	if _, err := cli.Start(bg, req("echo second")); err == nil {
		t.Fatal("a call started a job at once although the session's worker is gone")
	}
	if w, err := cli.Binding(bg, tenant, session); err != nil || w != "w1" {
		t.Fatalf("binding after the first failed call = %q, %v; want still w1", w, err)
	}
	testutil.EventuallyNil(t, 15*time.Second, "a job started after the rebind", func() error {
		_, err := cli.Start(bg, req("echo second"))
		return err
	})
	if w, err := cli.Binding(bg, tenant, session); err != nil || w != "w2" {
		t.Fatalf("binding after the rebind = %q, %v; want w2", w, err)
	}
	select {
	case m := <-headlines:
		if typ := m.Header.Get(events.HeaderPrefix + "type"); typ != events.TypeHeadline {
			t.Fatalf("message on %s is a %q, want a headline", m.Subject, typ)
		}
		var h events.HeadlineNote
		if err := json.Unmarshal(m.Data, &h); err != nil {
			t.Fatal(err)
		}
		if want := events.JobsReboundHeadline("w1", "w2"); h.Text != want || h.About != events.TypeJobsRebound {
			t.Errorf("headline %+v, want %q about %s", h, want, events.TypeJobsRebound)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no rebind headline")
	}
}

func TestA_worker_that_restarts_keeps_its_sessions(t *testing.T) {
	e := newEnv(t)
	w1, err := jobs.New(jobs.Config{NC: e.nc, WorkerID: "w1", Root: e.root, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stopW1 := e.run(w1)
	e.start("echo first")
	stopW1()
	e.startWorker("w2")
	// Within the default RebindAfter a gone worker is a restart, not a
	// death: the call fails, and the session's files stay where they are.
	if _, err := e.cli.Start(bg, req("echo during the restart")); err == nil {
		t.Fatal("a call succeeded while the session's worker was down")
	}
	if w, err := e.cli.Binding(bg, tenant, session); err != nil || w != "w1" {
		t.Fatalf("binding while w1 restarts = %q, %v; want w1", w, err)
	}
	e.startWorker("w1")
	if j := e.start("echo after"); j.ID == "" {
		t.Fatal("no job after w1 came back")
	}
}

func TestJobs_running_on_a_worker_whose_session_moved_end_as_lost_when_it_returns(t *testing.T) {
	// A worker dies with a job running; its session is rebound elsewhere
	// while it is away. When it comes back, the job it ran must still end
	// (lost), not stay "running" in the jobs table for ever.
	e := newEnv(t)
	child := e.childWorker("wd")
	sub := e.subscribe(tenant, session)
	j := e.start("sleep 100")
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	kv, err := e.js.KeyValue(bg, bus.BucketWorkers)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(bg, tenant+"."+session, []byte("elsewhere")); err != nil {
		t.Fatal(err)
	}

	e.startWorker("wd")
	ev, _ := sub.next()
	x, ok := ev.Payload.(events.JobExited)
	if !ok || x.Status != events.StatusLost || j.ID != "1" || x.ID != 1 {
		t.Fatalf("event %s: %+v (job %+v), want job 1 lost", ev.Type, ev.Payload, j)
	}
}

// A client that cached a session's worker — the dispatcher listing jobs,
// another runner — follows a rebind another client made while that worker
// was away: its next call goes to the worker the binding names now, and
// the list it shows is that worker's, also once the old worker is back.
func TestA_client_with_a_cached_binding_follows_a_rebind_made_by_another(t *testing.T) {
	e := newEnv(t)
	w1, err := jobs.New(jobs.Config{NC: e.nc, WorkerID: "w1", Root: e.root, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stopW1 := e.run(w1)
	t.Cleanup(stopW1)
	e.start("echo first")
	if w, err := e.cli.Binding(bg, tenant, session); err != nil || w != "w1" {
		t.Fatalf("binding = %q, %v; want w1 cached", w, err)
	}
	stopW1()
	e.startWorker("w2")
	mover, err := client.New(client.Config{NC: e.nc, RebindAfter: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, 15*time.Second, "the session rebound to w2 by another client", func() error {
		_, err := mover.Start(bg, req("echo on w2"))
		return err
	})
	// e.cli still caches w1, gone, and its RebindAfter is the default:
	// only the binding's new owner can serve its call at once.
	if j, err := e.cli.Start(bg, req("echo cached")); err != nil || j.Job.ID != "2" {
		t.Fatalf("start through the stale cache = %+v, %v; want job 2 on w2", j, err)
	}
	// w1 comes back without the session; a list shows w2's jobs.
	e.startWorker("w1")
	if jobs, err := e.cli.List(bg, tenant, session); err != nil || len(jobs) != 2 {
		t.Fatalf("list after w1's return = %d jobs (%v), want w2's 2", len(jobs), err)
	}
}
