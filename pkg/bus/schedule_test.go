package bus_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

func TestSchedule_fires_onto_the_sessions_events_subject(t *testing.T) {
	_, _, js := bustest.StartProvisioned(t, bus.ProvisionConfig{Partitions: 2})
	ctx := testContext(t)

	const holder, target = "jetway.schedules.t.s.x", "jetway.events.t.s"
	if _, err := js.Publish(ctx, holder, []byte(`{"booked_by":"test"}`),
		jetstream.WithScheduleAt(time.Now().Add(time.Second)),
		jetstream.WithScheduleTarget(target)); err != nil {
		t.Fatalf("publish schedule: %v", err)
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{target}})
	if err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(15 * time.Second))
	if err != nil {
		t.Fatalf("no message fired onto %s: %v", target, err)
	}
	if string(m.Data()) != `{"booked_by":"test"}` {
		t.Errorf("fired body = %q", m.Data())
	}
	if got := m.Headers().Get("Nats-Scheduler"); got != holder {
		t.Errorf("Nats-Scheduler = %q, want %q", got, holder)
	}

	// What fired is an ordinary session event, so it reaches the runners.
	work, _ := js.Stream(ctx, bus.StreamWork)
	waitFor(t, 10*time.Second, "the fired event in JETWAY_WORK", func() bool {
		info, err := work.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
}
