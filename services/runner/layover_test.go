package runner

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/events"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/llmtest"
)

// TestA_layover_resumes_as_a_resumed_run_even_across_a_server_restart sets the
// work down for two seconds, restarts the (only) NATS server before the
// resume is due, and expects a Resumed run told what it was waiting for.
func TestA_layover_resumes_as_a_resumed_run_even_across_a_server_restart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := bus.EmbeddedConfig{StoreDir: t.TempDir(), Host: "127.0.0.1", Port: port, Partitions: 2}
	srv, err := bus.StartEmbedded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.StopEmbedded(srv) })
	nc, js := bustest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: 2, WorkAckWait: 2 * time.Second, WorkPinnedTTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, nc: nc, js: js}
	model := llmtest.NewAnthropic(t, llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: LayoverToolName, Input: `{"waiting_for":"CI to finish","check_after":"2s"}`}}})
	model.SetFallback(llmtest.Reply{Text: "CI is green"})
	p, err := anthropic.New(anthropic.Config{APIKey: "k", BaseURL: model.URL(), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	r, err := New(runCtx, Config{NC: nc, ID: "r1", Provider: p, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "merge when CI passes"})
	testutil.Eventually(t, 20*time.Second, "the layover to be booked", func() bool {
		ls, err := r.Layovers(context.Background(), "t1")
		return err == nil && len(ls) == 1
	})

	ls, _ := r.Layovers(context.Background(), "t1")
	if ls[0].WaitingFor != "CI to finish" || ls[0].Session != "s1" {
		t.Fatalf("layover = %+v", ls[0])
	}
	if time.Until(ls[0].At) > 0 {
		bus.StopEmbedded(srv)
		if srv, err = bus.StartEmbedded(cfg); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Log("the layover was due before the restart could happen; restart skipped")
	}
	testutil.Eventually(t, 30*time.Second, "the resumed run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 2
	})

	rec := e.session("t1", "s1")
	if rec.Cause != "resumed" {
		t.Fatalf("second run cause = %q, want resumed", rec.Cause)
	}
	body := string(model.Requests()[model.RequestCount()-1].Body)
	if !strings.Contains(body, "CI to finish") || !strings.Contains(body, "merge when CI passes") {
		t.Fatalf("resumed request lacks what it waited for or the original input:\n%s", body)
	}
	if ls, _ := r.Layovers(context.Background(), "t1"); len(ls) != 0 {
		t.Fatalf("layover still listed after it fired: %+v", ls)
	}
}

func TestA_cancelled_layover_never_fires(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t, llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: LayoverToolName, Input: `{"waiting_for":"a review","check_after":"2s"}`}}})
	r := e.startRunner("r1", p, nil)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "ship it after review"})
	testutil.Eventually(t, 20*time.Second, "the layover to be booked", func() bool {
		ls, err := r.Layovers(context.Background(), "t1")
		return err == nil && len(ls) == 1
	})

	ls, _ := r.Layovers(context.Background(), "t1")
	if err := r.CancelLayover(context.Background(), "t1", "s1"); err != nil {
		t.Fatal(err)
	}
	// Wait past the due time, then prove nothing fired: the schedule's
	// subject is empty and a marker event is handled after it.
	testutil.Eventually(t, 10*time.Second, "the due time to pass", func() bool { return time.Now().After(ls[0].At.Add(time.Second)) })
	marker := e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "marker"})
	model.SetFallback(llmtest.Reply{Text: "ok"})
	testutil.Eventually(t, 20*time.Second, "the marker's run", func() bool {
		return deliveries(e.records("t1", "s1"))[marker] == 1 && countKind(e.records("t1", "s1"), RecordRunEnded) == 2
	})

	for _, rec := range e.records("t1", "s1") {
		if rec.Kind == RecordRunStarted && rec.Cause == "resumed" {
			t.Fatal("a cancelled layover fired")
		}
	}
}
