package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
)

// A runner that dies holding every pending event of its partition (its run
// in progress, a notice for it) leaves the server nothing to deliver, so the
// pin lapses without moving. The events must come back to the next runner
// once the dead one's pin and heartbeat have lapsed, not when their AckWait
// (here a minute) runs out.
func TestEvents_a_dead_runner_held_reach_the_next_runner_before_their_ack_wait(t *testing.T) {
	srv := bustest.StartServer(t)
	nc, js := bustest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: 1, WorkAckWait: time.Minute, WorkPinnedTTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, nc: nc, js: js}

	// The runner that dies: its own connection, a model call that hangs.
	ncA, _ := bustest.Connect(t, srv.ClientURL())
	modelA, pA := fakeModel(t)
	modelA.SetFallback(llmtest.Reply{Text: "never", Latency: time.Minute})
	actx, stopA := context.WithCancel(context.Background())
	a, err := New(actx, Config{NC: ncA, ID: "dying", Provider: pA, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	doneA := make(chan error, 1)
	go func() { doneA <- a.Run(actx) }()
	t.Cleanup(func() {
		stopA()
		select {
		case <-doneA:
		case <-time.After(15 * time.Second):
			t.Error("the dead runner's goroutines did not stop within 15s")
		}
	})

	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "first"})
	waitFor(t, "the dying runner's model call", 20*time.Second, func() bool { return len(modelA.Requests()) == 1 })
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "second, while busy"})
	cons, err := js.Consumer(ctx, bus.StreamWork, bus.WorkConsumerName(0))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the notice to be out to the dying runner, un-acked, with nothing left to deliver", 20*time.Second, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 1 && info.NumPending == 0
	})
	ncA.Close() // SIGKILL, as far as NATS can tell: no more acks, heartbeats or pulls

	modelB, pB := fakeModel(t)
	modelB.SetFallback(llmtest.Reply{Text: "carried on"})
	e.startRunner("next", pB, nil)
	waitFor(t, "the held notice to reach the next runner's model", 30*time.Second, func() bool {
		for _, r := range modelB.Requests() {
			if strings.Contains(string(r.Body), "second, while busy") {
				return true
			}
		}
		return false
	})
}
