package runner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
)

// A runner must know every switch before it takes its first event: a
// switch set while no runner ran (or before this one started) is the
// operator's word, and a runner that consumed before it had read the
// switches would start the very run the switch was set to stop. The
// bucket holds many other switches, read before this session's, as a
// control bucket in use does.
func TestA_switch_set_before_a_runner_starts_holds_for_its_first_event(t *testing.T) {
	for _, scope := range []struct{ name, tenant, session string }{
		{"session", "t1", "s1"},
		{"tenant", "t1", ""},
	} {
		t.Run(scope.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			control, err := e.js.KeyValue(ctx, bus.BucketControl)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 300 {
				if _, err := groundstop.Set(ctx, control, "other", fmt.Sprintf("s%03d", i), groundstop.Record{By: "other"}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := groundstop.Set(ctx, control, scope.tenant, scope.session, groundstop.Record{Reason: "before start", By: "t1"}); err != nil {
				t.Fatal(err)
			}
			id := e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "work"})

			model, p := fakeModel(t, llmtest.Reply{Text: "ok"})
			e.startRunner("r1", p, nil)
			held := e.workConsumer("t1", "s1")
			waitFor(t, "the event to be taken and held", 20*time.Second, func() bool {
				info, err := held.Info(ctx)
				return err == nil && info.NumAckPending == 1 && info.NumPending == 0
			})
			if n := model.RequestCount(); n != 0 {
				t.Fatalf("the model was called %d times under a switch set before the runner started", n)
			}
			if recs := e.records("t1", "s1"); len(recs) != 0 {
				t.Fatalf("the session's transcript grew under the switch: %+v", recs)
			}

			if err := groundstop.Clear(ctx, control, scope.tenant, scope.session); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the held event to run once the switch is lifted", 20*time.Second, func() bool {
				return deliveries(e.records("t1", "s1"))[id] == 1 && e.session("t1", "s1").State == StateIdle
			})
		})
	}
}

// workConsumer is the work consumer of the session's partition.
func (e *env) workConsumer(tenant, session string) interface {
	Info(context.Context) (*jetstream.ConsumerInfo, error)
} {
	e.t.Helper()
	ctx := context.Background()
	p, err := bus.Partitions(ctx, e.js)
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := e.js.Consumer(ctx, bus.StreamWork, bus.WorkConsumerName(bus.PartitionFor(tenant, session, p)))
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}
