// Package bustest starts real in-process nats-servers with JetStream for
// tests: a single server, or a small cluster whose nodes can be stopped and
// restarted to exercise failover.
package bustest

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// ReadyTimeout bounds every wait in this package: server start, cluster
// formation, a restarted node catching up.
const ReadyTimeout = 30 * time.Second

// StartServer starts a single JetStream server storing in t.TempDir() and
// shuts it down when the test ends. Its partition mapping has
// bus.DefaultPartitions.
func StartServer(t testing.TB) *server.Server {
	t.Helper()
	return StartServerWith(t, 0)
}

// StartServerWith is StartServer with P partitions in its mapping (0:
// bus.DefaultPartitions): the P a test provisions with must be the
// server's.
func StartServerWith(t testing.TB, partitions int) *server.Server {
	t.Helper()
	s, err := bus.StartEmbedded(bus.EmbeddedConfig{
		StoreDir:   t.TempDir(),
		ServerName: "test",
		Partitions: partitions,
	})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(func() { bus.StopEmbedded(s) })
	return s
}

// Connect opens a connection to urls (comma-separated or several) with the
// same options as production and returns it with its JetStream handle; it is
// closed when the test ends.
func Connect(t testing.TB, urls ...string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	var list []string
	for _, u := range urls {
		list = append(list, strings.Split(u, ",")...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	nc, err := bus.Connect(ctx, bus.ConnConfig{
		URLs:          list,
		Name:          t.Name(),
		ReconnectWait: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

// StartProvisioned starts a single server, connects to it and provisions
// every jetway stream, bucket and work consumer with cfg (zero: defaults).
// Most service tests start here.
func StartProvisioned(t testing.TB, cfg bus.ProvisionConfig) (*server.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	s := StartServerWith(t, cfg.Partitions)
	nc, js := Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provision: %v", err)
	}
	return s, nc, js
}

// Cluster is an in-process JetStream cluster on loopback.
type Cluster struct {
	t     testing.TB
	Nodes []*Node
}

// Node is one server of a Cluster. Its ports and store stay the same across
// Stop and Restart, so clients and peers find it again.
type Node struct {
	cfg bus.EmbeddedConfig

	mu  sync.Mutex
	srv *server.Server
}

// StartCluster starts n routed JetStream servers on free loopback ports and
// waits until they have elected a meta leader and every node is current.
// All nodes are shut down when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWith(t, n, ClusterConfig{})
}

// ClusterConfig shapes a test cluster's links.
type ClusterConfig struct {
	// RouteVia, if set, gives the nats://host:port node from dials to
	// reach node to's cluster listener at addr (host:port), so a test can
	// put a proxy of its own on every link between two nodes — one per
	// direction, as both ends dial — and cut it to partition a node.
	// Routes learned by gossip would dial a listener directly, around
	// the proxies: with RouteVia every node advertises refusingAddr
	// instead, and the server tries such a route once (a dial that
	// succeeds, even into a listener that hangs up, it would retry).
	RouteVia func(from, to int, addr string) string
	// Partitions is P in every node's partition mapping (0:
	// bus.DefaultPartitions).
	Partitions int
}

// refusingAddr is where nothing listens: port 1 is privileged and no
// service of these tests binds it, so a dial there is refused at once.
const refusingAddr = "127.0.0.1:1"

// StartClusterWith is StartCluster with cfg.
func StartClusterWith(t testing.TB, n int, cfg ClusterConfig) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("StartCluster: need at least one node, got %d", n)
	}
	// A port reserved by freePorts is free again until its server binds
	// it, and another test process can take it meanwhile: then the
	// cluster starts again on other ports.
	for attempt := 1; ; attempt++ {
		c, err := startCluster(t, n, cfg)
		if err == nil {
			c.WaitReady()
			return c
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("start cluster: %v", err)
		}
		t.Logf("start cluster: %v; again on other ports", err)
	}
}

// startCluster starts n nodes on ports freePorts reserves; on an error
// the nodes started are stopped.
func startCluster(t testing.TB, n int, cfg ClusterConfig) (*Cluster, error) {
	t.Helper()
	ports := freePorts(t, 2*n)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[n+i]) }
	routes := func(from int) []string {
		var out []string
		for to := range n {
			switch {
			case cfg.RouteVia == nil:
				out = append(out, "nats://"+addr(to))
			case to != from:
				out = append(out, cfg.RouteVia(from, to, addr(to)))
			}
		}
		return out
	}
	advertise := ""
	if cfg.RouteVia != nil {
		advertise = refusingAddr
	}
	dir := t.TempDir()
	c := &Cluster{t: t}
	for i := range n {
		c.Nodes = append(c.Nodes, &Node{cfg: bus.EmbeddedConfig{
			StoreDir:         filepath.Join(dir, fmt.Sprintf("n%d", i)),
			Host:             "127.0.0.1",
			Port:             ports[i],
			ServerName:       fmt.Sprintf("n%d", i),
			ClusterName:      "jetway-test",
			ClusterPort:      ports[n+i],
			Routes:           routes(i),
			ClusterAdvertise: advertise,
			ReadyTimeout:     ReadyTimeout,
			Partitions:       cfg.Partitions,
		}})
	}
	t.Cleanup(func() {
		for _, nd := range c.Nodes {
			nd.Stop()
		}
	})
	// Start them all before waiting on any: a node cannot become a
	// JetStream peer until it sees the others.
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, nd := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = nd.start()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			for _, nd := range c.Nodes {
				nd.Stop()
			}
			return nil, err
		}
	}
	return c, nil
}

// URLs returns every node's client URL, for a connection that fails over.
func (c *Cluster) URLs() []string {
	var urls []string
	for _, nd := range c.Nodes {
		urls = append(urls, nd.ClientURL())
	}
	return urls
}

// WaitReady waits until the running nodes have a JetStream meta leader and
// each of them is current with it; it fails the test after ReadyTimeout.
func (c *Cluster) WaitReady() {
	c.t.Helper()
	deadline := time.Now().Add(ReadyTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		leader, current, running := false, 0, 0
		for _, nd := range c.Nodes {
			s := nd.Server()
			if s == nil {
				continue
			}
			running++
			if s.JetStreamIsLeader() {
				leader = true
			}
			if s.JetStreamIsCurrent() {
				current++
			}
		}
		if leader && current == running {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("cluster not ready after %s: meta leader %v, %d of %d running nodes current",
				ReadyTimeout, leader, current, running)
		}
		<-tick.C
	}
}

// StreamLeader returns the node leading stream in the global account, or
// nil if there is none right now.
func (c *Cluster) StreamLeader(stream string) *Node {
	for _, nd := range c.Nodes {
		if s := nd.Server(); s != nil && s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return nd
		}
	}
	return nil
}

// Name is the node's server name.
func (nd *Node) Name() string { return nd.cfg.ServerName }

// ClientURL is the node's client URL; it stays valid across restarts.
func (nd *Node) ClientURL() string {
	return fmt.Sprintf("nats://%s:%d", nd.cfg.Host, nd.cfg.Port)
}

// Server returns the running server, or nil while the node is stopped.
func (nd *Node) Server() *server.Server {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.srv
}

// Stop shuts the node down (flushing its store). Stopping a stopped node
// does nothing.
func (nd *Node) Stop() {
	nd.mu.Lock()
	s := nd.srv
	nd.srv = nil
	nd.mu.Unlock()
	bus.StopEmbedded(s)
}

// Restart starts a stopped node again with the same name, ports and store.
// Call Cluster.WaitReady afterwards to wait for it to catch up.
func (nd *Node) Restart(t testing.TB) {
	t.Helper()
	if err := nd.start(); err != nil {
		t.Fatalf("restart %s: %v", nd.Name(), err)
	}
}

func (nd *Node) start() error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.srv != nil {
		return fmt.Errorf("node %s is already running", nd.cfg.ServerName)
	}
	s, err := bus.StartEmbedded(nd.cfg)
	if err != nil {
		return err
	}
	nd.srv = s
	return nil
}

// freePorts reserves n distinct loopback ports by listening on them all at
// once, then releases them for the servers to take.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close() // only held to keep the port; the test binds it next
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("reserve port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// StartBucket starts a single server and creates one KV bucket with cfg on
// it, for tests of code that reads and writes one bucket; both go when the
// test ends.
func StartBucket(t testing.TB, cfg jetstream.KeyValueConfig) jetstream.KeyValue {
	t.Helper()
	s := StartServer(t)
	_, js := Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, cfg)
	if err != nil {
		t.Fatalf("create bucket %s: %v", cfg.Bucket, err)
	}
	return kv
}

// WaitLogged waits until JETWAY_EVENTS has copied everything the work
// shards ever stored: an event is acknowledged to its publisher by its
// shard, and reaches the log of record a moment later. It counts, so it
// is meant for a deployment the test made (every event of the log came
// through the shards).
func WaitLogged(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	l, err := bus.ReadLayout(ctx, js)
	if err != nil {
		t.Fatalf("wait for the log: %v", err)
	}
	for {
		var stored uint64
		for k := range l.Shards {
			st, err := js.Stream(ctx, bus.WorkStream(k))
			if err != nil {
				t.Fatalf("wait for the log: %v", err)
			}
			stored += st.CachedInfo().State.LastSeq
		}
		ev, err := js.Stream(ctx, bus.StreamEvents)
		if err != nil {
			t.Fatalf("wait for the log: %v", err)
		}
		logged := ev.CachedInfo().State.LastSeq
		if logged >= stored {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the log holds %d of the %d events the shards stored after %s", logged, stored, ReadyTimeout)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// WorkPending is how many events the work consumers of l have not had
// acknowledged: not yet delivered, or delivered and not acked (-1 when a
// consumer cannot be read).
func WorkPending(ctx context.Context, js jetstream.JetStream, l bus.Layout) int {
	n := 0
	for p := range l.Partitions {
		c, err := js.Consumer(ctx, l.Stream(p), bus.WorkConsumerName(p))
		if err != nil {
			return -1
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return -1
		}
		n += int(ci.NumPending) + ci.NumAckPending
	}
	return n
}
