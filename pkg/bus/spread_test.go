package bus_test

import (
	"encoding/json"
	"fmt"
	"maps"
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
	for _, name := range streams {
		testutil.EventuallyNil(t, 20*time.Second, name+" led by "+n0, func() error {
			switch nd := c.StreamLeader(name); {
			case nd == nil:
				return fmt.Errorf("no leader yet")
			case nd.Name() == n0:
				return nil
			}
			return stepDownTo(nc, name, n0)
		})
	}
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

// stepDownTo asks stream's leader to hand over to server, with the
// request type the server itself decodes.
func stepDownTo(nc *nats.Conn, stream, to string) error {
	req, err := json.Marshal(server.JSApiLeaderStepdownRequest{Placement: &server.Placement{Preferred: to}})
	if err != nil {
		return err
	}
	msg, err := nc.Request(fmt.Sprintf(server.JSApiStreamLeaderStepDownT, stream), req, 2*time.Second)
	if err != nil {
		return err
	}
	var resp server.JSApiStreamLeaderStepDownResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return err
	}
	if resp.Error != nil {
		return resp.Error
	}
	return fmt.Errorf("stepped down towards %s", to) // look again
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
