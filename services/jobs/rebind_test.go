package jobs_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"jetway/pkg/events"
	"jetway/services/jobs"
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

	// The call that finds w1 gone is made on w2.
	job := e.start("echo second")
	if job.ID == "" {
		t.Fatal("no job started after the rebind")
	}
	if w, err := e.cli.Binding(bg, tenant, session); err != nil || w != "w2" {
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
