package bus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// oldServer is a single server as deployments ran before the partition
// mapping: an upgrade test builds the old layout on it, then restarts it on
// the same store with the mapping, as the upgrade procedure does.
type oldServer struct {
	dir string
	s   *server.Server
}

// startUnmapped starts a server whose configuration has no mappings, so
// jetway.events.<t>.<s> stays as published.
func startUnmapped(t *testing.T) *oldServer {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "unmapped.conf")
	if err := os.WriteFile(conf, []byte("# a deployment from before the partition mapping\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := &oldServer{dir: t.TempDir()}
	s, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: o.dir, ServerName: "upgrade", ConfigFile: conf})
	if err != nil {
		t.Fatalf("start the server without the mapping: %v", err)
	}
	o.s = s
	t.Cleanup(func() { bus.StopEmbedded(o.s) })
	return o
}

// restartMapped stops the server and starts it again on its store with the
// partition mapping for P partitions.
func (o *oldServer) restartMapped(t *testing.T, partitions int) *server.Server {
	t.Helper()
	bus.StopEmbedded(o.s)
	o.s = nil
	s, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: o.dir, ServerName: "upgrade", Partitions: partitions})
	if err != nil {
		t.Fatalf("restart with the mapping: %v", err)
	}
	o.s = s
	return s
}

// workLine is how a test writes an event a runner gets: its subject in
// its partition, and its data.
func workLine(kind, tenant, session string, partitions int, data string) string {
	return fmt.Sprintf("jetway.%s.%d.%s.%s %s", kind, bus.PartitionFor(tenant, session, partitions), tenant, session, data)
}

// takeAllWork is takeWork of every partition of l.
func takeAllWork(t *testing.T, ctx context.Context, js jetstream.JetStream, l bus.Layout) []string {
	t.Helper()
	var got []string
	for p := range l.Partitions {
		got = append(got, takeWork(t, ctx, js, l, p)...)
	}
	return got
}

// sameLines reports whether a and b hold the same lines, in any order.
func sameLines(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// takeWork takes, as a runner does, what partition p's work consumer has
// pending and acks each; it returns them as workLine does, in delivery
// order.
func takeWork(t *testing.T, ctx context.Context, js jetstream.JetStream, l bus.Layout, p int) []string {
	t.Helper()
	c, err := js.Consumer(ctx, l.Stream(p), bus.WorkConsumerName(p))
	if err != nil {
		t.Fatalf("work consumer of partition %d: %v", p, err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("work consumer of partition %d: %v", p, err)
	}
	if ci.NumPending == 0 {
		return nil
	}
	batch, err := c.Fetch(int(ci.NumPending), jetstream.FetchMaxWait(10*time.Second), jetstream.FetchPriorityGroup(bus.WorkGroup))
	if err != nil {
		t.Fatalf("fetch partition %d: %v", p, err)
	}
	var out []string
	for m := range batch.Messages() {
		out = append(out, m.Subject()+" "+string(m.Data()))
		if err := m.DoubleAck(ctx); err != nil {
			t.Errorf("ack %s: %v", m.Subject(), err)
		}
	}
	if err := batch.Error(); err != nil {
		t.Fatalf("fetch partition %d: %v", p, err)
	}
	return out
}

// oldWorkLine is a message of the old work queue
// (<p>.jetway.<kind>.<t>.<s>) as workLine writes it.
func oldWorkLine(t *testing.T, subject string, data []byte) string {
	t.Helper()
	tok := strings.Split(subject, ".")
	if len(tok) != 5 || tok[1] != "jetway" {
		t.Fatalf("%q is not a subject of the old work queue", subject)
	}
	return fmt.Sprintf("jetway.%s.%s.%s.%s %s", tok[2], tok[0], tok[3], tok[4], data)
}

// An unsharded deployment is upgraded with events in its work queue that
// an old runner finished (acked), held (delivered, not acked) or never
// got: the upgrade moves every unfinished one into its partition's shard,
// where its partition's consumer delivers it exactly once, in the order
// the old queue had; nothing finished comes again, not even a layover that
// fired before; a layover still pending fires once into its partition; the
// log keeps the old events as they were; and provisioning again changes
// nothing.
func TestProvision_moves_what_the_unsharded_work_queue_held_into_the_shards(t *testing.T) {
	const P, K = 4, 2
	old := startUnmapped(t)
	_, js := bustest.Connect(t, old.s.ClientURL())
	ctx := testContext(t)
	if err := bustest.MakeUnsharded(ctx, js, bus.ProvisionConfig{Partitions: P}); err != nil {
		t.Fatal(err)
	}
	work, err := js.Stream(ctx, bus.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	workMsgs := func() uint64 {
		info, err := work.Info(ctx)
		if err != nil {
			return 0
		}
		return info.State.Msgs
	}

	// A layover that fires, and that a runner will finish, before the upgrade.
	firedAt := time.Now().Add(time.Second).Truncate(time.Second).Add(time.Second)
	early := nats.NewMsg("jetway.schedules.acme.s0.l-0")
	early.Data = []byte("resumed")
	if _, err := js.PublishMsg(ctx, early, jetstream.WithScheduleAt(firedAt), jetstream.WithScheduleTarget("jetway.fired.acme.s0")); err != nil {
		t.Fatalf("early layover: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "the early layover fired into JETWAY_WORK", func() bool { return workMsgs() == 1 })
	// One still pending at the upgrade, on the fired subject without a
	// partition: the shards' source transform gives it one.
	if _, err := js.Publish(ctx, "jetway.schedules.acme.s3.l-1", []byte("late resume"),
		jetstream.WithScheduleAt(time.Now().Add(8*time.Second).Truncate(time.Second)), jetstream.WithScheduleTarget("jetway.fired.acme.s3")); err != nil {
		t.Fatalf("pending layover: %v", err)
	}
	var published []string // as the log has them: "jetway.<kind>.<t>.<s> data"
	for i := range 4 {
		for j := range 5 {
			kind := "events"
			if (i+j)%3 == 2 {
				kind = "jobevents"
			}
			subj := fmt.Sprintf("jetway.%s.acme.s%d", kind, j)
			data := fmt.Sprintf("s%d-%d", j, i)
			if _, err := js.Publish(ctx, subj, []byte(data)); err != nil {
				t.Fatalf("publish %s: %v", subj, err)
			}
			published = append(published, subj+" "+data)
		}
	}
	testutil.Eventually(t, 10*time.Second, "21 events in JETWAY_WORK", func() bool { return workMsgs() == 21 })
	var queue []string // the old queue's order
	for seq := uint64(1); seq <= 21; seq++ {
		m, err := work.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("JETWAY_WORK message %d: %v", seq, err)
		}
		queue = append(queue, oldWorkLine(t, m.Subject, m.Data))
	}

	// The old runners: in each partition, two finished, one held, the rest
	// never fetched.
	finished := map[string]bool{}
	for p := range P {
		c, err := js.Consumer(ctx, bus.StreamWork, bus.WorkConsumerName(p))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range queue {
			if part, _ := partitionOf(strings.Fields(l)[0]); part == p {
				n++
			}
		}
		for _, take := range []struct {
			n   int
			ack bool
		}{{min(2, n), true}, {min(1, max(n-2, 0)), false}} {
			if take.n == 0 {
				continue
			}
			batch, err := c.Fetch(take.n, jetstream.FetchMaxWait(5*time.Second), jetstream.FetchPriorityGroup(bus.WorkGroup))
			if err != nil {
				t.Fatalf("old runner, partition %d: %v", p, err)
			}
			got := 0
			for m := range batch.Messages() {
				got++
				if take.ack {
					finished[oldWorkLine(t, m.Subject(), m.Data())] = true
					if err := m.DoubleAck(ctx); err != nil {
						t.Fatalf("old runner ack: %v", err)
					}
				}
			}
			if got != take.n {
				t.Fatalf("old runner, partition %d: fetched %d of %d (%v)", p, got, take.n, batch.Error())
			}
		}
	}
	if !finished[workLine("events", "acme", "s0", P, "resumed")] {
		t.Fatalf("the fired layover was not among the finished events %v: the test's premise", finished)
	}
	testutil.Eventually(t, 10*time.Second, "the finished events out of JETWAY_WORK", func() bool {
		return workMsgs() == uint64(21-len(finished))
	})

	// The upgrade: the server restarted with the mapping, then provisioned.
	s := old.restartMapped(t, P)
	_, js = bustest.Connect(t, s.ClientURL())
	// A tenant publishing straight onto the bus between the restart and
	// provisioning: the mapping partitions its event, and the old log,
	// still taking jetway.events.>, stores it where no runner looks.
	if _, err := js.Publish(ctx, "jetway.events.acme.window", []byte("in the window")); err != nil {
		t.Fatalf("publish between the restart and provisioning: %v", err)
	}
	windowLine := workLine("events", "acme", "window", P, "in the window")
	var lines []string
	cfg := bus.ProvisionConfig{Shards: K, Progress: func(l string) { lines = append(lines, l) }}
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provision over the unsharded layout: %v\n%s", err, strings.Join(lines, "\n"))
	}
	t.Logf("provision said:\n%s", strings.Join(lines, "\n"))
	if _, err := js.Stream(ctx, bus.StreamWork); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the old %s is still there after the upgrade (%v)", bus.StreamWork, err)
	}
	l, err := bus.ReadLayout(ctx, js)
	if err != nil || l != (bus.Layout{Partitions: P, Shards: K}) {
		t.Fatalf("layout after the upgrade: %+v, %v", l, err)
	}

	newLine := workLine("events", "acme", "new", P, "new")
	ack, err := js.Publish(ctx, "jetway.events.acme.new", []byte("new"))
	if err != nil {
		t.Fatalf("publish after the upgrade: %v", err)
	}
	if want := l.Stream(bus.PartitionFor("acme", "new", P)); ack.Stream != want {
		t.Errorf("a new event was stored in %s, want its partition's shard %s", ack.Stream, want)
	}
	lateLine := workLine("events", "acme", "s3", P, "late resume")

	// Each partition's consumer delivers its unfinished events in the old
	// queue's order, then the pending layover and the new event once.
	unfinished := len(queue) - len(finished)
	testutil.Eventually(t, 30*time.Second, "the unfinished events, the late layover, the window's and the new event for the runners", func() bool {
		return bustest.WorkPending(ctx, js, l) >= unfinished+3
	})
	seen := map[string]int{}
	for p := range P {
		got := takeWork(t, ctx, js, l, p)
		var want, old []string
		for _, line := range queue {
			if part, _ := partitionOf(strings.Fields(line)[0]); part == p && !finished[line] {
				want = append(want, line)
			}
		}
		for _, line := range got {
			seen[line]++
			if part, err := partitionOf(strings.Fields(line)[0]); err != nil || part != p {
				t.Errorf("partition %d delivered %q", p, line)
			}
			if line != lateLine && line != newLine && line != windowLine {
				old = append(old, line)
			}
		}
		if strings.Join(old, "\n") != strings.Join(want, "\n") {
			t.Errorf("partition %d (%s) delivered\n%s\nwant, in the old queue's order\n%s", p, l.Stream(p), strings.Join(old, "\n"), strings.Join(want, "\n"))
		}
	}
	for line, n := range seen {
		if n != 1 {
			t.Errorf("%q delivered %d times", line, n)
		}
		if finished[line] {
			t.Errorf("%q was finished before the upgrade and delivered again", line)
		}
	}
	for _, line := range []string{lateLine, newLine, windowLine} {
		if seen[line] != 1 {
			t.Errorf("%q delivered %d times, want once", line, seen[line])
		}
	}
	if n := bustest.WorkPending(ctx, js, l); n != 0 {
		t.Errorf("%d more events for the runners after all were taken", n)
	}

	// The log keeps what it had, with the subjects it always had.
	evs, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := evs.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logged := map[string]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := evs.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("log message %d: %v", seq, err)
		}
		if n := len(strings.Split(m.Subject, ".")); n != 4 && string(m.Data) != "in the window" {
			t.Errorf("the log holds %q: %d tokens, want jetway.<kind>.<tenant>.<session>", m.Subject, n)
		}
		logged[m.Subject+" "+string(m.Data)] = true
	}
	for _, line := range append(published, "jetway.events.acme.s0 resumed", "jetway.events.acme.window in the window") {
		if !logged[line] {
			t.Errorf("the log lost %q", line)
		}
	}

	// Provisioning again changes nothing.
	configs := func() map[string]jetstream.StreamConfig {
		out := map[string]jetstream.StreamConfig{}
		for _, name := range []string{bus.WorkStream(0), bus.WorkStream(1), bus.StreamEvents} {
			st, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatalf("stream %s: %v", name, err)
			}
			out[name] = st.CachedInfo().Config
		}
		return out
	}
	before := configs()
	lines = nil
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provision again: %v", err)
	}
	if after := configs(); !reflect.DeepEqual(before, after) {
		t.Errorf("provisioning again changed the streams:\n%+v\nto\n%+v", before, after)
	}
	for _, line := range lines {
		if strings.Contains(line, bus.StreamWork+" ") || strings.Contains(line, "old") {
			t.Errorf("provisioning again upgraded something: %q", line)
		}
	}
	if n := bustest.WorkPending(ctx, js, l); n != 0 {
		t.Errorf("provisioning again queued %d events", n)
	}
}

// The old queue's events are in its P partitions; with another P and more
// than one shard they would land in shards without their partition's
// consumer. Provision refuses before changing anything, so the old layout
// goes on working; with one shard it moves them, each to the partition
// the new P gives its session.
func TestProvision_refuses_to_move_the_old_queue_into_shards_of_another_partition_count(t *testing.T) {
	const oldP, newP = 4, 8
	old := startUnmapped(t)
	_, js := bustest.Connect(t, old.s.ClientURL())
	ctx := testContext(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: bus.StreamEvents, Subjects: []string{bus.SubjectEvents}}); err != nil {
		t.Fatal(err)
	}
	work, source := bustest.UnshardedWork(bus.ProvisionConfig{Partitions: oldP}, "jetway-work-source-2")
	if _, err := js.CreatePushConsumer(ctx, bus.StreamEvents, source); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, work); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 3 {
		sess := fmt.Sprintf("s%d", i)
		if _, err := js.Publish(ctx, "jetway.events.acme."+sess, []byte("queued")); err != nil {
			t.Fatal(err)
		}
		want = append(want, workLine("events", "acme", sess, newP, "queued"))
	}
	queued := func() (uint64, int) {
		st, err := js.Stream(ctx, bus.StreamWork)
		if err != nil {
			return 0, 0
		}
		return st.CachedInfo().State.Msgs, len(st.CachedInfo().Config.Sources)
	}
	testutil.Eventually(t, 10*time.Second, "3 events in JETWAY_WORK", func() bool { n, _ := queued(); return n == 3 })

	s := old.restartMapped(t, newP)
	_, js = bustest.Connect(t, s.ClientURL())
	err := bus.Provision(ctx, js, bus.ProvisionConfig{Shards: 2})
	if err == nil || !strings.Contains(err.Error(), "in 4 partitions, the shards' in 8") {
		t.Fatalf("provision into 2 shards of 8 partitions over a queue of 4: %v; want a refusal naming both", err)
	}
	if n, sources := queued(); n != 3 || sources != 1 {
		t.Errorf("the refused upgrade left JETWAY_WORK with %d events and %d sources, want it as it was (3, 1)", n, sources)
	}
	if ev, err := js.Stream(ctx, bus.StreamEvents); err != nil || len(ev.CachedInfo().Config.Subjects) == 0 {
		t.Errorf("the refused upgrade took %s's subjects away (%v)", bus.StreamEvents, err)
	}

	if err := bus.Provision(ctx, js, bus.ProvisionConfig{}); err != nil {
		t.Fatalf("provision into one shard: %v", err)
	}
	l := bus.Layout{Partitions: newP, Shards: 1}
	testutil.Eventually(t, 10*time.Second, "the 3 events for the runners", func() bool { return bustest.WorkPending(ctx, js, l) >= 3 })
	if got := takeAllWork(t, ctx, js, l); !sameLines(got, want) {
		t.Errorf("the runners got\n%s\nwant, in the partitions of %d\n%s", strings.Join(got, "\n"), newP, strings.Join(want, "\n"))
	}
}
