// Command provision creates or updates jetway's streams, buckets and work
// consumers on a NATS deployment, once, and exits; with -keep-spread it
// then stays, spreading the streams' leaders over the nodes again after
// faults. With -spread-only it provisions nothing and only keeps the
// leaders spread, as the spreader user, whose rights are just that
// (stream info and leader step-down on the streams it spreads).
//
// It exists so that provisioning runs with the admin user while the
// long-running services keep users that cannot create, change or delete
// streams (deploy/nats/accounts.conf). `make cluster` runs it before the
// services start; Kubernetes runs it as a Job, compose as a one-shot service.
//
//	NATS_URL=tls://127.0.0.1:4222 NATS_USER=admin NATS_PASSWORD=… NATS_CA=ca.pem \
//	    go run ./deploy/provision -replicas 3 -shards 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// DefaultShards is -shards' default: the deployments here run three
// nodes, and each shard has one leader, which provisioning spreads over
// the nodes, so three shards put one leader on each node and every node
// takes a share of the event path (one shard would put all of it on one
// node; more than the nodes gives a node two shards to lead and gains
// nothing until nodes are added). With 16 partitions the shards carry 6,
// 5 and 5.
const DefaultShards = 3

func main() {
	env := func(key, def string) string {
		if v := os.Getenv(key); v != "" {
			return v
		}
		return def
	}
	var (
		conn    bus.ConnConfig
		urls    string
		pcfg    bus.ProvisionConfig
		timeout time.Duration
		keep    time.Duration
		only    bool
	)
	flag.StringVar(&urls, "nats", env("NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL(s), comma-separated (env NATS_URL)")
	flag.StringVar(&conn.User, "nats-user", env("NATS_USER", ""), "NATS user with stream rights, e.g. admin (env NATS_USER)")
	flag.StringVar(&conn.Password, "nats-password", env("NATS_PASSWORD", ""), "NATS password (env NATS_PASSWORD)")
	flag.StringVar(&conn.CredsFile, "nats-creds", env("NATS_CREDS", ""), "NATS credentials file (env NATS_CREDS)")
	flag.StringVar(&conn.TLSCAFile, "nats-ca", env("NATS_CA", ""), "CA file to verify the NATS server (env NATS_CA)")
	flag.StringVar(&conn.TLSCertFile, "nats-cert", env("NATS_CERT", ""), "client certificate for mTLS (env NATS_CERT)")
	flag.StringVar(&conn.TLSKeyFile, "nats-key", env("NATS_KEY", ""), "client key for mTLS (env NATS_KEY)")
	flag.IntVar(&pcfg.Replicas, "replicas", 3, "replicas of every stream, bucket and consumer")
	flag.IntVar(&pcfg.Partitions, "partitions", 0, "work partitions P; the servers decide it (the JETWAY account's mappings, bus.MappingsConf), "+
		"so 0 takes theirs and any other value must equal it: provisioning refuses a P the servers do not map")
	flag.IntVar(&pcfg.Shards, "shards", DefaultShards, "work shards K, at most P (partition p in shard p mod K); "+
		"change only with the work shards drained, and name the shards in deploy/nats/accounts.conf's permissions")
	flag.DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long (the cluster may still be electing its leader)")
	flag.DurationVar(&keep, "keep-spread", 0, "after provisioning, stay and spread the shards' and the busy streams' leaders over the nodes again this often "+
		"(a node that restarts takes none back by itself); 0 exits once provisioned")
	flag.BoolVar(&only, "spread-only", false, "provision nothing: read the layout and keep the leaders spread (with -keep-spread; once and exit without), "+
		"as the spreader user, whose rights are stream info and leader step-down on the streams it spreads (deploy/nats/accounts.conf)")
	flag.Parse()
	if keep != 0 && keep < time.Second {
		fmt.Fprintf(os.Stderr, "provision: -keep-spread %s: give 0 (provision and exit) or an interval of 1s or more\n", keep)
		os.Exit(2)
	}
	conn.URLs = strings.Split(urls, ",")
	conn.Name = "jetway-provision"
	pcfg.Progress = func(line string) { fmt.Println(line) }

	sig, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(sig, timeout)
	defer cancel()
	if only {
		// The spreader may subscribe to its own inbox only.
		conn.Name, conn.InboxPrefix = "jetway-spreader", bus.ServiceInbox("spreader")
		if err := spreadOnly(ctx, sig, conn, keep); err != nil {
			fmt.Fprintln(os.Stderr, "provision:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, sig, conn, pcfg, keep); err != nil {
		fmt.Fprintln(os.Stderr, "provision:", err)
		os.Exit(1)
	}
}

// run connects and provisions, retrying while the cluster is not ready
// (no JetStream meta leader yet, or a stream still being placed): a fresh
// cluster takes a few seconds after its servers accept clients.
//
// With keep above zero it then spreads leaders every keep until life
// ends (bus.KeepSpread).
func run(ctx, life context.Context, conn bus.ConnConfig, pcfg bus.ProvisionConfig, keep time.Duration) error {
	nc, js, err := connect(ctx, conn)
	if err != nil {
		return err
	}
	defer nc.Close()
	for {
		attempt, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := bus.Provision(attempt, js, pcfg)
		cancel()
		if err == nil {
			fmt.Printf("provisioned on %s with %d replicas, %d shards\n", nc.ConnectedUrlRedacted(), pcfg.Replicas, pcfg.Shards)
			return keepSpread(life, js, keep)
		}
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		fmt.Fprintf(os.Stderr, "provision: %v (retrying)\n", err)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		}
	}
}

// connect dials NATS and opens JetStream on the connection.
func connect(ctx context.Context, conn bus.ConnConfig) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := bus.Connect(ctx, conn)
	if err != nil {
		return nil, nil, err
	}
	js, err := bus.JetStream(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// spreadOnly spreads the leaders of the streams provisioning spreads
// (bus.LeaderGroups of the layout it reads) without provisioning: with
// keep above zero every keep until life ends, the first round after one
// interval as after provisioning (a provisioner that just changed the
// log's sources may have run a moment ago); with keep zero once, now.
func spreadOnly(ctx, life context.Context, conn bus.ConnConfig, keep time.Duration) error {
	nc, js, err := connect(ctx, conn)
	if err != nil {
		return err
	}
	defer nc.Close()
	if keep > 0 {
		return keepSpread(life, js, keep)
	}
	l, err := waitLayout(ctx, js)
	if err != nil {
		return err
	}
	for _, g := range bus.LeaderGroups(l) {
		moved, err := bus.SpreadLeaders(ctx, js, g)
		if err != nil {
			return err
		}
		fmt.Printf("leaders of %s spread: %d moved\n", strings.Join(g, ", "), moved)
	}
	return nil
}

// layoutRetry is how often waitLayout asks again.
const layoutRetry = 2 * time.Second

// waitLayout reads the work layout, asking again until ctx ends while
// there is none yet (the deployment not provisioned), and says so.
func waitLayout(ctx context.Context, js jetstream.JetStream) (bus.Layout, error) {
	for {
		l, err := bus.ReadLayout(ctx, js)
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil {
			return l, fmt.Errorf("spread leaders: %w (has the deployment been provisioned?)", err)
		}
		fmt.Fprintf(os.Stderr, "provision: %v (waiting for provisioning)\n", err)
		select {
		case <-time.After(layoutRetry):
		case <-ctx.Done():
			return l, fmt.Errorf("spread leaders: %w (has the deployment been provisioned?)", err)
		}
	}
}

// keepSpread spreads leaders every keep until life ends (nothing if keep
// is zero). It reads the layout first, waiting for it as long as it lives:
// a spreader may start before the provisioner is done (a Kubernetes
// Deployment does not wait for the Job).
func keepSpread(life context.Context, js jetstream.JetStream, keep time.Duration) error {
	if keep == 0 {
		return nil
	}
	l, err := waitLayout(life, js)
	if err != nil {
		return fmt.Errorf("keep leaders spread: %w", err)
	}
	fmt.Printf("keeping the leaders of %d shards and %s spread, every %s\n", l.Shards, strings.Join(bus.BusyStreams(), ", "), keep)
	bus.KeepSpread(life, js, bus.LeaderGroups(l), keep, func(line string) { fmt.Println(line) })
	return nil
}
