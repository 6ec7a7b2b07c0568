package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Replicas: 3, Partitions: 2}); err != nil {
		t.Fatalf("provision R3: %v", err)
	}
	ev, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if r := ev.CachedInfo().Config.Replicas; r != 3 {
		t.Fatalf("%s has %d replicas, want 3", bus.StreamEvents, r)
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
	testutil.Eventually(t, 10*time.Second, "a leader for "+bus.StreamEvents, func() bool {
		victim = c.StreamLeader(bus.StreamEvents)
		return victim != nil
	})
	stopped := time.Now()
	victim.Stop()
	publish()
	victim.Restart(t)
	c.WaitReady()
	publish()

	testutil.Eventually(t, 20*time.Second, victim.Name()+" current on "+bus.StreamEvents, func() bool {
		s := victim.Server()
		return s != nil && s.JetStreamIsStreamCurrent(server.DEFAULT_GLOBAL_ACCOUNT, bus.StreamEvents)
	})
	info, err := ev.Info(callContext(t))
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if info.State.Msgs != uint64(n) {
		t.Fatalf("%s holds %d messages, want %d", bus.StreamEvents, info.State.Msgs, n)
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
	work, err := js.Stream(callContext(t), bus.StreamWork)
	if err != nil {
		t.Fatalf("work stream: %v", err)
	}
	// JETWAY_WORK sources through a durable R3 consumer on JETWAY_EVENTS,
	// which outlives the leader's node: sourcing goes on 0.35–2.3 s after
	// it stopped here. (Through the server's own ephemeral consumer it
	// waited for the fixed 10 s source health check and a backoff, 2–27 s;
	// the wait below still allows for that, as the deployment test does.)
	// Each call has a context of its own: the test's 30 s one ran out
	// under load before sourcing resumed, and every later check failed
	// with it.
	testutil.Eventually(t, 90*time.Second, fmt.Sprintf("%d messages sourced into %s", n, bus.StreamWork), func() bool {
		info, err := work.Info(callContext(t))
		return err == nil && info.State.Msgs == uint64(n)
	})
	t.Logf("%s held all %d messages %s after the node stopped", bus.StreamWork, n, time.Since(stopped).Round(time.Millisecond))
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
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Replicas: 3, Partitions: 2}); err != nil {
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
