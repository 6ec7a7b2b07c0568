package bus_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// A layover's schedule lives in JETWAY_SCHEDULES and fires onto
// jetway.fired.<t>.<s> there; JETWAY_EVENTS sources that as the session's
// events subject, so the runners see the resume where they always did.
func TestSchedule_fires_through_JETWAY_SCHEDULES_onto_the_sessions_events_subject(t *testing.T) {
	_, _, js := bustest.StartProvisioned(t, bus.ProvisionConfig{Partitions: 2})
	ctx := testContext(t)

	const holder, fired, target = "jetway.schedules.t.s.x", "jetway.fired.t.s", "jetway.events.t.s"
	if _, err := js.Publish(ctx, holder, []byte(`{"booked_by":"test"}`),
		jetstream.WithScheduleAt(time.Now().Add(time.Second)),
		jetstream.WithScheduleTarget(fired)); err != nil {
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

	sched, err := js.Stream(ctx, bus.StreamSchedules)
	if err != nil {
		t.Fatalf("stream %s: %v", bus.StreamSchedules, err)
	}
	if _, err := sched.GetLastMsgForSubject(ctx, holder); err == nil {
		t.Errorf("the fired one-shot's holder is still in %s", bus.StreamSchedules)
	}

	// What fired is an ordinary session event, so it reaches the runners.
	work, _ := js.Stream(ctx, bus.WorkStream(0))
	testutil.Eventually(t, 10*time.Second, "the fired event in JETWAY_WORK", func() bool {
		info, err := work.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
}
