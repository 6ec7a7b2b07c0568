package deploytest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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

// TestUpgrade_of_an_old_events_stream_on_a_cluster provisions the layout of
// deployments made before the split (one R3 JETWAY_EVENTS with schedules,
// job events and roll-ups), fills it as the services' users would, and
// provisions again as the admin: the pending layover fires into its session
// after the upgrade, events published afterwards reach JETWAY_WORK, none
// is queued twice, and the tenant's roll-up that erased the old stream is
// refused.
func TestUpgrade_of_an_old_events_stream_on_a_cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster; skipped with -short")
	}
	d := render(t, renderOptions{})
	d.startCluster()
	admin := d.connect("admin")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := bus.ProvisionConfig{Replicas: 3, Partitions: 4}

	// The old layout, as the admin made it.
	// JETWAY_WORK sourced it through the durable consumer of that time,
	// jetway-work-source.
	events, work, source := bustest.OldLayout(cfg)
	testutil.Eventually(t, 30*time.Second, "the old "+bus.StreamEvents, func() bool {
		_, err := admin.js.CreateStream(ctx, events)
		return err == nil
	})
	if _, err := admin.js.CreatePushConsumer(ctx, bus.StreamEvents, source); err != nil {
		t.Fatalf("work source consumer: %v", err)
	}
	if _, err := admin.js.CreateStream(ctx, work); err != nil {
		t.Fatalf("make %s: %v", bus.StreamWork, err)
	}

	disp, jobsUser, run := d.connect("dispatcher"), d.connect("jobs"), d.connect("runner")
	for i := range 4 {
		if _, err := disp.js.Publish(ctx, fmt.Sprintf("jetway.events.acme.s%d", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := jobsUser.js.Publish(ctx, fmt.Sprintf("jetway.jobevents.acme.s%d", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	due := time.Now().Add(5 * time.Second).Truncate(time.Second).Add(time.Second)
	if _, err := run.js.PublishMsg(ctx, &nats.Msg{Subject: "jetway.schedules.acme.s1.l-1", Data: []byte(`{"booked_by":"old"}`)},
		jetstream.WithScheduleAt(due), jetstream.WithScheduleTarget("jetway.events.acme.s1")); err != nil {
		t.Fatalf("runner: the old layover: %v", err)
	}
	msgs := func(name string) uint64 {
		s, err := admin.js.Stream(ctx, name)
		if err != nil {
			return 0
		}
		return s.CachedInfo().State.Msgs
	}
	testutil.Eventually(t, 30*time.Second, "the 8 old events in JETWAY_WORK", func() bool { return msgs(bus.StreamWork) == 8 })

	d.provision()

	evs, err := admin.js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if c := evs.CachedInfo().Config; c.AllowMsgSchedules || c.AllowRollup || !c.DenyPurge || c.Replicas != 3 {
		t.Fatalf("upgraded %s: schedules %v, roll-ups %v, deny purge %v, replicas %d", bus.StreamEvents, c.AllowMsgSchedules, c.AllowRollup, c.DenyPurge, c.Replicas)
	}
	if n := msgs(bus.StreamEventsV1); n != 8 {
		t.Errorf("%s holds %d of the old log's 8 events", bus.StreamEventsV1, n)
	}
	cons, err := admin.js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jetway.events.acme.s1"}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		t.Fatalf("the carried layover did not fire into acme/s1: %v", err)
	}
	if string(m.Data()) != `{"booked_by":"old"}` || time.Now().Before(due) {
		t.Errorf("fired %q at %s, due %s", m.Data(), time.Now().Format(time.RFC3339), due.Format(time.RFC3339))
	}

	if _, err := disp.js.Publish(ctx, "jetway.events.acme.after", []byte(`{}`)); err != nil {
		t.Fatalf("dispatcher: publish after the upgrade: %v", err)
	}
	if _, err := jobsUser.js.Publish(ctx, "jetway.jobevents.acme.after", []byte(`{}`)); err != nil {
		t.Fatalf("jobs: publish after the upgrade: %v", err)
	}
	// 8 old + the resume + 2 new; anything queued again would exceed it.
	testutil.Eventually(t, 60*time.Second, "the resume and the new events in JETWAY_WORK", func() bool { return msgs(bus.StreamWork) >= 11 })
	if n := msgs(bus.StreamWork); n != 11 {
		t.Errorf("JETWAY_WORK holds %d messages, want 11", n)
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
}

// TestUpgrade_to_per_tenant_accounts runs a cluster with the per-user
// layout that came before tenant accounts (testdata/accounts-per-user.conf:
// tenant-<t> password users inside JETWAY), has a tenant and the
// dispatcher publish events that wait in JETWAY_WORK (no runner yet), then
// takes deploy/nats/accounts.conf as docs/OPERATIONS.md says to roll it
// out: restarting the nodes one at a time, or reloading each (twice, as
// scripts/cluster.sh reload does) with no restart. Nothing pending is lost:
// every waiting event is still queued and is delivered to its session once
// a runner starts; the tenant's client, now with its nkey seed in its own
// account, publishes on its own subjects and is delivered too; the old
// password user is refused.
func TestUpgrade_to_per_tenant_accounts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and restarts a three-node cluster; skipped with -short")
	}
	t.Run("restarting_each_node", func(t *testing.T) {
		upgradeToTenantAccounts(t, func(d *deployment, n *node) {
			d.stop(n)
			d.start(n)
			d.waitHTTP(n, "/healthz")
		})
	})
	t.Run("reloading_each_node", func(t *testing.T) {
		upgradeToTenantAccounts(t, func(d *deployment, n *node) {
			d.reload(n)
			d.reload(n)
		})
	})
}

// upgradeToTenantAccounts is TestUpgrade_to_per_tenant_accounts with take
// making one node take the new configuration.
func upgradeToTenantAccounts(t *testing.T, take func(*deployment, *node)) {
	d := render(t, renderOptions{accounts: filepath.Join("testdata", "accounts-per-user.conf")})
	d.startCluster()
	d.provision()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	admin := d.connect("admin")
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
		if res.Passwords[u] != d.passwords[u] {
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

	if n := msgs(bus.StreamWork); n != 4 {
		t.Fatalf("JETWAY_WORK holds %d events after the upgrade, want the 4 that waited", n)
	}
	if nc, err := nats.Connect(d.urls(), nats.UserInfo("tenant-acme", d.passwords["tenant-acme"]),
		nats.RootCAs(d.secret(certs.CAFile)), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Error("the old tenant-acme password user still connects")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("the old tenant-acme password user: %v; want an authorization violation", err)
	}

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
