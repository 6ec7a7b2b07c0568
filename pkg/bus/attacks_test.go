package bus_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// In `jetway dev` NATS is open: every client may publish every subject, so
// no permission stands between a client and another tenant's session. The
// stream settings alone still refuse what acted on other publishers'
// messages: a roll-up on JETWAY_EVENTS (one publish erased the stream) and a
// schedule whose target or source is another subject (the server stored a
// scheduled message on whatever subject of the stream it named).
func TestDev_stream_settings_alone_refuse_roll_ups_and_cross_subject_schedules(t *testing.T) {
	s := bustest.StartServerWith(t, 2) // no users: open, as in jetway dev
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: 2}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	evs, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	msgs := func() uint64 {
		t.Helper()
		info, err := evs.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	for _, subj := range []string{"jetway.events.a.s1", "jetway.events.b.s2", "jetway.events.b.s2"} {
		if _, err := js.Publish(ctx, subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if n := msgs(); n != 3 {
		t.Fatalf("%s holds %d messages, want 3", bus.StreamEvents, n)
	}

	for _, rollup := range []string{jetstream.MsgRollupAll, jetstream.MsgRollupSubject} {
		m := nats.NewMsg("jetway.events.a.s1")
		m.Header.Set(jetstream.MsgRollup, rollup)
		if _, err := js.PublishMsg(ctx, m); err == nil {
			t.Errorf("Nats-Rollup: %s accepted by %s", rollup, bus.StreamEvents)
		}
		if n := msgs(); n != 3 {
			t.Errorf("after Nats-Rollup: %s, %s holds %d messages, want 3", rollup, bus.StreamEvents, n)
		}
	}

	at := jetstream.WithScheduleAt(time.Now().Add(time.Second))
	refused := []struct {
		what, subject string
		opts          []jetstream.PublishOpt
	}{
		{"a schedule on tenant a's subject targeting tenant b's session", "jetway.events.a.s1",
			[]jetstream.PublishOpt{at, jetstream.WithScheduleTarget("jetway.events.b.s2")}},
		{"a schedule on tenant a's subject targeting tenant b's job events", "jetway.events.a.s1",
			[]jetstream.PublishOpt{at, jetstream.WithScheduleTarget("jetway.jobevents.b.s2")}},
		{"a schedule copying tenant b's event into tenant a's session", "jetway.events.a.s1",
			[]jetstream.PublishOpt{at, jetstream.WithScheduleTarget("jetway.events.a.loot"), jetstream.WithScheduleSource("jetway.events.b.s2")}},
		{"a layover schedule targeting job events", "jetway.schedules.a.s1.x",
			[]jetstream.PublishOpt{at, jetstream.WithScheduleTarget("jetway.jobevents.b.s2")}},
		{"a layover schedule copying a session's event", "jetway.schedules.a.s1.y",
			[]jetstream.PublishOpt{at, jetstream.WithScheduleTarget("jetway.fired.a.loot"), jetstream.WithScheduleSource("jetway.events.b.s2")}},
		{"a job event schedule", "jetway.jobevents.a.s1",
			[]jetstream.PublishOpt{at, jetstream.WithScheduleTarget("jetway.jobevents.b.s2")}},
	}
	for _, r := range refused {
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: r.subject, Data: []byte(`{}`)}, r.opts...); err == nil {
			t.Errorf("%s: accepted", r.what)
		}
	}
	if n := msgs(); n != 3 {
		t.Errorf("after the schedules, %s holds %d messages, want 3", bus.StreamEvents, n)
	}
}
