package bus

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A new tenant's users can sign in only once its account is whole: between
// the reload's two passes (the server wires a new account's imports one
// reload after creating it) the new tenant's credential is refused, so no
// client ever finds its requests answered by "no responders".
func TestReloadEmbedded_lets_a_new_tenant_sign_in_only_once_its_imports_work(t *testing.T) {
	dir := t.TempDir()
	conf, creds := DevLayout(t, dir, "acme")
	tenantsConf := filepath.Join(dir, "tenants.conf")
	cfg := EmbeddedConfig{StoreDir: filepath.Join(dir, "nats"), ConfigFile: conf, ServerName: "reload"}
	srv, err := StartEmbedded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer StopEmbedded(srv)
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
	if _, err := creds.Ensure("globex", ""); err != nil {
		t.Fatal(err)
	}
	opt, err := nats.NkeyOptionFromSeed(creds.Path("globex", ""))
	if err != nil {
		t.Fatal(err)
	}
	signIn := func() error {
		nc, err := nats.Connect(srv.ClientURL(), opt, nats.MaxReconnects(0))
		if err != nil {
			return err
		}
		defer nc.Close()
		_, err = nc.Request("jetway.api.ping", nil, 5*time.Second)
		return err
	}
	var between error
	passes := 0
	reloadPassed = func(pass int) {
		passes++
		if pass == 0 {
			between = signIn()
		}
	}
	defer func() { reloadPassed = func(int) {} }()
	if err := creds.WriteTenantsConf(tenantsConf); err != nil {
		t.Fatal(err)
	}
	if err := ReloadEmbedded(srv, cfg); err != nil {
		t.Fatal(err)
	}
	if passes != 2 {
		t.Fatalf("%d reload passes, want 2", passes)
	}
	if between == nil {
		t.Fatal("the new tenant signed in between the passes, before its imports were wired")
	}
	if !errors.Is(between, nats.ErrAuthorization) && !strings.Contains(between.Error(), "Authorization") {
		t.Fatalf("between the passes the new tenant got %v, want its sign-in refused (not a half-made account)", between)
	}
	if err := signIn(); err != nil {
		t.Fatalf("the new tenant after the reload: %v", err)
	}
}

// DevLayout writes jetway dev's accounts layout into dir: a credential for
// each tenant, the tenants' accounts file, and the accounts configuration
// with the services' user svc/pw. It returns the configuration's path.
// (Exported for the package's external tests; only in the test binary.)
func DevLayout(t *testing.T, dir string, tenants ...string) (string, TenantCredentials) {
	t.Helper()
	creds := TenantCredentials{Dir: filepath.Join(dir, "tenants")}
	for _, tn := range tenants {
		if _, err := creds.Ensure(tn, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := creds.WriteTenantsConf(filepath.Join(dir, "tenants.conf")); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "accounts.conf")
	if err := os.WriteFile(conf, []byte(DevAccountsConf("svc", "pw", "tenants.conf", 0)), 0o600); err != nil {
		t.Fatal(err)
	}
	return conf, creds
}
