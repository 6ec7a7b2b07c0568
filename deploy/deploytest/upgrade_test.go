package deploytest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"jetway/deploy/certs"
	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/events"
)

// mappedPartitions is P of the partition mapping in deploy/nats/accounts.conf.
// The upgrades need it (provisioning refuses a server without it); the
// test is skipped while the file has none.
func mappedPartitions(t *testing.T) int {
	t.Helper()
	conf, err := os.ReadFile(filepath.Join(confDir, "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`"jetway\.layout\.partitions"\s*:\s*"jetway\.layout\.partitions\.(\d+)"`).FindSubmatch(conf)
	if m == nil {
		t.Skip("deploy/nats/accounts.conf has no partition mapping (bus.MappingsConf) to upgrade to")
	}
	p, err := strconv.Atoi(string(m[1]))
	if err != nil || p <= 0 {
		t.Fatalf("the mapping's partition count %q", m[1])
	}
	return p
}

// withoutMapping is an accounts configuration as deployments had it before
// the partition mapping: without its mappings block, and with the publish
// rights the mapping made five-token (the server checks the mapped
// subject) as they were then.
func withoutMapping(t *testing.T, conf string) string {
	t.Helper()
	block := regexp.MustCompile(`(?ms)^[ \t]*mappings:\s*\{.*?^[ \t]*\}[ \t]*\n`)
	if !block.MatchString(conf) {
		t.Fatal("no mappings block to take out of accounts.conf")
	}
	conf = block.ReplaceAllString(conf, "")
	for _, kind := range []string{"events", "jobevents", "agentevents"} {
		conf = strings.ReplaceAll(conf, `"jetway.`+kind+`.*.*.*"`, `"jetway.`+kind+`.>"`)
	}
	return conf
}

// restartEach stops and starts each node in turn, the next once the last
// is healthy, as the upgrade procedure restarts the servers to take the
// partition mapping.
func (d *deployment) restartEach() {
	d.t.Helper()
	for _, n := range d.nodes {
		d.stop(n)
		d.start(n)
		d.waitHTTP(n, "/healthz")
	}
}

// workPending is how many events the runners have not finished: pending
// or un-acked on every work consumer, as the shards' layout says.
func workPending(t *testing.T, ctx context.Context, admin *client) int {
	t.Helper()
	l, err := bus.ReadLayout(ctx, admin.js)
	if err != nil {
		return -1
	}
	return bustest.WorkPending(ctx, admin.js, l)
}

// createOnCluster runs create, each attempt with its own 10 s deadline,
// until it succeeds: a cluster just formed can leave a create request
// unanswered (bus.Provision tries again for the same reason), and the
// same create again is answered with what the first one made.
func createOnCluster(t *testing.T, ctx context.Context, what string, create func(context.Context) error) {
	t.Helper()
	testutil.Eventually(t, time.Minute, what, func() bool {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := create(actx)
		if err != nil {
			t.Logf("%s: %v (trying again)", what, err)
		}
		return err == nil
	})
}

// TestUpgrade_of_an_old_events_stream_on_a_cluster runs a cluster as
// deployments ran before the split and the partition mapping (one R3
// JETWAY_EVENTS with schedules, job events and roll-ups, a work queue
// sourcing it), fills it as the services' users would, restarts each node
// with deploy/nats/accounts.conf (the mapping) and provisions as the
// admin: the old events and the pending layover reach the runners through
// the shards, events published afterwards too, none twice, and the
// tenant's roll-up that erased the old stream is refused.
func TestUpgrade_of_an_old_events_stream_on_a_cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and restarts a three-node cluster; skipped with -short")
	}
	P := mappedPartitions(t)
	d := render(t, renderOptions{})
	accounts := filepath.Join(d.dir, "accounts.conf")
	mapped, err := os.ReadFile(accounts)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(accounts, []byte(withoutMapping(t, string(mapped))), 0o600); err != nil {
		t.Fatal(err)
	}
	d.startCluster()
	admin := d.connect("admin")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cfg := bus.ProvisionConfig{Replicas: 3, Partitions: P}

	// The old layout, as the admin made it.
	// JETWAY_WORK sourced it through the durable consumer of that time,
	// jetway-work-source.
	events, work, source := bustest.OldLayout(cfg)
	createOnCluster(t, ctx, "the old "+bus.StreamEvents, func(ctx context.Context) error {
		_, err := admin.js.CreateStream(ctx, events)
		return err
	})
	createOnCluster(t, ctx, "the work source consumer", func(ctx context.Context) error {
		_, err := admin.js.CreatePushConsumer(ctx, bus.StreamEvents, source)
		return err
	})
	createOnCluster(t, ctx, "the old "+bus.StreamWork, func(ctx context.Context) error {
		_, err := admin.js.CreateStream(ctx, work)
		return err
	})

	disp, jobsUser, run := d.connect("dispatcher"), d.connect("jobs"), d.connect("runner")
	for i := range 4 {
		if _, err := disp.js.Publish(ctx, fmt.Sprintf("jetway.events.acme.s%d", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := jobsUser.js.Publish(ctx, fmt.Sprintf("jetway.jobevents.acme.s%d", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	msgs := func(name string) uint64 {
		s, err := admin.js.Stream(ctx, name)
		if err != nil {
			return 0
		}
		return s.CachedInfo().State.Msgs
	}
	testutil.Eventually(t, 30*time.Second, "the 8 old events in JETWAY_WORK", func() bool { return msgs(bus.StreamWork) == 8 })

	// The upgrade: each node restarted with the mapping, then provisioned.
	if err := os.WriteFile(accounts, mapped, 0o600); err != nil {
		t.Fatal(err)
	}
	d.restartEach()
	// The restarts take what a loaded machine makes them take, each
	// bounded by its own wait: what follows gets a bound of its own.
	rest, cancelRest := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancelRest()
	ctx = rest
	// A layover booked in the old stream, due once the upgrade has begun:
	// it must be carried over (restarting three nodes takes longer than any
	// due time set before it could be relied on to).
	due := time.Now().Add(10 * time.Second).Truncate(time.Second).Add(time.Second)
	if _, err := run.js.PublishMsg(ctx, &nats.Msg{Subject: "jetway.schedules.acme.s1.l-1", Data: []byte(`{"booked_by":"old"}`)},
		jetstream.WithScheduleAt(due), jetstream.WithScheduleTarget("jetway.events.acme.s1")); err != nil {
		t.Fatalf("runner: the old layover: %v", err)
	}
	d.provision()

	evs, err := admin.js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if c := evs.CachedInfo().Config; c.AllowMsgSchedules || c.AllowRollup || !c.DenyPurge || c.Replicas != 3 || len(c.Subjects) != 0 {
		t.Fatalf("upgraded %s: schedules %v, roll-ups %v, deny purge %v, replicas %d, subjects %v",
			bus.StreamEvents, c.AllowMsgSchedules, c.AllowRollup, c.DenyPurge, c.Replicas, c.Subjects)
	}
	if _, err := admin.js.Stream(ctx, bus.StreamWork); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the old %s is still there after the upgrade (%v)", bus.StreamWork, err)
	}
	if n := msgs(bus.StreamEventsV1); n != 8 {
		t.Errorf("%s holds %d of the old log's 8 events", bus.StreamEventsV1, n)
	}
	cons, err := admin.js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jetway.events.acme.s1"}})
	if err != nil {
		t.Fatal(err)
	}
	// The nodes just restarted: the ordered consumer's requests can find
	// no JetStream responder for a moment, which is not the layover's
	// failure. Then the read waits until JetStream answers the log's
	// info again (bounded) and goes on, a few times at most.
	for retries := 0; ; {
		m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if errors.Is(err, nats.ErrNoResponders) && retries < 5 {
			retries++
			t.Logf("reading the log: %v (waiting for JetStream to answer)", err)
			testutil.Eventually(t, 30*time.Second, "JetStream to answer for "+bus.StreamEvents, func() bool {
				_, err := admin.js.Stream(ctx, bus.StreamEvents)
				return err == nil
			})
			continue
		}
		if err != nil {
			t.Fatalf("the carried layover did not fire into acme/s1: %v", err)
		}
		if string(m.Data()) == `{}` {
			continue // acme/s1's old event, moved through its shard
		}
		if string(m.Data()) != `{"booked_by":"old"}` || time.Now().Before(due) {
			t.Errorf("fired %q at %s, due %s", m.Data(), time.Now().Format(time.RFC3339), due.Format(time.RFC3339))
		}
		break
	}

	if _, err := disp.js.Publish(ctx, "jetway.events.acme.after", []byte(`{}`)); err != nil {
		t.Fatalf("dispatcher: publish after the upgrade: %v", err)
	}
	if _, err := jobsUser.js.Publish(ctx, "jetway.jobevents.acme.after", []byte(`{}`)); err != nil {
		t.Fatalf("jobs: publish after the upgrade: %v", err)
	}
	// 8 old + the resume + 2 new for the runners; anything queued again
	// would exceed it.
	testutil.Eventually(t, 60*time.Second, "the old events, the resume and the new events for the runners", func() bool {
		return workPending(t, ctx, admin) >= 11
	})
	if n := workPending(t, ctx, admin); n != 11 {
		t.Errorf("the work consumers hold %d events, want 11", n)
	}

	acme := d.connect("tenant-acme") // in its own account: jetway.events.s1 is acme's s1
	before := msgs(bus.StreamEvents)
	rollup := nats.NewMsg("jetway.events.s1")
	rollup.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	if _, err := acme.js.PublishMsg(ctx, rollup); err == nil {
		t.Errorf("tenant: Nats-Rollup: all accepted after the upgrade")
	}
	if after := msgs(bus.StreamEvents); after < before {
		t.Errorf("a tenant's roll-up erased %d events", before-after)
	}
	if n := workPending(t, ctx, admin); n != 11 {
		t.Errorf("the work consumers hold %d events after the roll-up, want 11", n)
	}
}

// TestUpgrade_to_per_tenant_accounts runs a cluster with the per-user
// layout that came before tenant accounts (testdata/accounts-per-user.conf:
// tenant-<t> password users inside JETWAY, no partition mapping) and the
// event streams of before the shards, has a tenant and the dispatcher
// publish events that wait in JETWAY_WORK (no runner yet), then takes
// deploy/nats/accounts.conf as docs/OPERATIONS.md says to roll it out:
// restarting the nodes one at a time, or reloading each (twice, as
// scripts/cluster.sh reload does) with no restart. Nothing pending is lost:
// every waiting event is still queued, provisioning moves it into its
// shard, and it is delivered to its session once a runner starts; the
// tenant's client, now with its nkey seed in its own account, publishes on
// its own subjects and is delivered too; the old password user is refused.
func TestUpgrade_to_per_tenant_accounts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and restarts a three-node cluster; skipped with -short")
	}
	P := mappedPartitions(t)
	t.Run("restarting_each_node", func(t *testing.T) {
		upgradeToTenantAccounts(t, P, func(d *deployment, n *node) {
			d.stop(n)
			d.start(n)
			d.waitHTTP(n, "/healthz")
		})
	})
	t.Run("reloading_each_node", func(t *testing.T) {
		upgradeToTenantAccounts(t, P, func(d *deployment, n *node) {
			d.reload(n)
			d.reload(n)
		})
	})
}

// upgradeToTenantAccounts is TestUpgrade_to_per_tenant_accounts with take
// making one node take the new configuration, whose mapping has P
// partitions.
func upgradeToTenantAccounts(t *testing.T, partitions int, take func(*deployment, *node)) {
	d := render(t, renderOptions{accounts: filepath.Join("testdata", "accounts-per-user.conf")})
	d.startCluster()
	// ctx bounds what runs before the nodes take the new configuration,
	// and another bound what runs after: the restarts, each bounded by
	// its own wait, take what a loaded machine makes them take.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	admin := d.connect("admin")
	// The streams of that time, made as the admin: the work queue with the
	// partitions the mapping will have, so its events keep theirs.
	testutil.EventuallyNil(t, readyTimeout, "the unsharded layout", func() error {
		actx, acancel := context.WithTimeout(ctx, 15*time.Second)
		defer acancel()
		return bustest.MakeUnsharded(actx, admin.js, bus.ProvisionConfig{Replicas: 3, Partitions: partitions})
	})
	msgs := func(name string) uint64 {
		t.Helper()
		s, err := admin.js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		return s.CachedInfo().State.Msgs
	}

	// The old layout: the tenant publishes jetway.events.<tenant>.<session>
	// as a password user of JETWAY, with its own inbox for the PubAck.
	oldAcme, err := d.dial("tenant-acme", nats.CustomInboxPrefix("_INBOX_acme"))
	if err != nil {
		t.Fatalf("the old tenant-acme user: %v", err)
	}
	disp := d.connect("dispatcher")
	var pending []struct{ tenant, session, id string }
	send := func(c *client, tenant, session string) {
		t.Helper()
		m := inputMsg(t, tenant, session, "sent before the upgrade")
		if _, err := c.js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish %s: %v", m.Subject, err)
		}
		pending = append(pending, struct{ tenant, session, id string }{tenant, session, m.Header.Get(events.HeaderPrefix + "id")})
	}
	for i := range 3 {
		send(oldAcme, "acme", fmt.Sprintf("up%d", i))
	}
	send(disp, "globex", "up-g")
	oldAcme.Close()
	testutil.Eventually(t, 30*time.Second, "the 4 events waiting in JETWAY_WORK", func() bool { return msgs(bus.StreamWork) == 4 })

	// The upgrade: `make certs` with the new accounts.conf (the tenants'
	// seeds and tenants.conf; the tenant-<t> passwords dropped, which the
	// new configuration would refuse as unknown variables; every other
	// password kept), the new accounts.conf, and each node stopped and
	// started again, the next only when it is current.
	res, err := certs.Generate(certs.Config{
		Dir: filepath.Join(d.dir, "secrets"), Users: usersOf(t, filepath.Join(confDir, "accounts.conf")),
		Tenants: tenants, BcryptCost: bcrypt.MinCost,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range serviceUsers {
		if _, had := d.passwords[u]; had && res.Passwords[u] != d.passwords[u] {
			t.Fatalf("make certs changed %s's password", u)
		}
	}
	upgraded, err := os.ReadFile(filepath.Join(confDir, "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.dir, "accounts.conf"), upgraded, 0o600); err != nil {
		t.Fatal(err)
	}
	d.perUserTenants = false
	for _, n := range d.nodes {
		take(d, n)
	}
	rest, cancelRest := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancelRest()
	ctx = rest

	if n := msgs(bus.StreamWork); n != 4 {
		t.Fatalf("JETWAY_WORK holds %d events after the new configuration, want the 4 that waited", n)
	}
	if nc, err := nats.Connect(d.urls(), nats.UserInfo("tenant-acme", d.passwords["tenant-acme"]),
		nats.RootCAs(d.secret(certs.CAFile)), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Error("the old tenant-acme password user still connects")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("the old tenant-acme password user: %v; want an authorization violation", err)
	}

	// With the mapping on every node, provisioning moves the waiting
	// events into the shards.
	d.provision()
	if _, err := admin.js.Stream(ctx, bus.StreamWork); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the old %s is still there after provisioning (%v)", bus.StreamWork, err)
	}
	testutil.Eventually(t, 30*time.Second, "the 4 waiting events in the shards", func() bool { return workPending(t, ctx, admin) == 4 })

	// The tenant's client after the upgrade: its nkey seed, its own
	// account, its subjects without the tenant token.
	acme := d.connect("tenant-acme")
	after := tenantInputMsg(t, "acme", "up-new", "sent after the upgrade")
	if _, err := acme.js.PublishMsg(ctx, after); err != nil {
		t.Fatalf("acme in its own account: %v", err)
	}
	pending = append(pending, struct{ tenant, session, id string }{"acme", "up-new", after.Header.Get(events.HeaderPrefix + "id")})

	run := d.connect("runner")
	startDemoRunner(t, ctx, run, "upgrade-runner")
	for _, p := range pending {
		testutil.Eventually(t, 60*time.Second, p.id+" delivered to "+p.tenant+"/"+p.session, func() bool {
			return transcriptHas(t, ctx, admin, p.tenant, p.session, p.id)
		})
	}
	run.noViolation(t)
}
