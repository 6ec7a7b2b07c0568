package bus_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// The server's own monitoring data (/jsz, on each node) is the judge: each
// node reports the streams it leads, and what they hold.
func TestSpreadLeaders_gives_each_node_one_of_three_streams_all_led_by_one(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := bustest.StartCluster(t, 3)
	nc, js := bustest.Connect(t, c.URLs()...)
	streams := []string{"SPREAD_A", "SPREAD_B", "SPREAD_C"}
	for _, name := range streams {
		// A cluster just formed may not count every peer as online yet.
		testutil.EventuallyNil(t, 20*time.Second, "stream "+name+" created", func() error {
			_, err := js.CreateStream(callContext(t), jetstream.StreamConfig{
				Name:     name,
				Subjects: []string{"spread." + strings.ToLower(name) + ".>"},
				Storage:  jetstream.FileStorage,
				Replicas: 3,
			})
			return err
		})
	}
	// Every leader on n0 first, with the server's own request type.
	n0 := c.Nodes[0].Name()
	leadAllFrom(t, c, nc, n0, streams...)
	if got := ledBy(t, c); !slices.Equal(got[n0], streams) {
		t.Fatalf("before: jsz says %s leads %v (all: %v), want all of %v", n0, got[n0], got, streams)
	}

	start := time.Now()
	moved, err := bus.SpreadLeaders(testContext(t), js, streams)
	if err != nil {
		t.Fatalf("SpreadLeaders: %v", err)
	}
	t.Logf("SpreadLeaders moved %d leaders in %s", moved, time.Since(start).Round(time.Millisecond))
	if moved < 2 {
		t.Fatalf("SpreadLeaders moved %d leaders, want at least 2 off %s", moved, n0)
	}
	led := ledBy(t, c)
	for _, nd := range c.Nodes {
		if len(led[nd.Name()]) != 1 {
			t.Fatalf("after: jsz says %s leads %v (all: %v), want exactly one stream each", nd.Name(), led[nd.Name()], led)
		}
	}

	// The load follows: each node's leader holds a third of what is sent.
	const perStream = 300
	for _, name := range streams {
		subj := "spread." + strings.ToLower(name) + ".m"
		for i := range perStream {
			if _, err := js.Publish(callContext(t), subj, fmt.Appendf(nil, "%d", i)); err != nil {
				t.Fatalf("publish %d to %s: %v", i, name, err)
			}
		}
	}
	for _, nd := range c.Nodes {
		var held uint64
		for _, sd := range jszStreams(t, nd, true) {
			held += sd.State.Msgs
		}
		if held != perStream {
			t.Errorf("jsz of %s: the streams it leads hold %d messages, want %d of %d", nd.Name(), held, perStream, perStream*len(streams))
		}
	}

	since := leaderSince(t, c)
	moved, err = bus.SpreadLeaders(testContext(t), js, streams)
	if err != nil || moved != 0 {
		t.Fatalf("SpreadLeaders again = %d, %v; want 0, nil", moved, err)
	}
	if after := leaderSince(t, c); !maps.Equal(since, after) {
		t.Fatalf("a second SpreadLeaders changed leaders: before %v, after %v", since, after)
	}
}

func TestSpreadLeaders_has_nothing_to_move_on_a_single_server(t *testing.T) {
	srv := bustest.StartServer(t)
	_, js := bustest.Connect(t, srv.ClientURL())
	for _, name := range []string{"ONE_A", "ONE_B"} {
		_, err := js.CreateStream(callContext(t), jetstream.StreamConfig{Name: name, Subjects: []string{"one." + name}})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	moved, err := bus.SpreadLeaders(testContext(t), js, []string{"ONE_A", "ONE_B"})
	if err != nil || moved != 0 {
		t.Fatalf("SpreadLeaders on one server = %d, %v; want 0, nil", moved, err)
	}
	_, err = bus.SpreadLeaders(testContext(t), js, []string{"ONE_A", "NO_SUCH"})
	if err == nil || !strings.Contains(err.Error(), "NO_SUCH") {
		t.Fatalf("SpreadLeaders with a missing stream = %v, want an error naming it", err)
	}
}

// leadAllFrom moves the leaders of streams to node, as a fault can leave
// them: nats-server moves a leader away from a node that stops, never back.
func leadAllFrom(t *testing.T, c *bustest.Cluster, nc *nats.Conn, node string, streams ...string) {
	t.Helper()
	for _, name := range streams {
		testutil.EventuallyNil(t, 20*time.Second, name+" led by "+node, func() error {
			switch nd := c.StreamLeader(name); {
			case nd == nil:
				return fmt.Errorf("no leader yet")
			case nd.Name() == node:
				return nil
			}
			return bustest.StepDownTo(nc, name, node)
		})
	}
}

// jszStreams is what nd's /jsz reports of the global account's streams:
// only those it leads, with leaderOnly.
func jszStreams(t *testing.T, nd *bustest.Node, leaderOnly bool) []server.StreamDetail {
	t.Helper()
	jsz, err := nd.Server().Jsz(&server.JSzOptions{Accounts: true, Streams: true, StreamLeaderOnly: leaderOnly})
	if err != nil {
		t.Fatalf("jsz of %s: %v", nd.Name(), err)
	}
	for _, ad := range jsz.AccountDetails {
		if ad.Id == server.DEFAULT_GLOBAL_ACCOUNT {
			return ad.Streams
		}
	}
	t.Fatalf("jsz of %s: no account %s", nd.Name(), server.DEFAULT_GLOBAL_ACCOUNT)
	return nil
}

// ledBy maps each node's name to the streams its /jsz says it leads,
// sorted, once every node's /jsz names that node as their leader
// (followers learn of a new leader a moment after it is elected).
func ledBy(t *testing.T, c *bustest.Cluster) map[string][]string {
	t.Helper()
	var led map[string][]string
	testutil.EventuallyNil(t, 10*time.Second, "every node's jsz to agree on the leaders", func() error {
		led = map[string][]string{}
		for _, nd := range c.Nodes {
			for _, sd := range jszStreams(t, nd, true) {
				led[nd.Name()] = append(led[nd.Name()], sd.Name)
			}
			slices.Sort(led[nd.Name()])
		}
		for _, nd := range c.Nodes {
			for _, sd := range jszStreams(t, nd, false) {
				if sd.Cluster == nil {
					return fmt.Errorf("jsz of %s: %s has no cluster info", nd.Name(), sd.Name)
				}
				if l := sd.Cluster.Leader; !slices.Contains(led[l], sd.Name) {
					return fmt.Errorf("jsz of %s: %s led by %q, which does not say so (%v)", nd.Name(), sd.Name, l, led)
				}
			}
		}
		return nil
	})
	return led
}

// leaderSince is when each stream's leader was elected, as its leader's
// /jsz reports it.
func leaderSince(t *testing.T, c *bustest.Cluster) map[string]string {
	t.Helper()
	since := map[string]string{}
	for _, nd := range c.Nodes {
		for _, sd := range jszStreams(t, nd, true) {
			if sd.Cluster == nil || sd.Cluster.LeaderSince == nil {
				t.Fatalf("jsz of %s: %s has no leader_since", nd.Name(), sd.Name)
			}
			since[sd.Name] = nd.Name() + "@" + sd.Cluster.LeaderSince.Format(time.RFC3339Nano)
		}
	}
	return since
}

// After a fault a node can lead every shard (nats-server never moves a
// leader back); KeepSpread, running beside the cluster, spreads them again
// without anyone provisioning.
func TestKeepSpread_spreads_leaders_again_after_one_node_took_them_all(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	const P, K = 6, 3
	c := bustest.StartClusterWith(t, 3, bustest.ClusterConfig{Partitions: P})
	nc, js := bustest.Connect(t, c.URLs()...)
	if err := bus.Provision(testContext(t), js, bus.ProvisionConfig{Replicas: 3, Shards: K}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	groups := bus.LeaderGroups(bus.Layout{Partitions: P, Shards: K})
	for _, g := range groups {
		leadAllFrom(t, c, nc, c.Nodes[0].Name(), g...)
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	var said atomic.Int64
	go func() {
		defer close(done)
		bus.KeepSpread(ctx, js, groups, 100*time.Millisecond, func(line string) {
			said.Add(1)
			t.Log(line)
		})
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("KeepSpread did not return 30 s after its context ended")
		}
	}()
	testutil.EventuallyNil(t, time.Minute, "every node leading one shard and one or two busy streams", func() error {
		led := ledBy(t, c)
		for _, nd := range c.Nodes {
			shards, busy := 0, 0
			for _, s := range led[nd.Name()] {
				switch {
				case slices.Contains(groups[0], s):
					shards++
				case slices.Contains(groups[1], s):
					busy++
				}
			}
			if shards != 1 || busy < 1 || busy > 2 {
				return fmt.Errorf("%s leads %d shards and %d busy streams (all: %v)", nd.Name(), shards, busy, led)
			}
		}
		return nil
	})
	if said.Load() == 0 {
		t.Error("KeepSpread moved leaders without saying so")
	}
}
