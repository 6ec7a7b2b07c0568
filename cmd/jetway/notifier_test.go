package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/events"
)

func TestNotifier_command_publishes_the_headline_of_a_job_exit(t *testing.T) {
	srv := bustest.StartServerWith(t, 2)
	_, js := bustest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	root := newRootCmd()
	var out testutil.LockedBuffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"notifier", "--nats", srv.ClientURL(), "--log-level", "error"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("notifier: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("notifier did not stop")
		}
	})

	// The consumers exist once the notifier says it runs.
	for !strings.Contains(out.String(), "notifier running") {
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("notifier ended: %v\n%s", err, out.String())
		case <-ctx.Done():
			t.Fatalf("notifier never ran:\n%s", out.String())
		case <-time.After(10 * time.Millisecond): // re-read its output
		}
	}

	e, err := events.New("default", "s1", "test/jobs", events.JobExited{ID: 3, Program: "gh", RunningForMS: 1265000})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := events.JobEventsSubject("default", "s1")
	m, err := events.Encode(ctx, subj, e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	notify, _ := events.NotifySubject("default", "s1")
	cons, err := js.OrderedConsumer(ctx, bus.StreamOut, jetstream.OrderedConsumerConfig{FilterSubjects: []string{notify}})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(15 * time.Second))
	if err != nil {
		t.Fatalf("no headline: %v\n%s", err, out.String())
	}
	var hn events.HeadlineNote
	if err := json.Unmarshal(msg.Data(), &hn); err != nil || hn.Text != "job 3 (gh) exited 0 after 21m" {
		t.Fatalf("headline = %+v (%v)", hn, err)
	}
}
