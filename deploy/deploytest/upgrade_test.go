package deploytest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// TestUpgrade_of_an_old_events_stream_on_a_cluster provisions the layout of
// deployments made before the split (one R3 JETWAY_EVENTS with schedules,
// job events and roll-ups), fills it as the services' users would, and
// provisions again as the admin: the pending layover fires into its session
// after the upgrade, events published afterwards reach JETWAY_WORK, none
// is queued twice, and the tenant's roll-up that erased the old stream is
// refused.
func TestUpgrade_of_an_old_events_stream_on_a_cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster; skipped with -short")
	}
	d := render(t, renderOptions{})
	d.startCluster()
	admin := d.connect("admin")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := bus.ProvisionConfig{Replicas: 3, Partitions: 4}

	// The old layout, as the admin made it.
	// JETWAY_WORK sourced it through the durable consumer of that time,
	// jetway-work-source.
	events, work, source := bustest.OldLayout(cfg)
	testutil.Eventually(t, 30*time.Second, "the old "+bus.StreamEvents, func() bool {
		_, err := admin.js.CreateStream(ctx, events)
		return err == nil
	})
	if _, err := admin.js.CreatePushConsumer(ctx, bus.StreamEvents, source); err != nil {
		t.Fatalf("work source consumer: %v", err)
	}
	if _, err := admin.js.CreateStream(ctx, work); err != nil {
		t.Fatalf("make %s: %v", bus.StreamWork, err)
	}

	disp, jobsUser, run := d.connect("dispatcher"), d.connect("jobs"), d.connect("runner")
	for i := range 4 {
		if _, err := disp.js.Publish(ctx, fmt.Sprintf("jetway.events.acme.s%d", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := jobsUser.js.Publish(ctx, fmt.Sprintf("jetway.jobevents.acme.s%d", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	due := time.Now().Add(5 * time.Second).Truncate(time.Second).Add(time.Second)
	if _, err := run.js.PublishMsg(ctx, &nats.Msg{Subject: "jetway.schedules.acme.s1.l-1", Data: []byte(`{"booked_by":"old"}`)},
		jetstream.WithScheduleAt(due), jetstream.WithScheduleTarget("jetway.events.acme.s1")); err != nil {
		t.Fatalf("runner: the old layover: %v", err)
	}
	msgs := func(name string) uint64 {
		s, err := admin.js.Stream(ctx, name)
		if err != nil {
			return 0
		}
		return s.CachedInfo().State.Msgs
	}
	testutil.Eventually(t, 30*time.Second, "the 8 old events in JETWAY_WORK", func() bool { return msgs(bus.StreamWork) == 8 })

	d.provision()

	evs, err := admin.js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if c := evs.CachedInfo().Config; c.AllowMsgSchedules || c.AllowRollup || !c.DenyPurge || c.Replicas != 3 {
		t.Fatalf("upgraded %s: schedules %v, roll-ups %v, deny purge %v, replicas %d", bus.StreamEvents, c.AllowMsgSchedules, c.AllowRollup, c.DenyPurge, c.Replicas)
	}
	if n := msgs(bus.StreamEventsV1); n != 8 {
		t.Errorf("%s holds %d of the old log's 8 events", bus.StreamEventsV1, n)
	}
	cons, err := admin.js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jetway.events.acme.s1"}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		t.Fatalf("the carried layover did not fire into acme/s1: %v", err)
	}
	if string(m.Data()) != `{"booked_by":"old"}` || time.Now().Before(due) {
		t.Errorf("fired %q at %s, due %s", m.Data(), time.Now().Format(time.RFC3339), due.Format(time.RFC3339))
	}

	if _, err := disp.js.Publish(ctx, "jetway.events.acme.after", []byte(`{}`)); err != nil {
		t.Fatalf("dispatcher: publish after the upgrade: %v", err)
	}
	if _, err := jobsUser.js.Publish(ctx, "jetway.jobevents.acme.after", []byte(`{}`)); err != nil {
		t.Fatalf("jobs: publish after the upgrade: %v", err)
	}
	// 8 old + the resume + 2 new; anything queued again would exceed it.
	testutil.Eventually(t, 60*time.Second, "the resume and the new events in JETWAY_WORK", func() bool { return msgs(bus.StreamWork) >= 11 })
	if n := msgs(bus.StreamWork); n != 11 {
		t.Errorf("JETWAY_WORK holds %d messages, want 11", n)
	}

	acme := d.connect("tenant-acme") // in its own account: jetway.events.s1 is acme's s1
	before := msgs(bus.StreamEvents)
	rollup := nats.NewMsg("jetway.events.s1")
	rollup.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	if _, err := acme.js.PublishMsg(ctx, rollup); err == nil {
		t.Errorf("tenant: Nats-Rollup: all accepted after the upgrade")
	}
	if after := msgs(bus.StreamEvents); after < before {
		t.Errorf("a tenant's roll-up erased %d events", before-after)
	}
}
