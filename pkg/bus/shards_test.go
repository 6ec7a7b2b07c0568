package bus_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/events"
)

func TestProvision_makes_the_shards_the_log_and_the_consumers_and_is_idempotent(t *testing.T) {
	s := bustest.StartServerWith(t, 4)
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)

	var lines []string
	cfg := bus.ProvisionConfig{Shards: 2, Progress: func(l string) { lines = append(lines, l) }}
	for i := range 2 {
		if err := bus.Provision(ctx, js, cfg); err != nil {
			t.Fatalf("provision %d: %v", i+1, err)
		}
	}
	if len(lines) == 0 {
		t.Errorf("provision reported no progress")
	}
	cfg.EventsMaxAge = 48 * time.Hour
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provision with changed MaxAge: %v", err)
	}

	l, err := bus.ReadLayout(ctx, js)
	if err != nil || l != (bus.Layout{Partitions: 4, Shards: 2}) {
		t.Fatalf("ReadLayout = %+v, %v; want 4 partitions over 2 shards (P from the server)", l, err)
	}
	for k, want := range [][]string{{"jetway.events.0.*.*", "jetway.events.2.*.*"}, {"jetway.events.1.*.*", "jetway.events.3.*.*"}} {
		st, err := js.Stream(ctx, bus.WorkStream(k))
		if err != nil {
			t.Fatalf("shard %d: %v", k, err)
		}
		c := st.CachedInfo().Config
		if !slices.Equal(c.Subjects, want) {
			t.Errorf("%s subjects = %v, want %v", c.Name, c.Subjects, want)
		}
		if c.Retention != jetstream.InterestPolicy || c.MaxAge != 48*time.Hour {
			t.Errorf("%s: retention %s, max age %s; want interest, 48h", c.Name, c.Retention, c.MaxAge)
		}
		// Tenants write the shards: nothing there may act on other
		// publishers' messages.
		if c.AllowMsgSchedules || c.AllowRollup || !c.DenyPurge || !c.DenyDelete || c.Duplicates != 0 {
			t.Errorf("%s allows schedules %v, roll-ups %v, purge %v, delete %v, dedupe window %s; want none of them",
				c.Name, c.AllowMsgSchedules, c.AllowRollup, !c.DenyPurge, !c.DenyDelete, c.Duplicates)
		}
	}
	ev, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatalf("stream %s: %v", bus.StreamEvents, err)
	}
	if c := ev.CachedInfo().Config; len(c.Subjects) != 0 || len(c.Sources) != 2 || c.AllowRollup || !c.DenyPurge || !c.DenyDelete {
		t.Errorf("%s: subjects %v, %d sources, roll-ups %v, purge %v, delete %v; want the shards' log, taking no publishes itself",
			bus.StreamEvents, c.Subjects, len(c.Sources), c.AllowRollup, !c.DenyPurge, !c.DenyDelete)
	}
	for p := range 4 {
		c, err := js.Consumer(ctx, bus.WorkStreamOf(p, 2), bus.WorkConsumerName(p))
		if err != nil {
			t.Fatalf("consumer %s: %v", bus.WorkConsumerName(p), err)
		}
		cc := c.CachedInfo().Config
		if cc.FilterSubject != fmt.Sprintf("jetway.*.%d.*.*", p) || cc.PriorityPolicy != jetstream.PriorityPolicyPinned ||
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
}

func TestProvision_refuses_a_partition_count_the_server_does_not_map(t *testing.T) {
	s := bustest.StartServerWith(t, 16)
	_, js := bustest.Connect(t, s.ClientURL())
	err := bus.Provision(testContext(t), js, bus.ProvisionConfig{Partitions: 4})
	if err == nil || !strings.Contains(err.Error(), "4 partitions") || !strings.Contains(err.Error(), "16") {
		t.Fatalf("provision with 4 partitions on a server mapping 16: %v; want a refusal naming both", err)
	}
	if _, err := js.Stream(testContext(t), bus.WorkStream(0)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("a refused provision made %s (%v)", bus.WorkStream(0), err)
	}
	err = bus.Provision(testContext(t), js, bus.ProvisionConfig{Shards: 17})
	if err == nil || !strings.Contains(err.Error(), "17 shards") {
		t.Errorf("17 shards for 16 partitions: %v; want a refusal", err)
	}
}

func TestProvision_says_what_to_do_on_a_server_without_the_mapping(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "plain.conf")
	if err := os.WriteFile(conf, []byte("# no accounts, no mappings\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: dir, ServerName: "plain", ConfigFile: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.StopEmbedded(s) })
	_, js := bustest.Connect(t, s.ClientURL())
	err = bus.Provision(testContext(t), js, bus.ProvisionConfig{})
	if !errors.Is(err, bus.ErrNoPartitionMapping) || !strings.Contains(err.Error(), "MappingsConf") {
		t.Fatalf("provision on a server without the mapping: %v; want ErrNoPartitionMapping", err)
	}
}

// Job events reach the shard by sourcing, so how they interleave with host
// events is the order they arrive in the shard (two publishers never had an
// order between them). What holds: the partition's consumer delivers the
// shard's order, the log keeps it with the partition taken out, and each
// publisher's own order holds.
func TestShards_keep_a_sessions_events_and_job_events_in_one_partition_in_order(t *testing.T) {
	const P, K = 8, 2
	s := bustest.StartServerWith(t, P)
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Shards: K}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	p := bus.PartitionFor("t1", "s1", P)
	fired, err := eventsFiredSubject(p, "t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	// The schedule goes first: were it sourced, it would be there before
	// the later events.
	if _, err := js.Publish(ctx, "jetway.schedules.t1.s1.x", []byte("later"),
		jetstream.WithScheduleAt(time.Now().Add(time.Hour)), jetstream.WithScheduleTarget(fired)); err != nil {
		t.Fatalf("publish schedule: %v", err)
	}
	var want []string
	for i := range 10 {
		subj := "jetway.events.t1.s1"
		if i%2 == 1 {
			subj = "jetway.jobevents.t1.s1"
		}
		body := fmt.Sprintf("m%d", i)
		ack, err := js.Publish(ctx, subj, []byte(body))
		if err != nil {
			t.Fatalf("publish %s: %v", subj, err)
		}
		if i%2 == 0 && ack.Stream != bus.WorkStreamOf(p, K) {
			t.Fatalf("%s stored in %s, want its partition's shard %s", subj, ack.Stream, bus.WorkStreamOf(p, K))
		}
		want = append(want, subj+" "+body)
	}
	shard, err := js.Stream(ctx, bus.WorkStreamOf(p, K))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "10 events in the shard", func() bool {
		info, err := shard.Info(ctx)
		return err == nil && info.State.Msgs >= 10
	})
	if info, _ := shard.Info(ctx); info.State.Msgs != 10 {
		t.Fatalf("the shard holds %d messages, want 10 (the schedule must not be sourced)", info.State.Msgs)
	}
	other, _ := js.Stream(ctx, bus.WorkStreamOf(p+1, K))
	if info, err := other.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Errorf("the other shard holds %d messages (%v), want none", info.State.Msgs, err)
	}

	c, err := js.Consumer(ctx, bus.WorkStreamOf(p, K), bus.WorkConsumerName(p))
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	batch, err := c.Fetch(10, jetstream.FetchMaxWait(5*time.Second), jetstream.FetchPriorityGroup(bus.WorkGroup))
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	var got []string
	for m := range batch.Messages() {
		part, err := partitionOf(m.Subject())
		if err != nil || part != p {
			t.Errorf("message on %q: partition %d (%v), want %d", m.Subject(), part, err, p)
		}
		got = append(got, strings.Replace(m.Subject(), fmt.Sprintf(".%d.", p), ".", 1)+" "+string(m.Data()))
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
	testutil.Eventually(t, 10*time.Second, "10 events in the log", func() bool {
		info, err := evs.Info(ctx)
		return err == nil && info.State.Msgs >= 10
	})
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
	// Acked and logged, the events leave the shard: "still in the shard"
	// is "not yet acked", which the runners' order check asks.
	testutil.Eventually(t, 10*time.Second, "the shard empty once acked and logged", func() bool {
		info, err := shard.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
}

func TestShard_keeps_an_event_nobody_acked(t *testing.T) {
	s := bustest.StartServerWith(t, 2)
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "jetway.events.t1.s1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	ev, _ := js.Stream(ctx, bus.StreamEvents)
	testutil.Eventually(t, 10*time.Second, "the event in the log", func() bool {
		info, err := ev.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
	shard, _ := js.Stream(ctx, bus.WorkStream(0))
	if info, err := shard.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("the shard holds %d (%v) of an event logged but not acked; want it kept", info.State.Msgs, err)
	}
	p := bus.PartitionFor("t1", "s1", 2)
	m, err := shard.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(bus.SessionFilter(p, "t1", "s1")))
	if err != nil || m.Subject != fmt.Sprintf("jetway.events.%d.t1.s1", p) {
		t.Fatalf("the session's event in its shard: %v, %v", m, err)
	}
}

func TestPartitionFor_matches_the_servers_mapping(t *testing.T) {
	const P = 16
	s := bustest.StartServerWith(t, P)
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	sessions := []string{"a", "b", "c", "session-42", "Z_9", "x"}
	parts := map[int]bool{}
	for _, sess := range sessions {
		if _, err := js.Publish(ctx, "jetway.events.acme."+sess, nil); err != nil {
			t.Fatalf("publish: %v", err)
		}
		want := bus.PartitionFor("acme", sess, P)
		shard, _ := js.Stream(ctx, bus.WorkStream(0))
		m, err := shard.GetLastMsgForSubject(ctx, bus.SessionFilter(want, "acme", sess))
		if err != nil {
			t.Errorf("session %s: nothing in partition %d, where PartitionFor puts it: %v", sess, want, err)
			continue
		}
		if p, err := partitionOf(m.Subject); err != nil || p != want {
			t.Errorf("session %s on %q: partition %d (%v), want %d", sess, m.Subject, p, err, want)
		}
		parts[want] = true
	}
	if len(parts) < 2 {
		t.Errorf("%d sessions all landed in one partition: the hash does not spread", len(sessions))
	}
}

func TestWorkConsumerName_names_partitions(t *testing.T) {
	if got := bus.WorkConsumerName(7); got != "work-7" {
		t.Errorf("WorkConsumerName(7) = %q, want work-7", got)
	}
	if got := bus.WorkStreamOf(7, 3); got != "JETWAY_WORK_1" {
		t.Errorf("WorkStreamOf(7, 3) = %q, want JETWAY_WORK_1", got)
	}
}

// On a three-node cluster the shards' leaders sit on three nodes, as each
// node's own /jsz says, and the events of many sessions load all three:
// adding nodes adds capacity to the event path.
func TestProvision_on_a_cluster_spreads_the_shards_leaders_and_their_load(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	const P, K = 6, 3
	c := bustest.StartClusterWith(t, 3, bustest.ClusterConfig{Partitions: P})
	_, js := bustest.Connect(t, c.URLs()...)
	ctx := testContext(t)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Replicas: 3, Shards: K}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	led := ledBy(t, c)
	shardOf := map[string]string{} // shard → the node leading it
	for node, streams := range led {
		for _, s := range streams {
			if strings.HasPrefix(s, bus.StreamWorkPrefix) {
				if prev, dup := shardOf[s]; dup {
					t.Fatalf("%s led by %s and %s", s, prev, node)
				}
				shardOf[s] = node
			}
		}
	}
	nodes := map[string]bool{}
	for _, n := range shardOf {
		nodes[n] = true
	}
	if len(shardOf) != K || len(nodes) != K {
		t.Fatalf("jsz: shards led by %v, want %d shards on %d different nodes (all leaders: %v)", shardOf, K, K, led)
	}

	const sessions = 60
	for i := range sessions {
		if _, err := js.Publish(ctx, fmt.Sprintf("jetway.events.acme.s%d", i), nil); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	want := map[string]uint64{}
	for i := range sessions {
		want[bus.WorkStreamOf(bus.PartitionFor("acme", fmt.Sprintf("s%d", i), P), K)]++
	}
	for _, nd := range c.Nodes {
		for _, sd := range jszStreams(t, nd, true) {
			if !strings.HasPrefix(sd.Name, bus.StreamWorkPrefix) {
				continue
			}
			if sd.State.Msgs != want[sd.Name] || want[sd.Name] == 0 {
				t.Errorf("jsz of %s: its shard %s holds %d events, want %d (and more than none)", nd.Name(), sd.Name, sd.State.Msgs, want[sd.Name])
			}
		}
	}
	if moved, err := bus.SpreadLeaders(ctx, js, []string{bus.WorkStream(0), bus.WorkStream(1), bus.WorkStream(2)}); err != nil || moved != 0 {
		t.Errorf("SpreadLeaders after provisioning moved %d (%v), want nothing left to move", moved, err)
	}

	// The busy streams off the event path, all led by one node, are
	// spread by the next provisioning, apart from the shards.
	nc, _ := bustest.Connect(t, c.URLs()...)
	leadAllFrom(t, c, nc, c.Nodes[0].Name(), bus.BusyStreams()...)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Replicas: 3}); err != nil {
		t.Fatalf("provision again: %v", err)
	}
	led = ledBy(t, c)
	for _, nd := range c.Nodes {
		var busy, shards []string
		for _, s := range led[nd.Name()] {
			switch {
			case slices.Contains(bus.BusyStreams(), s):
				busy = append(busy, s)
			case strings.HasPrefix(s, bus.StreamWorkPrefix):
				shards = append(shards, s)
			}
		}
		// Four streams on three nodes: one or two each.
		if len(busy) < 1 || len(busy) > 2 || len(shards) != 1 {
			t.Errorf("jsz of %s after provisioning again: it leads busy streams %v and shards %v, want one or two of %v and one shard (all: %v)",
				nd.Name(), busy, shards, bus.BusyStreams(), led)
		}
	}
}

// K can change, in either direction, once the shards are drained; while an
// event waits in one, provisioning refuses and changes nothing.
func TestProvision_changes_the_shard_count_only_with_the_shards_drained(t *testing.T) {
	s := bustest.StartServerWith(t, 4)
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Shards: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "jetway.events.t1.s1", []byte("waiting")); err != nil {
		t.Fatal(err)
	}
	// A service provisioning at its start, naming no shard count, keeps
	// the provisioner's.
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{}); err != nil {
		t.Fatalf("provision without a shard count: %v", err)
	}
	if l, err := bus.ReadLayout(ctx, js); err != nil || l.Shards != 2 {
		t.Fatalf("provisioning without a shard count left %+v (%v), want the 2 shards kept", l, err)
	}
	err := bus.Provision(ctx, js, bus.ProvisionConfig{Shards: 1})
	if err == nil || !strings.Contains(err.Error(), "drained") {
		t.Fatalf("one shard while an event waits: %v; want a refusal", err)
	}
	if l, err := bus.ReadLayout(ctx, js); err != nil || l.Shards != 2 {
		t.Fatalf("after the refusal the layout is %+v (%v), want the 2 shards untouched", l, err)
	}

	p := bus.PartitionFor("t1", "s1", 4)
	c, err := js.Consumer(ctx, bus.WorkStreamOf(p, 2), bus.WorkConsumerName(p))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second), jetstream.FetchPriorityGroup(bus.WorkGroup))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testutil.EventuallyNil(t, 20*time.Second, "one shard once drained", func() error {
		return bus.Provision(ctx, js, bus.ProvisionConfig{Shards: 1})
	})
	if _, err := js.Stream(ctx, bus.WorkStream(1)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("shard 1 still there with one shard: %v", err)
	}
	for n := range 4 {
		if _, err := js.Consumer(ctx, bus.WorkStream(0), bus.WorkConsumerName(n)); err != nil {
			t.Errorf("work consumer %d on the one shard: %v", n, err)
		}
	}
	if ack, err := js.Publish(ctx, "jetway.events.t1.s2", nil); err != nil || ack.Stream != bus.WorkStream(0) {
		t.Fatalf("a publish with one shard: %v, %v; want it in %s", ack, err, bus.WorkStream(0))
	}

	testutil.EventuallyNil(t, 20*time.Second, "three shards once drained", func() error {
		// The event just published waits: drain it first.
		p := bus.PartitionFor("t1", "s2", 4)
		c, err := js.Consumer(ctx, bus.WorkStream(0), bus.WorkConsumerName(p))
		if err != nil {
			return err
		}
		if b, err := c.Fetch(1, jetstream.FetchMaxWait(time.Second), jetstream.FetchPriorityGroup(bus.WorkGroup)); err == nil {
			for m := range b.Messages() {
				_ = m.DoubleAck(ctx)
			}
		}
		return bus.Provision(ctx, js, bus.ProvisionConfig{Shards: 3})
	})
	for n := range 4 {
		if _, err := js.Consumer(ctx, bus.WorkStreamOf(n, 3), bus.WorkConsumerName(n)); err != nil {
			t.Errorf("work consumer %d on shard %d: %v", n, n%3, err)
		}
		if _, err := js.Consumer(ctx, bus.WorkStream(0), bus.WorkConsumerName(n)); n%3 != 0 && err == nil {
			t.Errorf("work consumer %d left behind on shard 0, which no longer holds its partition", n)
		}
	}
}

// partitionOf is the partition in a work shard's subject, as the runners
// read it (events.ParseSubject); an error for a subject without one.
func partitionOf(subject string) (int, error) {
	s, err := events.ParseSubject(subject)
	if err != nil {
		return 0, err
	}
	if s.Partition < 0 {
		return 0, fmt.Errorf("%q has no partition", subject)
	}
	return s.Partition, nil
}
