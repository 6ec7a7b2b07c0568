package bus_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// In `jetway dev` NATS is open: every client may publish every subject, so
// no permission stands between a client and another tenant's session. The
// stream settings alone still refuse what acted on other publishers'
// messages, on every stream a publish is stored in (each work shard of the
// layout): a roll-up (one publish erased the stream), a schedule whose
// target or source is another subject (the server stored a scheduled
// message on whatever subject of the stream it named), a purge or a delete,
// and a Nats-Msg-Id taken first (a dedupe window let one tenant suppress
// another's event). Tenant b's events, in the shards and in the log sourced
// from them, are what they were.
func TestDev_stream_settings_alone_refuse_roll_ups_and_cross_subject_schedules(t *testing.T) {
	const P, K = 4, 2
	s := bustest.StartServerWith(t, P) // no users: open, as in jetway dev
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Shards: K}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	l, err := bus.ReadLayout(ctx, js)
	if err != nil || l != (bus.Layout{Partitions: P, Shards: K}) {
		t.Fatalf("layout %+v, %v; want %d partitions over %d shards", l, err, P, K)
	}
	// A session of tenant a in every shard, to attack each from; b's
	// session s2 is the victim.
	attackers := make([]string, K)
	for i := 0; slices.Contains(attackers, ""); i++ {
		if i > 1000 {
			t.Fatal("no session of tenant a in every shard")
		}
		sess := fmt.Sprintf("s%d", i)
		if k := bus.ShardOf(bus.PartitionFor("a", sess, P), K); attackers[k] == "" {
			attackers[k] = sess
		}
	}
	vp := bus.PartitionFor("b", "s2", P)
	victim, victimStored := "jetway.events.b.s2", fmt.Sprintf("jetway.events.%d.b.s2", vp)

	// victims counts b's events by subject in the log and in every shard
	// (no runner here: the shards keep every event).
	victims := func() map[string]map[string]uint64 {
		t.Helper()
		out := map[string]map[string]uint64{}
		for stream, filter := range map[string]string{bus.StreamEvents: "jetway.*.b.*", bus.WorkStream(0): "jetway.*.*.b.*", bus.WorkStream(1): "jetway.*.*.b.*"} {
			st, err := js.Stream(ctx, stream)
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
			if err != nil {
				t.Fatal(err)
			}
			out[stream] = maps.Clone(info.State.Subjects)
		}
		return out
	}
	for _, subj := range []string{"jetway.events.a." + attackers[0], victim, victim} {
		if _, err := js.Publish(ctx, subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "b's 2 events in the log", func() bool {
		return victims()[bus.StreamEvents]["jetway.events.b.s2"] == 2
	})
	before := victims()
	if before[l.Stream(vp)][victimStored] != 2 {
		t.Fatalf("b's events in its shard: %v, want 2 on %s", before, victimStored)
	}

	at := jetstream.WithScheduleAt(time.Now().Add(time.Second))
	for k, sess := range attackers {
		shard := bus.WorkStream(k)
		own := "jetway.events.a." + sess
		for _, rollup := range []string{jetstream.MsgRollupAll, jetstream.MsgRollupSubject} {
			m := nats.NewMsg(own)
			m.Header.Set(jetstream.MsgRollup, rollup)
			if _, err := js.PublishMsg(ctx, m); err == nil {
				t.Errorf("Nats-Rollup: %s accepted by %s", rollup, shard)
			}
		}
		for _, r := range []struct {
			what string
			opts []jetstream.PublishOpt
		}{
			{"a schedule targeting tenant b's session", []jetstream.PublishOpt{at, jetstream.WithScheduleTarget(victim)}},
			{"a schedule targeting tenant b's session as its shard stores it", []jetstream.PublishOpt{at, jetstream.WithScheduleTarget(victimStored)}},
			{"a schedule targeting tenant b's job events", []jetstream.PublishOpt{at, jetstream.WithScheduleTarget("jetway.jobevents.b.s2")}},
			{"a schedule copying tenant b's event into tenant a's session", []jetstream.PublishOpt{at,
				jetstream.WithScheduleTarget(fmt.Sprintf("jetway.events.%d.a.%s", bus.PartitionFor("a", sess, P), sess)), jetstream.WithScheduleSource(victimStored)}},
		} {
			if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: own, Data: []byte(`{}`)}, r.opts...); err == nil {
				t.Errorf("%s, published into %s: accepted", r.what, shard)
			}
		}
		st, err := js.Stream(ctx, shard)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(victimStored)); err == nil {
			t.Errorf("a purge of %s accepted", shard)
		}
		if err := st.DeleteMsg(ctx, 1); err == nil {
			t.Errorf("a delete from %s accepted", shard)
		}
		// b's next id, taken first in every shard.
		m := nats.NewMsg(own)
		m.Header.Set(nats.MsgIdHdr, "ci-1")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("a's publish with id ci-1: %v", err)
		}
	}
	for _, r := range []struct {
		what, subject string
		opts          []jetstream.PublishOpt
	}{
		{"a layover schedule targeting job events", "jetway.schedules.a.s1.x", []jetstream.PublishOpt{at, jetstream.WithScheduleTarget("jetway.jobevents.b.s2")}},
		{"a layover schedule copying a session's event", "jetway.schedules.a.s1.y", []jetstream.PublishOpt{at,
			jetstream.WithScheduleTarget(fmt.Sprintf("jetway.fired.%d.a.loot", bus.PartitionFor("a", "loot", P))), jetstream.WithScheduleSource(victimStored)}},
		{"a job event schedule", "jetway.jobevents.a.s1", []jetstream.PublishOpt{at, jetstream.WithScheduleTarget("jetway.jobevents.b.s2")}},
	} {
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: r.subject, Data: []byte(`{}`)}, r.opts...); err == nil {
			t.Errorf("%s: accepted", r.what)
		}
	}
	// The log itself takes no publish.
	evs, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if err := evs.Purge(ctx); err == nil {
		t.Errorf("a purge of %s accepted", bus.StreamEvents)
	}

	// Nothing of b's changed, in the shards or in the log (once the log
	// has everything a attacked with: a's ci-1 publishes, one a shard).
	testutil.Eventually(t, 10*time.Second, "a's events in the log", func() bool {
		info, err := evs.Info(ctx, jetstream.WithSubjectFilter("jetway.events.a.*"))
		var n uint64
		if err == nil {
			for _, c := range info.State.Subjects {
				n += c
			}
		}
		return n == 1+K
	})
	if after := victims(); !maps.EqualFunc(after, before, maps.Equal) {
		t.Errorf("b's events changed under the attacks: %v, were %v", after, before)
	}
	// And b's own ci-1 is stored, not taken for a duplicate of a's.
	m := nats.NewMsg(victim)
	m.Header.Set(nats.MsgIdHdr, "ci-1")
	ack, err := js.PublishMsg(ctx, m)
	if err != nil || ack.Duplicate {
		t.Errorf("b's event with id ci-1: %+v, %v; want stored", ack, err)
	}
}
