package bus_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// An old deployment with events, job events and a pending layover, on a
// server from before the partition mapping, is restarted with the mapping
// and provisioned: the split and then the sharding upgrade run in one go.
// Nothing queued is lost or queued twice, the old log is kept as a copy,
// the layover still fires (into its session's partition, through the new
// schedules stream), new events reach the runners, and the roll-up that
// erased the old stream is refused.
func TestProvision_upgrades_an_old_events_stream_keeping_events_and_layovers(t *testing.T) {
	const P = 4
	old := startUnmapped(t)
	_, js := bustest.Connect(t, old.s.ClientURL())
	ctx := testContext(t)
	cfg := bus.ProvisionConfig{Partitions: P}

	// The old layout: JETWAY_EVENTS with schedules, and JETWAY_WORK sourcing
	// it through its durable consumer.
	eventsCfg, workCfg, workSource := bustest.OldLayout(cfg)
	if _, err := js.CreateStream(ctx, eventsCfg); err != nil {
		t.Fatalf("make the old %s: %v", bus.StreamEvents, err)
	}
	// The old log was attacked once: a roll-up on one subject, whose own
	// message (with its Nats-Rollup header) is still in the log and must be
	// copied like any other.
	if _, err := js.Publish(ctx, "jetway.events.acme.s0", []byte("erased")); err != nil {
		t.Fatal(err)
	}
	rolled := nats.NewMsg("jetway.events.acme.s0")
	rolled.Data = []byte("before")
	rolled.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if _, err := js.PublishMsg(ctx, rolled); err != nil {
		t.Fatalf("old roll-up: %v", err)
	}
	if _, err := js.CreatePushConsumer(ctx, bus.StreamEvents, workSource); err != nil {
		t.Fatalf("work source consumer: %v", err)
	}
	if _, err := js.CreateStream(ctx, workCfg); err != nil {
		t.Fatalf("make %s: %v", bus.StreamWork, err)
	}
	var want []string // what the runners are to get, as "subject data"
	for i := range 5 {
		sess := fmt.Sprintf("s%d", i)
		if i > 0 {
			if _, err := js.Publish(ctx, "jetway.events.acme."+sess, []byte("before")); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, workLine("events", "acme", sess, P, "before"))
		if _, err := js.Publish(ctx, "jetway.jobevents.acme."+sess, []byte("job before")); err != nil {
			t.Fatal(err)
		}
		want = append(want, workLine("jobevents", "acme", sess, P, "job before"))
	}
	// Due after the restart and the upgrade have begun: it must be carried.
	due := time.Now().Add(6 * time.Second).Truncate(time.Second).Add(time.Second)
	resume := nats.NewMsg("jetway.schedules.acme.s1.l-1")
	resume.Data = []byte(`{"booked_by":"run-1"}`)
	resume.Header.Set("ce-id", "resume-1")
	if _, err := js.PublishMsg(ctx, resume, jetstream.WithScheduleAt(due), jetstream.WithScheduleTarget("jetway.events.acme.s1")); err != nil {
		t.Fatalf("old layover: %v", err)
	}
	want = append(want, workLine("events", "acme", "s1", P, `{"booked_by":"run-1"}`))
	if _, err := js.Publish(ctx, "jetway.schedules.acme.s2.l-2", []byte("later"),
		jetstream.WithScheduleAt(time.Now().Add(time.Hour)), jetstream.WithScheduleTarget("jetway.events.acme.s2")); err != nil {
		t.Fatalf("old far layover: %v", err)
	}
	work, err := js.Stream(ctx, bus.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "10 old events in JETWAY_WORK", func() bool {
		info, err := work.Info(ctx)
		return err == nil && info.State.Msgs == 10
	})

	// A notifier that has read none of the job events yet.
	if _, err := js.CreateOrUpdateConsumer(ctx, bus.StreamEvents, jetstream.ConsumerConfig{
		Durable: "notifier-events", FilterSubject: bus.SubjectJobEvents, AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatalf("notifier consumer: %v", err)
	}

	// The upgrade: the server restarted with the mapping, then provisioned.
	s := old.restartMapped(t, P)
	_, js = bustest.Connect(t, s.ClientURL())
	var lines []string
	cfg.Progress = func(l string) { lines = append(lines, l) }
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provision over the old layout: %v\n%s", err, strings.Join(lines, "\n"))
	}
	t.Logf("provision said:\n%s", strings.Join(lines, "\n"))

	if _, err := js.Stream(ctx, bus.StreamWork); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the old %s is still there after the upgrade (%v)", bus.StreamWork, err)
	}
	evs, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if c := evs.CachedInfo().Config; c.AllowMsgSchedules || c.AllowRollup || !c.DenyPurge || !c.DenyDelete || c.Sealed || len(c.Subjects) != 0 {
		t.Errorf("upgraded %s: schedules %v, roll-ups %v, purge %v, delete %v, sealed %v, subjects %v", bus.StreamEvents,
			c.AllowMsgSchedules, c.AllowRollup, !c.DenyPurge, !c.DenyDelete, c.Sealed, c.Subjects)
	}
	v1, err := js.Stream(ctx, bus.StreamEventsV1)
	if err != nil {
		t.Fatalf("the old log's copy: %v", err)
	}
	if got := v1.CachedInfo().State.Msgs; got != 10 {
		t.Errorf("%s holds %d messages, want the old log's 10 events and job events", bus.StreamEventsV1, got)
	}
	sched, err := js.Stream(ctx, bus.StreamSchedules)
	if err != nil {
		t.Fatal(err)
	}
	far, err := sched.GetLastMsgForSubject(ctx, "jetway.schedules.acme.s2.l-2")
	if err != nil {
		t.Fatalf("the far layover was not carried over: %v", err)
	}
	if got := far.Header.Get(jetstream.ScheduleTargetHeader); got != "jetway.fired.acme.s2" {
		t.Errorf("carried layover targets %q, want jetway.fired.acme.s2", got)
	}

	// The near layover fires into the session, once, and reaches the log.
	cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jetway.events.acme.s1"}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(20 * time.Second))
		if err != nil {
			t.Fatalf("the carried layover did not fire into jetway.events.acme.s1: %v", err)
		}
		if m.Headers().Get("ce-id") != "resume-1" {
			continue // the old event of s1, moved from the old work queue
		}
		if string(m.Data()) != `{"booked_by":"run-1"}` {
			t.Errorf("fired %q", m.Data())
		}
		break
	}
	if time.Now().Before(due) {
		t.Errorf("the layover fired before its due time %s", due.Format(time.RFC3339))
	}

	// A new event and a new job event reach the runners.
	if _, err := js.Publish(ctx, "jetway.events.acme.after", []byte("after")); err != nil {
		t.Fatalf("publish after the upgrade: %v", err)
	}
	want = append(want, workLine("events", "acme", "after", P, "after"))
	if _, err := js.Publish(ctx, "jetway.jobevents.acme.after", []byte("job after")); err != nil {
		t.Fatalf("publish a job event after the upgrade: %v", err)
	}
	want = append(want, workLine("jobevents", "acme", "after", P, "job after"))

	// The runners get each old event, the resume and the new ones once:
	// 10 old + resume + 2 new. Nothing more can come from the old queue,
	// which the upgrade emptied and deleted.
	l := bus.Layout{Partitions: P, Shards: 1}
	testutil.Eventually(t, 20*time.Second, "13 events for the runners", func() bool { return bustest.WorkPending(ctx, js, l) >= 13 })
	if got := takeAllWork(t, ctx, js, l); !sameLines(got, want) {
		t.Errorf("the runners got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The attack the old shape allowed is refused now.
	before, _ := evs.Info(ctx)
	rollup := nats.NewMsg("jetway.events.acme.s1")
	rollup.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	if _, err := js.PublishMsg(ctx, rollup); err == nil {
		t.Errorf("a Nats-Rollup: all publish was accepted by the upgraded %s", bus.StreamEvents)
	}
	after, _ := evs.Info(ctx)
	if after.State.Msgs < before.State.Msgs {
		t.Errorf("a roll-up erased %d messages", before.State.Msgs-after.State.Msgs)
	}

	// Provisioning again changes nothing.
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provision after the upgrade: %v", err)
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "2 pending schedule holders carried over") }) {
		t.Errorf("provision did not report carrying the 2 layovers over")
	}
	if !slices.ContainsFunc(lines, func(l string) bool {
		return strings.Contains(l, "notifier-events") && strings.Contains(l, "5 events not yet acknowledged")
	}) {
		t.Errorf("provision did not say the notifier's consumer leaves 5 job events unread")
	}
	if n := bustest.WorkPending(ctx, js, l); n != 0 {
		t.Errorf("provisioning again queued %d events for the runners", n)
	}
}

// An upgrade that cannot finish (here JETWAY_WORK is not sourcing the old
// log, so the wait for it runs out) fails saying what did not catch up,
// loses nothing, and provisioning again, once the cause is gone, finishes
// it: the pending layover still arrives, from the stash it was kept in,
// and the old event reaches the runners through its shard.
func TestProvision_continues_an_upgrade_that_failed_half_way(t *testing.T) {
	const P = 2
	old := startUnmapped(t)
	_, js := bustest.Connect(t, old.s.ClientURL())
	ctx := testContext(t)
	cfg := bus.ProvisionConfig{Partitions: P}
	eventsCfg, workCfg, workSource := bustest.OldLayout(cfg)
	if _, err := js.CreateStream(ctx, eventsCfg); err != nil {
		t.Fatalf("make the old %s: %v", bus.StreamEvents, err)
	}
	// The work source consumer exists, but no JETWAY_WORK reads it yet.
	if _, err := js.CreatePushConsumer(ctx, bus.StreamEvents, workSource); err != nil {
		t.Fatalf("work source consumer: %v", err)
	}
	if _, err := js.Publish(ctx, "jetway.events.acme.s1", []byte("before")); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(4 * time.Second).Truncate(time.Second).Add(time.Second)
	if _, err := js.Publish(ctx, "jetway.schedules.acme.s1.l-1", []byte("resume"),
		jetstream.WithScheduleAt(due), jetstream.WithScheduleTarget("jetway.events.acme.s1")); err != nil {
		t.Fatal(err)
	}

	s := old.restartMapped(t, P)
	_, js = bustest.Connect(t, s.ClientURL())
	patience := bus.UpgradeCatchUp
	bus.UpgradeCatchUp = 500 * time.Millisecond
	err := bus.Provision(ctx, js, cfg)
	bus.UpgradeCatchUp = patience
	if err == nil || !strings.Contains(err.Error(), "consumer jetway-work-source has 1 events not yet delivered") {
		t.Fatalf("provision with JETWAY_WORK not sourcing = %v, want an error naming the old source consumer and what it holds", err)
	}
	// Frozen: nothing more goes into the old log meanwhile.
	if _, err := js.Publish(ctx, "jetway.events.acme.s1", []byte("during")); err == nil {
		t.Errorf("the old stream took a publish during the upgrade")
	}

	if _, err := js.CreateStream(ctx, workCfg); err != nil {
		t.Fatalf("make %s: %v", bus.StreamWork, err)
	}
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provision again: %v", err)
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jetway.events.acme.s1"}})
	if err != nil {
		t.Fatal(err)
	}
	var logged []string
	for len(logged) < 2 {
		m, err := cons.Next(jetstream.FetchMaxWait(20 * time.Second))
		if err != nil {
			t.Fatalf("the layover did not fire after the resumed upgrade (the log has %q): %v", logged, err)
		}
		logged = append(logged, string(m.Data()))
	}
	if slices.Sort(logged); strings.Join(logged, ",") != "before,resume" {
		t.Errorf("the log has %q of acme/s1, want the old event (moved through its shard) and the resume", logged)
	}
	v1, err := js.Stream(ctx, bus.StreamEventsV1)
	if err != nil || v1.CachedInfo().State.Msgs != 1 {
		t.Errorf("%s: %v; want the old log's 1 event", bus.StreamEventsV1, err)
	}
	l := bus.Layout{Partitions: P, Shards: 1}
	testutil.Eventually(t, 10*time.Second, "the old event and the resume for the runners", func() bool { return bustest.WorkPending(ctx, js, l) >= 2 })
	got := takeWork(t, ctx, js, l, bus.PartitionFor("acme", "s1", P))
	want := []string{workLine("events", "acme", "s1", P, "before"), workLine("events", "acme", "s1", P, "resume")}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the runners got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
