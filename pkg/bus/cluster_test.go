package bus_test

import (
	"context"
	"errors"
	"fmt"
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

// publishRetrying publishes with a message id, retrying for a bounded time:
// while a stream elects a new leader publishes fail, and the id makes a
// retry of one that did land harmless.
func publishRetrying(t *testing.T, js jetstream.JetStream, subj, id string, data []byte) {
	t.Helper()
	testutil.EventuallyNil(t, 20*time.Second, "publish "+id+" to be stored", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := js.Publish(ctx, subj, data, jetstream.WithMsgID(id))
		return err
	})
}

func TestCluster_keeps_every_message_when_a_node_stops_and_comes_back(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := bustest.StartCluster(t, 3)
	_, js := bustest.Connect(t, c.URLs()...)
	ctx := testContext(t)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Replicas: 3}); err != nil {
		t.Fatalf("provision R3: %v", err)
	}
	// Publishes land in the session's shard (one here), acked by its
	// leader; the log copies them from there.
	shard := bus.WorkStream(0)
	ev, err := js.Stream(ctx, shard)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if r := ev.CachedInfo().Config.Replicas; r != 3 {
		t.Fatalf("%s has %d replicas, want 3", shard, r)
	}

	const perPhase = 20
	n := 0
	publish := func() {
		for range perPhase {
			n++
			publishRetrying(t, js, "jetway.events.t1.s1", fmt.Sprintf("id-%d", n), fmt.Appendf(nil, "m%d", n))
		}
	}
	publish()

	var victim *bustest.Node
	testutil.Eventually(t, 10*time.Second, "a leader for "+shard, func() bool {
		victim = c.StreamLeader(shard)
		return victim != nil
	})
	stopped := time.Now()
	victim.Stop()
	publish()
	victim.Restart(t)
	c.WaitReady()
	publish()

	testutil.Eventually(t, 20*time.Second, victim.Name()+" current on "+shard, func() bool {
		s := victim.Server()
		return s != nil && s.JetStreamIsStreamCurrent(server.DEFAULT_GLOBAL_ACCOUNT, shard)
	})
	info, err := ev.Info(callContext(t))
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if info.State.Msgs != uint64(n) {
		t.Fatalf("%s holds %d messages, want %d", shard, info.State.Msgs, n)
	}
	for seq := uint64(1); seq <= uint64(n); seq++ {
		m, err := ev.GetMsg(callContext(t), seq)
		if err != nil {
			t.Fatalf("get %d: %v", seq, err)
		}
		if want := fmt.Sprintf("m%d", seq); string(m.Data) != want {
			t.Fatalf("message %d = %q, want %q (lost or duplicated)", seq, m.Data, want)
		}
	}
	log, err := js.Stream(callContext(t), bus.StreamEvents)
	if err != nil {
		t.Fatalf("log: %v", err)
	}
	// The log sources each shard through a durable R3 consumer, which
	// outlives the leader's node: sourcing goes on within a second or two
	// of it stopping. (Through the server's own ephemeral consumer it
	// waited for the fixed 10 s source health check and a backoff, 2–27 s;
	// the wait below still allows for that, as the deployment test does.)
	// Each call has a context of its own: the test's 30 s one ran out
	// under load before sourcing resumed, and every later check failed
	// with it.
	testutil.Eventually(t, 90*time.Second, fmt.Sprintf("%d messages sourced into %s", n, bus.StreamEvents), func() bool {
		info, err := log.Info(callContext(t))
		return err == nil && info.State.Msgs == uint64(n)
	})
	t.Logf("%s held all %d messages %s after the node stopped", bus.StreamEvents, n, time.Since(stopped).Round(time.Millisecond))
	if m, err := log.GetMsg(callContext(t), uint64(n)); err != nil || m.Subject != "jetway.events.t1.s1" || string(m.Data) != fmt.Sprintf("m%d", n) {
		t.Errorf("the log's last message: %v, %v; want m%d on jetway.events.t1.s1", m, err, n)
	}
}

func TestOpenBucket_waits_for_a_cluster_that_is_coming_back(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := bustest.StartCluster(t, 3)
	// Longer than OpenBucket's own 60 s patience: a cluster restarting
	// under load may take most of it.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, js := bustest.Connect(t, c.URLs()...)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Replicas: 3}); err != nil {
		t.Fatalf("provision R3: %v", err)
	}
	// The whole cluster down, as when every node restarts at once: until
	// it is back and has elected its leaders nothing answers.
	for _, nd := range c.Nodes {
		nd.Stop()
	}
	opened := make(chan error, 1)
	go func() {
		_, err := bus.OpenBucket(ctx, js, bus.BucketSessions)
		opened <- err
	}()
	select {
	case err := <-opened:
		t.Fatalf("OpenBucket returned with the cluster down (err %v); it should wait", err)
	case <-time.After(6 * time.Second): // past one request's own timeout
	}
	for _, nd := range c.Nodes {
		nd.Restart(t)
	}
	select {
	case err := <-opened:
		if err != nil {
			t.Fatalf("OpenBucket after the cluster came back: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("OpenBucket still waiting after the cluster came back")
	}
}

func TestOpenBucket_refuses_a_missing_bucket_at_once(t *testing.T) {
	srv := bustest.StartServer(t)
	_, js := bustest.Connect(t, srv.ClientURL())
	ctx := testContext(t)
	_, err := bus.OpenBucket(ctx, js, "no_such_bucket")
	if err == nil || !strings.Contains(err.Error(), "no_such_bucket") {
		t.Fatalf("OpenBucket(no_such_bucket) = %v, want an error naming the bucket", err)
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("OpenBucket(no_such_bucket) = %v, want ErrBucketNotFound", err)
	}
	// A missing bucket is an answer, not silence: it must not be retried
	// until the test's own deadline.
	if ctx.Err() != nil {
		t.Fatalf("OpenBucket waited out the context (%v) on a missing bucket", ctx.Err())
	}
}

// callContext bounds one request, independent of how long the test has run.
func callContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// With RouteVia every link between two nodes runs through the test's own
// proxies, gossip included: cutting the two proxies of each of a node's
// links (one per direction, as both ends dial) leaves it hearing nothing
// from the others while its sockets stay open, and mending them delivers
// what was held.
func TestCluster_a_node_whose_route_proxies_are_cut_hears_nothing_from_the_others_until_they_mend(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	via := map[[2]int]*testutil.Blackhole{}
	c := bustest.StartClusterWith(t, 3, bustest.ClusterConfig{RouteVia: func(from, to int, addr string) string {
		b := testutil.StartBlackhole(t, addr)
		via[[2]int{from, to}] = b
		return b.URL()
	}})
	if len(via) != 6 {
		t.Fatalf("RouteVia was asked for %d links, want 6 (each direction of 3 pairs)", len(via))
	}
	// A route a node dialed that is not one of its configured ones was
	// learned by gossip and dialed directly, around the proxies.
	aroundProxies := func() {
		t.Helper()
		for _, nd := range c.Nodes {
			rz, err := nd.Server().Routez(&server.RoutezOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rz.Routes {
				if r.DidSolicit && !r.IsConfigured {
					t.Errorf("%s dialed %s directly at %s:%d, a route learned by gossip", nd.Name(), r.RemoteName, r.IP, r.Port)
				}
			}
		}
	}
	aroundProxies()
	pub, _ := bustest.Connect(t, c.Nodes[0].ClientURL())
	var subs []*nats.Subscription
	for _, nd := range c.Nodes[1:] {
		nc, _ := bustest.Connect(t, nd.ClientURL())
		sub, err := nc.SubscribeSync("probe")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	// got reports whether sub receives payload within d, skipping others.
	got := func(sub *nats.Subscription, payload string, d time.Duration) bool {
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			m, err := sub.NextMsg(time.Until(deadline))
			if err == nil && string(m.Data) == payload {
				return true
			}
		}
		return false
	}
	// Until both subscriptions' interest has reached node 0.
	for i, sub := range subs {
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("node %d to hear node 0", i+1), func() bool {
			if err := pub.Publish("probe", []byte("warm")); err != nil {
				return false
			}
			return got(sub, "warm", 200*time.Millisecond)
		})
	}

	for link, b := range via {
		if link[0] == 2 || link[1] == 2 {
			b.Cut()
		}
	}
	if err := pub.Publish("probe", []byte("during the cut")); err != nil {
		t.Fatal(err)
	}
	if !got(subs[0], "during the cut", 5*time.Second) {
		t.Fatal("node 1, whose links to node 0 are whole, did not hear node 0 during node 2's cut")
	}
	// A bounded wait for something that must not come.
	if got(subs[1], "during the cut", time.Second) {
		t.Fatal("node 2 heard node 0 with its route proxies cut: a route goes around them")
	}
	for _, b := range via {
		b.Mend()
	}
	if !got(subs[1], "during the cut", 10*time.Second) {
		t.Fatal("node 2 did not hear what node 0 sent during the cut once its links mended")
	}
	aroundProxies()
}
