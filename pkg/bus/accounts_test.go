package bus_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// devLayout writes the dev account layout with tenants into dir and
// returns the accounts file and the credentials.
func devLayout(t *testing.T, dir string, tenants ...string) (string, bus.TenantCredentials) {
	return bus.DevLayout(t, dir, tenants...)
}

// A bus without accounts kept its streams in the global account; moved to
// the account layout, every stored and pending message is still there, in
// JETWAY, where the services connect.
func TestMoveGlobalAccountStore_keeps_every_pending_event_across_the_move_to_accounts(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	store := filepath.Join(dir, "nats")
	old, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: store, Token: "old", ServerName: "upgrade"})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(old.ClientURL(), nats.Token("old"))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	const pending = 25
	for i := range pending {
		if _, err := js.Publish(ctx, "jetway.events.acme.s"+itoa(i%3), []byte("e"+itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	bustest.WaitLogged(t, js)
	before := streamMsgs(ctx, t, js)
	nc.Close()
	bus.StopEmbedded(old)

	moved, err := bus.MoveGlobalAccountStore(store)
	if err != nil || !moved {
		t.Fatalf("move: %v, %v; want moved", moved, err)
	}
	if again, err := bus.MoveGlobalAccountStore(store); err != nil || again {
		t.Fatalf("a second move: %v, %v; want nothing to do", again, err)
	}
	conf, _ := devLayout(t, dir, "acme")
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: store, ConfigFile: conf, ServerName: "upgrade"})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.StopEmbedded(srv)
	nc, err = nats.Connect(srv.ClientURL(), nats.UserInfo("svc", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = jetstream.New(nc)
	after := streamMsgs(ctx, t, js)
	for name, n := range before {
		if after[name] != n {
			t.Errorf("stream %s: %d messages before the move, %d after", name, n, after[name])
		}
	}
	if before[bus.WorkStream(0)] != pending {
		t.Errorf("%s held %d events before the move, want %d", bus.WorkStream(0), before[bus.WorkStream(0)], pending)
	}
}

func streamMsgs(ctx context.Context, t *testing.T, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = info.State.Msgs
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The exports let a tenant account import its own subjects only: the
// server refuses a configuration in which one imports another's.
func TestTenantExports_refuse_an_import_of_another_tenants_subjects(t *testing.T) {
	dir := t.TempDir()
	conf, _ := devLayout(t, dir, "acme")
	forged := strings.Replace(bus.TenantAccountConf("globex", nil), `"jetway.events.globex.*"`, `"jetway.events.acme.*"`, 1)
	if err := os.WriteFile(filepath.Join(dir, "tenants.conf"), []byte(forged), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := server.ProcessConfigFile(conf)
	if err == nil {
		opts, _ := server.ProcessConfigFile(conf)
		opts.StoreDir, opts.JetStream, opts.Port = filepath.Join(dir, "js"), true, server.RANDOM_PORT
		if _, err = server.NewServer(opts); err == nil {
			t.Fatal("a tenant account importing another tenant's events was accepted")
		}
	}
	if !strings.Contains(err.Error(), "not authorized") {
		t.Errorf("refusal %q does not say the import is not authorized", err)
	}
}

func TestValidTenantAccount_refuses_the_layouts_own_accounts(t *testing.T) {
	for _, name := range []string{"JETWAY", "jetway", "SYS", "$G", "a.b", ""} {
		if bus.ValidTenantAccount(name) == nil {
			t.Errorf("tenant %q accepted as an account name", name)
		}
	}
	if err := bus.ValidTenantAccount("acme-2"); err != nil {
		t.Errorf("acme-2: %v", err)
	}
}

// A tenant added to the credentials holds after a reload, with no restart;
// a user removed is disconnected by it.
func TestReloadEmbedded_adds_and_revokes_tenant_users_without_a_restart(t *testing.T) {
	dir := t.TempDir()
	conf, creds := devLayout(t, dir, "acme")
	cfg := bus.EmbeddedConfig{StoreDir: filepath.Join(dir, "nats"), ConfigFile: conf, ServerName: "reload"}
	srv, err := bus.StartEmbedded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.StopEmbedded(srv)
	connect := func(tenant string) (*nats.Conn, error) {
		opt, err := nats.NkeyOptionFromSeed(creds.Path(tenant, ""))
		if err != nil {
			return nil, err
		}
		return nats.Connect(srv.ClientURL(), opt, nats.MaxReconnects(0))
	}
	if _, err := creds.Ensure("globex", ""); err != nil {
		t.Fatal(err)
	}
	if c, err := connect("globex"); err == nil {
		c.Close()
		t.Fatal("globex connected before the reload")
	}
	if err := creds.WriteTenantsConf(filepath.Join(dir, "tenants.conf")); err != nil {
		t.Fatal(err)
	}
	if err := bus.ReloadEmbedded(srv, cfg); err != nil {
		t.Fatal(err)
	}
	g, err := connect("globex")
	if err != nil {
		t.Fatalf("globex after the reload: %v", err)
	}
	// The new account's imports work at once: its API request reaches a
	// responder in JETWAY, and the answer comes back.
	svc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("svc", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if _, err := svc.Subscribe("jetway.api.*.ping", func(m *nats.Msg) { _ = m.Respond([]byte(m.Subject)) }); err != nil {
		t.Fatal(err)
	}
	if err := svc.Flush(); err != nil {
		t.Fatal(err)
	}
	if r, err := g.Request("jetway.api.ping", nil, 5*time.Second); err != nil || string(r.Data) != "jetway.api.globex.ping" {
		t.Fatalf("globex's API request after the reload: %v, %v; want the answer to jetway.api.globex.ping", r, err)
	}
	closed := make(chan struct{})
	g.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := creds.Remove("globex", ""); err != nil {
		t.Fatal(err)
	}
	if err := creds.WriteTenantsConf(filepath.Join(dir, "tenants.conf")); err != nil {
		t.Fatal(err)
	}
	if err := bus.ReloadEmbedded(srv, cfg); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-testContext(t).Done():
		t.Fatal("globex's connection stayed open after its credential was revoked")
	}
}
