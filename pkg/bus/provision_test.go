package bus_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

func TestProvision_is_idempotent_and_applies_changed_limits(t *testing.T) {
	s := bustest.StartServer(t)
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)

	var lines []string
	cfg := bus.ProvisionConfig{Partitions: 4, Progress: func(l string) { lines = append(lines, l) }}
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("first provision: %v", err)
	}
	if len(lines) == 0 {
		t.Errorf("provision reported no progress")
	}
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("second provision: %v", err)
	}
	cfg.EventsMaxAge = 48 * time.Hour
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provision with changed MaxAge: %v", err)
	}

	ev, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatalf("stream %s: %v", bus.StreamEvents, err)
	}
	info := ev.CachedInfo()
	if info.Config.MaxAge != 48*time.Hour {
		t.Errorf("%s MaxAge = %s, want 48h", bus.StreamEvents, info.Config.MaxAge)
	}
	// Tenants write JETWAY_EVENTS: nothing there may act on other
	// publishers' messages.
	if c := info.Config; c.AllowMsgSchedules || c.AllowRollup || !c.DenyPurge || !c.DenyDelete || c.Duplicates != 0 {
		t.Errorf("%s allows schedules %v, roll-ups %v, purge %v, delete %v, dedupe window %s; want none of them",
			bus.StreamEvents, c.AllowMsgSchedules, c.AllowRollup, !c.DenyPurge, !c.DenyDelete, c.Duplicates)
	}
	if len(info.Config.Subjects) != 1 || info.Config.Subjects[0] != bus.SubjectEvents {
		t.Errorf("%s subjects = %v, want only %s", bus.StreamEvents, info.Config.Subjects, bus.SubjectEvents)
	}
	sched, err := js.Stream(ctx, bus.StreamSchedules)
	if err != nil || !sched.CachedInfo().Config.AllowMsgSchedules {
		t.Errorf("%s must exist and allow message schedules: %v", bus.StreamSchedules, err)
	}
	jobs, err := js.Stream(ctx, bus.StreamJobEvents)
	if err != nil {
		t.Fatalf("stream %s: %v", bus.StreamJobEvents, err)
	}
	if c := jobs.CachedInfo().Config; c.Duplicates != bus.DefaultDuplicateWindow || c.AllowRollup || !c.DenyPurge || !c.DenyDelete {
		t.Errorf("%s: dedupe window %s (want %s), roll-ups %v, purge %v, delete %v", bus.StreamJobEvents,
			c.Duplicates, bus.DefaultDuplicateWindow, c.AllowRollup, !c.DenyPurge, !c.DenyDelete)
	}

	for _, name := range []string{bus.StreamWork, bus.StreamTranscripts, bus.StreamOut} {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Errorf("stream %s: %v", name, err)
		}
	}
	work, _ := js.Stream(ctx, bus.StreamWork)
	if got := work.CachedInfo().Config.Retention; got != jetstream.WorkQueuePolicy {
		t.Errorf("%s retention = %s, want work queue", bus.StreamWork, got)
	}

	p, err := bus.Partitions(ctx, js)
	if err != nil || p != 4 {
		t.Fatalf("Partitions() = %d, %v; want 4", p, err)
	}
	for i := range p {
		c, err := js.Consumer(ctx, bus.StreamWork, bus.WorkConsumerName(i))
		if err != nil {
			t.Fatalf("consumer %s: %v", bus.WorkConsumerName(i), err)
		}
		cc := c.CachedInfo().Config
		if cc.FilterSubject != fmt.Sprintf("%d.>", i) || cc.PriorityPolicy != jetstream.PriorityPolicyPinned ||
			cc.AckPolicy != jetstream.AckExplicitPolicy || len(cc.PriorityGroups) != 1 || cc.PriorityGroups[0] != bus.WorkGroup {
			t.Errorf("consumer %s config = filter %q policy %v ack %v groups %v", cc.Durable,
				cc.FilterSubject, cc.PriorityPolicy, cc.AckPolicy, cc.PriorityGroups)
		}
	}

	for _, b := range []string{bus.BucketSessions, bus.BucketJobs, bus.BucketWorkers, bus.BucketRunners, bus.BucketControl, bus.BucketEventIDs, bus.BucketAgents} {
		if _, err := js.KeyValue(ctx, b); err != nil {
			t.Errorf("bucket %s: %v", b, err)
		}
	}
	runners, _ := js.KeyValue(ctx, bus.BucketRunners)
	st, err := runners.Status(ctx)
	if err != nil {
		t.Fatalf("runners bucket status: %v", err)
	}
	if st.TTL() != bus.DefaultRunnerTTL {
		t.Errorf("runners bucket TTL = %s, want %s", st.TTL(), bus.DefaultRunnerTTL)
	}
}

func TestEnsureWorkConsumers_reads_the_partition_count_back_from_the_stream(t *testing.T) {
	s := bustest.StartServer(t)
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: 3}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	if err := js.DeleteConsumer(ctx, bus.StreamWork, bus.WorkConsumerName(2)); err != nil {
		t.Fatalf("delete consumer: %v", err)
	}
	if err := bus.EnsureWorkConsumers(ctx, js, bus.ProvisionConfig{}); err != nil {
		t.Fatalf("EnsureWorkConsumers with P unset: %v", err)
	}
	if _, err := js.Consumer(ctx, bus.StreamWork, bus.WorkConsumerName(2)); err != nil {
		t.Errorf("consumer %s not recreated: %v", bus.WorkConsumerName(2), err)
	}
	if _, err := js.Consumer(ctx, bus.StreamWork, bus.WorkConsumerName(3)); err == nil {
		t.Errorf("consumer %s exists but P is 3", bus.WorkConsumerName(3))
	}

	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: 5}); err != nil {
		t.Fatalf("provision with P changed to 5: %v", err)
	}
	if p, err := bus.Partitions(ctx, js); err != nil || p != 5 {
		t.Errorf("Partitions() = %d, %v after changing P; want 5", p, err)
	}
	if _, err := js.Consumer(ctx, bus.StreamWork, bus.WorkConsumerName(4)); err != nil {
		t.Errorf("consumer %s: %v", bus.WorkConsumerName(4), err)
	}
}

// Job events come into JETWAY_EVENTS by sourcing, so how they interleave
// with host events is the order they arrive in the log of record (two
// publishers never had an order between them). What holds: the runners'
// partition delivers exactly the log's order, and each publisher's own.
func TestWork_keeps_a_sessions_events_and_jobevents_in_one_partition_in_log_order(t *testing.T) {
	s := bustest.StartServer(t)
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)
	const P = 8
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: P}); err != nil {
		t.Fatalf("provision: %v", err)
	}

	// The schedule goes first: sourcing keeps stream order, so once the
	// later events have arrived in JETWAY_WORK, a sourced schedule would be
	// there too.
	if _, err := js.Publish(ctx, "jetway.schedules.t1.s1.x", []byte("later"),
		jetstream.WithScheduleAt(time.Now().Add(time.Hour)),
		jetstream.WithScheduleTarget("jetway.fired.t1.s1")); err != nil {
		t.Fatalf("publish schedule: %v", err)
	}
	var want []string
	for i := range 10 {
		subj := "jetway.events.t1.s1"
		if i%2 == 1 {
			subj = "jetway.jobevents.t1.s1"
		}
		body := fmt.Sprintf("m%d", i)
		if _, err := js.Publish(ctx, subj, []byte(body)); err != nil {
			t.Fatalf("publish %s: %v", subj, err)
		}
		want = append(want, subj+" "+body)
	}
	work, err := js.Stream(ctx, bus.StreamWork)
	if err != nil {
		t.Fatalf("work stream: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "10 messages in JETWAY_WORK", func() bool {
		info, err := work.Info(ctx)
		return err == nil && info.State.Msgs >= 10
	})
	info, _ := work.Info(ctx)
	if info.State.Msgs != 10 {
		t.Fatalf("JETWAY_WORK holds %d messages, want 10 (the schedule must not be sourced)", info.State.Msgs)
	}

	p := bus.PartitionFor("t1", "s1", P)
	c, err := js.Consumer(ctx, bus.StreamWork, bus.WorkConsumerName(p))
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	batch, err := c.Fetch(10, jetstream.FetchMaxWait(5*time.Second), jetstream.FetchPriorityGroup(bus.WorkGroup))
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	var got []string
	for m := range batch.Messages() {
		part, err := bus.PartitionOf(m.Subject())
		if err != nil || part != p {
			t.Errorf("message on %q: partition %d (%v), want %d", m.Subject(), part, err, p)
		}
		got = append(got, strings.TrimPrefix(m.Subject(), fmt.Sprintf("%d.", p))+" "+string(m.Data()))
		if err := m.Ack(); err != nil {
			t.Errorf("ack: %v", err)
		}
	}
	if batch.Error() != nil {
		t.Fatalf("fetch batch: %v", batch.Error())
	}
	evs, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatalf("events stream: %v", err)
	}
	var logged []string
	for seq := uint64(1); seq <= 10; seq++ {
		m, err := evs.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get %d from %s: %v", seq, bus.StreamEvents, err)
		}
		logged = append(logged, m.Subject+" "+string(m.Data))
	}
	if strings.Join(got, "\n") != strings.Join(logged, "\n") {
		t.Errorf("partition %d delivered\n%s\nthe log holds\n%s", p, strings.Join(got, "\n"), strings.Join(logged, "\n"))
	}
	kind := func(list []string, prefix string) (out []string) {
		for _, l := range list {
			if strings.HasPrefix(l, prefix) {
				out = append(out, l)
			}
		}
		return out
	}
	for _, prefix := range []string{"jetway.events.", "jetway.jobevents."} {
		if g, w := kind(got, prefix), kind(want, prefix); strings.Join(g, "\n") != strings.Join(w, "\n") {
			t.Errorf("%s out of its publisher's order:\n%s\nwant\n%s", prefix, strings.Join(g, "\n"), strings.Join(w, "\n"))
		}
	}
}

func TestPartitionFor_matches_the_servers_transform(t *testing.T) {
	s := bustest.StartServer(t)
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)
	const P = 16
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: P}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	sessions := []string{"a", "b", "c", "session-42", "Z_9", "x"}
	for _, sess := range sessions {
		if _, err := js.Publish(ctx, "jetway.events.acme."+sess, nil); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	work, err := js.Stream(ctx, bus.StreamWork)
	if err != nil {
		t.Fatalf("work stream: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "every session in JETWAY_WORK", func() bool {
		info, err := work.Info(ctx)
		return err == nil && info.State.Msgs == uint64(len(sessions))
	})
	parts := map[int]bool{}
	for i, sess := range sessions {
		m, err := work.GetMsg(ctx, uint64(i+1))
		if err != nil {
			t.Fatalf("get message %d: %v", i+1, err)
		}
		if m.Subject[strings.Index(m.Subject, "."):] != ".jetway.events.acme."+sess {
			t.Fatalf("message %d is on %q, want session %s", i+1, m.Subject, sess)
		}
		p, err := bus.PartitionOf(m.Subject)
		if err != nil {
			t.Fatal(err)
		}
		parts[p] = true
		if want := bus.PartitionFor("acme", sess, P); p != want {
			t.Errorf("session %s: server put it in partition %d, PartitionFor says %d", sess, p, want)
		}
	}
	if len(parts) < 2 {
		t.Errorf("%d sessions all landed in one partition: the hash does not spread", len(sessions))
	}
}

func TestPartitionOf_refuses_subjects_without_a_partition(t *testing.T) {
	for _, subj := range []string{"jetway.events.t.s", "", "-1.jetway.events.t.s", "x.y"} {
		if p, err := bus.PartitionOf(subj); err == nil {
			t.Errorf("PartitionOf(%q) = %d, want an error", subj, p)
		}
	}
	if p, err := bus.PartitionOf("12.jetway.jobevents.t.s"); err != nil || p != 12 {
		t.Errorf("PartitionOf = %d, %v; want 12", p, err)
	}
}

func TestWorkConsumerName_names_partitions(t *testing.T) {
	if got := bus.WorkConsumerName(7); got != "work-7" {
		t.Errorf("WorkConsumerName(7) = %q, want work-7", got)
	}
}

// A deployment made before the work source became one transform through a
// durable consumer has the server's ephemeral two-transform source.
// Provisioning it again moves the source over without queueing again what
// the old one sourced (a changed source is a new one to the server,
// copied again), keeps every session in its partition; a provision after
// that changes nothing, and nor does a partition change.
func TestProvision_moves_an_old_work_source_over_without_queueing_events_again(t *testing.T) {
	s := bustest.StartServer(t)
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)
	const P = 4
	cfg := bus.ProvisionConfig{Partitions: P}
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provision: %v", err)
	}
	old := func(kind string) jetstream.SubjectTransformConfig {
		return jetstream.SubjectTransformConfig{Source: "jetway." + kind + ".*.*", Destination: fmt.Sprintf("{{partition(%d,1,2)}}.jetway.%s.{{wildcard(1)}}.{{wildcard(2)}}", P, kind)}
	}
	work, err := js.Stream(ctx, bus.StreamWork)
	if err != nil {
		t.Fatalf("work stream: %v", err)
	}
	wc := work.CachedInfo().Config
	wc.Sources = []*jetstream.StreamSource{{Name: bus.StreamEvents, SubjectTransforms: []jetstream.SubjectTransformConfig{old("events"), old("jobevents")}}}
	if _, err := js.UpdateStream(ctx, wc); err != nil {
		t.Fatalf("give the work stream the old source: %v", err)
	}

	evs, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	published := uint64(0)
	publish := func(subj string) {
		t.Helper()
		if _, err := js.Publish(ctx, subj, nil); err != nil {
			t.Fatalf("publish %s: %v", subj, err)
		}
		published++
	}
	// count waits for the marker, published last: sourcing keeps order,
	// so an event queued again would be in the stream before it. Job
	// events reach JETWAY_EVENTS by sourcing, so the marker goes in only
	// once every one of them is there: then it is the log's last event.
	count := func(marker string) uint64 {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, "every job event sourced into JETWAY_EVENTS", func() bool {
			info, err := evs.Info(ctx)
			return err == nil && info.State.Msgs == published
		})
		publish(marker)
		var n uint64
		testutil.Eventually(t, 20*time.Second, marker+" in JETWAY_WORK", func() bool {
			info, err := work.Info(ctx)
			if err != nil || info.State.Msgs == 0 {
				return false
			}
			last, err := work.GetMsg(ctx, info.State.LastSeq)
			n = info.State.Msgs
			return err == nil && strings.HasSuffix(last.Subject, marker[len("jetway"):])
		})
		return n
	}
	for i := range 30 {
		publish(fmt.Sprintf("jetway.events.acme.s%d", i%10))
		publish(fmt.Sprintf("jetway.jobevents.acme.s%d", i%10))
	}
	if n := count("jetway.events.acme.marker1"); n != 61 {
		t.Fatalf("the old source queued %d events, want 61", n)
	}
	partOf := map[string]string{}
	for seq := uint64(1); seq <= 61; seq++ {
		m, err := work.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get %d: %v", seq, err)
		}
		dot := strings.Index(m.Subject, ".")
		partOf[m.Subject[dot:]] = m.Subject[:dot]
	}

	var lines []string
	cfg.Progress = func(l string) { lines = append(lines, l) }
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provision over the old source: %v", err)
	}
	info, err := work.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	src := info.Config.Sources[0]
	if len(src.SubjectTransforms) != 1 || src.Consumer == nil || src.Consumer.Name != bus.WorkSourceConsumer {
		t.Fatalf("work source after provision: %+v; want one transform, through consumer %s", src, bus.WorkSourceConsumer)
	}
	sourceStart := func() uint64 {
		t.Helper()
		c, err := js.PushConsumer(ctx, bus.StreamEvents, bus.WorkSourceConsumer)
		if err != nil {
			t.Fatalf("source consumer: %v", err)
		}
		return c.CachedInfo().Config.OptStartSeq
	}
	if got := sourceStart(); got != 62 {
		t.Fatalf("the source consumer starts at %d, want 62 (after the 61 sourced)", got)
	}
	for i := range 10 {
		publish(fmt.Sprintf("jetway.events.acme.s%d", i))
		publish(fmt.Sprintf("jetway.jobevents.acme.s%d", i))
	}
	if n := count("jetway.events.acme.marker2"); n != 61+21 {
		t.Fatalf("after the move JETWAY_WORK holds %d events, want %d: events were queued again or lost", n, 61+21)
	}
	for seq := uint64(62); seq <= 81; seq++ {
		m, err := work.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get %d: %v", seq, err)
		}
		dot := strings.Index(m.Subject, ".")
		if was := partOf[m.Subject[dot:]]; was != m.Subject[:dot] {
			t.Errorf("%s moved from partition %s to %s", m.Subject[dot:], was, m.Subject[:dot])
		}
	}

	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provision again: %v", err)
	}
	if got := sourceStart(); got != 62 {
		t.Errorf("a provision with nothing changed moved the source consumer's start to %d", got)
	}
	if n := count("jetway.events.acme.marker3"); n != 61+21+1 {
		t.Fatalf("after a second provision JETWAY_WORK holds %d events, want %d", n, 61+21+1)
	}
	// Another partition count changes the source's transform: the consumer
	// holds where sourcing stands (its ack floor, moved by the sourcing
	// stream's flow control answers, at least once a second), so nothing
	// it confirmed is copied again.
	testutil.Eventually(t, 10*time.Second, "the source consumer's ack floor at the last event", func() bool {
		ei, err := evs.Info(ctx)
		if err != nil {
			return false
		}
		c, err := js.PushConsumer(ctx, bus.StreamEvents, bus.WorkSourceConsumer)
		if err != nil {
			return false
		}
		ci, err := c.Info(ctx)
		return err == nil && ci.AckFloor.Stream >= ei.State.LastSeq
	})
	cfg.Partitions = 8
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provision with 8 partitions: %v", err)
	}
	if n := count("jetway.events.acme.marker4"); n != 61+21+2 {
		t.Fatalf("after a partition change JETWAY_WORK holds %d events, want %d", n, 61+21+2)
	}
}

// A deployment provisioned before sub-agents has no JETWAY_AGENTEVENTS and
// a JETWAY_EVENTS with two sources; provisioning again adds the stream and
// the source in place, and a runner's sub-agent event then reaches the log
// of record (and the work queue) under its own subject.
func TestProvision_adds_the_agent_events_stream_to_a_deployment_made_before_it(t *testing.T) {
	s := bustest.StartServer(t)
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)
	cfg := bus.ProvisionConfig{Partitions: 2}
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	// Back to the earlier shape: JETWAY_EVENTS without the agent source,
	// and no agent stream.
	ev, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	old := ev.CachedInfo().Config
	var kept []*jetstream.StreamSource
	for _, src := range old.Sources {
		if src.Name != bus.StreamAgentEvents {
			kept = append(kept, src)
		}
	}
	old.Sources = kept
	if _, err := js.UpdateStream(ctx, old); err != nil {
		t.Fatalf("the earlier shape: %v", err)
	}
	if err := js.DeleteStream(ctx, bus.StreamAgentEvents); err != nil {
		t.Fatal(err)
	}

	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provision over the earlier shape: %v", err)
	}
	ag, err := js.Stream(ctx, bus.StreamAgentEvents)
	if err != nil {
		t.Fatalf("stream %s: %v", bus.StreamAgentEvents, err)
	}
	if c := ag.CachedInfo().Config; c.AllowMsgSchedules || c.AllowRollup || !c.DenyPurge || !c.DenyDelete || c.Duplicates == 0 {
		t.Errorf("%s: schedules %v, roll-ups %v, purge %v, delete %v, dedupe %s; want a runner-only stream with a dedupe window",
			bus.StreamAgentEvents, c.AllowMsgSchedules, c.AllowRollup, !c.DenyPurge, !c.DenyDelete, c.Duplicates)
	}
	if _, err := js.Publish(ctx, "jetway.agentevents.t1.s1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the sub-agent event in the log of record", func() bool {
		st, err := js.Stream(ctx, bus.StreamEvents)
		if err != nil {
			return false
		}
		_, err = st.GetLastMsgForSubject(ctx, "jetway.agentevents.t1.s1")
		return err == nil
	})
}
