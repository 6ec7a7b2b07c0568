package deploytest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
)

// TestFailover_killing_a_node_while_publishing_loses_no_event kills the
// leader of the R3 work shard the events go to (SIGKILL, a crash) while
// the dispatcher user publishes, and checks every event is stored in the
// shard and reaches JETWAY_EVENTS, the log sourced from it; then the node
// comes back and catches up.
//
// The shards have no dedupe window (a stream-wide one let one tenant
// suppress another's events, docs/SECURITY.md), so a retry of a publish
// that was stored after all is stored again: the shard and the log hold
// every event at least once, and the runner hands each CE id to the model
// once per session.
func TestFailover_killing_a_node_while_publishing_loses_no_event(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills a three-node cluster; skipped with -short")
	}
	const total = 300
	d := render(t, renderOptions{})
	d.startCluster()
	d.provision()
	admin := d.connect("admin")
	pub := d.connect("dispatcher")

	// Seven sessions, all in shard 0: its leader is the node to kill.
	shard := bus.WorkStream(0)
	var sessions []string
	for i := 0; len(sessions) < 7; i++ {
		s := "s" + strconv.Itoa(i)
		if bus.ShardOf(bus.PartitionFor("acme", s, deployPartitions), deployShards) == 0 {
			sessions = append(sessions, s)
		}
	}

	// ctx bounds the publishing; each read after it has its own bound
	// (stepCtx), since the log may take the server's longest source retry
	// backoff to copy on, and a shared deadline would run out first.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader := func() *node {
		s, err := admin.js.Stream(ctx, shard)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range d.nodes {
			if s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader == n.name {
				return n
			}
		}
		t.Fatalf("no leader for %s among the nodes", shard)
		return nil
	}
	victim := leader()

	var acked atomic.Int64
	done := make(chan error, 1)
	go func() {
		for i := range total {
			if err := publishRetrying(ctx, pub.js, sessions[i%len(sessions)], i); err != nil {
				done <- err
				return
			}
			acked.Add(1)
		}
		done <- nil
	}()
	testutil.Eventually(t, 30*time.Second, "a third of the events acked", func() bool { return acked.Load() >= total/3 })
	d.kill(victim)
	t.Logf("killed %s (%s leader) after %d acks", victim.name, shard, acked.Load())
	killed := time.Now()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("all %d events acked %v after the kill", total, time.Since(killed).Round(time.Millisecond))

	count := func(stream string) uint64 {
		sctx, scancel := stepCtx(t)
		defer scancel()
		s, err := admin.js.Stream(sctx, stream)
		if err != nil {
			return 0 // a stream without its leader yet answers nothing
		}
		return s.CachedInfo().State.Msgs
	}
	// The shard holds every event while the node is still down: every
	// one of the ids, none missing. Nothing takes them out (no runner
	// acks them; the shard keeps an event until its runner did).
	var got uint64
	testutil.Eventually(t, 90*time.Second, fmt.Sprintf("%s holds all %d events", shard, total), func() bool {
		got = count(shard)
		return got >= total
	})
	ids := distinctIDs(t, admin, shard, got)
	if len(ids) != total {
		t.Fatalf("%s holds %d messages with %d distinct ids, want all %d ids", shard, got, len(ids), total)
	}
	t.Logf("%s holds %d events, %d stored twice by a retry (%v after the kill)", shard, got, got-total, time.Since(killed).Round(time.Millisecond))

	// The killed node comes back and catches up from its peers.
	d.start(victim)
	d.waitHTTP(victim, "/healthz")

	// The log sources the shard through a durable R3 consumer, which
	// goes on from the shard's new leader (0.13-2.1 s measured,
	// docs/BENCHMARKS.md); it is counted after the node is back, with a
	// long bound: late is a latency finding (docs/OPERATIONS.md), missing
	// would be loss. The bound outlasts the server's longest wait between
	// two tries of a source (two minutes), which a loaded machine whose
	// tries failed again and again reaches.
	stored := got
	testutil.EventuallyNil(t, 150*time.Second, fmt.Sprintf("%s holds exactly the shard's %d events", bus.StreamEvents, stored), func() error {
		if got = count(bus.StreamEvents); got < stored {
			return fmt.Errorf("%s holds %d; its source: %s", bus.StreamEvents, got, logSource(t, admin))
		}
		return nil
	})
	if got != stored {
		t.Errorf("%s holds %d messages, the shard stored %d: the log copied some twice", bus.StreamEvents, got, stored)
	}
	if ids := distinctIDs(t, admin, bus.StreamEvents, got); len(ids) != total {
		t.Fatalf("%s holds %d messages with %d distinct ids, want all %d ids", bus.StreamEvents, got, len(ids), total)
	}
	t.Logf("%s holds %d events (%v after the kill)", bus.StreamEvents, got, time.Since(killed).Round(time.Millisecond))
	testutil.Eventually(t, 30*time.Second, victim.name+" current again", func() bool {
		sctx, scancel := stepCtx(t)
		defer scancel()
		s, err := admin.js.Stream(sctx, shard)
		if err != nil || s.CachedInfo().Cluster == nil {
			return false
		}
		cl := s.CachedInfo().Cluster
		if cl.Leader == victim.name {
			return true
		}
		for _, p := range cl.Replicas {
			if p.Name == victim.name {
				return p.Current && !p.Offline
			}
		}
		return false
	})
}

// distinctIDs reads the first n messages of stream, one get by sequence
// each (answered by the stream's leader, as its info is, while a node is
// down), and returns their distinct Nats-Msg-Id values.
func distinctIDs(t *testing.T, admin *client, stream string, n uint64) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for seq := uint64(1); seq <= n; seq++ {
		var m *jetstream.RawStreamMsg
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("message %d of %s", seq, stream), func() bool {
			ctx, cancel := stepCtx(t)
			defer cancel()
			s, err := admin.js.Stream(ctx, stream)
			if err != nil {
				return false
			}
			m, err = s.GetMsg(ctx, seq)
			return err == nil
		})
		ids[m.Header.Get(nats.MsgIdHdr)] = true
	}
	return ids
}

// stepCtx bounds one request of a test that waits longer than any one
// request should.
func stepCtx(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), 10*time.Second)
}

// logSource describes the log's source consumer on shard 0 as its
// shard's leader reports it, for a failure to say where the copying
// stood.
func logSource(t *testing.T, admin *client) string {
	ctx, cancel := stepCtx(t)
	defer cancel()
	c, err := admin.js.Consumer(ctx, bus.WorkStream(0), bus.EventsSourceConsumer)
	if err != nil {
		return fmt.Sprintf("consumer %s on %s: %v", bus.EventsSourceConsumer, bus.WorkStream(0), err)
	}
	i := c.CachedInfo()
	leader := ""
	if i.Cluster != nil {
		leader = i.Cluster.Leader
	}
	return fmt.Sprintf("%s on %s led by %q, %d delivered, %d pending, %d ack pending, push bound %v", i.Name, bus.WorkStream(0), leader, i.Delivered.Stream, i.NumPending, i.NumAckPending, i.PushBound)
}

// publishRetrying publishes event i into acme's session until the stream
// acknowledges it, with the same Nats-Msg-Id (its CE id) each time, as a
// retrying publisher does.
func publishRetrying(ctx context.Context, js jetstream.JetStream, session string, i int) error {
	msg := &nats.Msg{
		Subject: "jetway.events.acme." + session,
		Header:  nats.Header{},
		Data:    []byte(`{"text":"event ` + strconv.Itoa(i) + `"}`),
	}
	id := "failover-" + strconv.Itoa(i)
	var last error
	for attempt := 0; attempt < 100; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.PublishMsg(actx, msg, jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			return nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(100 * time.Millisecond): // back off before the next try
		case <-ctx.Done():
		}
	}
	return errors.Join(fmt.Errorf("event %d never acknowledged", i), last)
}
