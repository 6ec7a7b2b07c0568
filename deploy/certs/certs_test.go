package certs

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"
)

func TestGenerate_makes_a_CA_that_verifies_server_and_client_certificates(t *testing.T) {
	dir := t.TempDir()
	if _, err := Generate(Config{Dir: dir, Users: []string{"runner"}, BcryptCost: bcrypt.MinCost}); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		t.Fatal(err)
	}
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	for _, c := range []struct {
		cert, key string
		usage     x509.ExtKeyUsage
		host      string
	}{
		{ServerCertFile, ServerKeyFile, x509.ExtKeyUsageServerAuth, "127.0.0.1"},
		{ServerCertFile, ServerKeyFile, x509.ExtKeyUsageServerAuth, "nats-2"},
		{ServerCertFile, ServerKeyFile, x509.ExtKeyUsageClientAuth, ""}, // routes
		{ClientCertFile, ClientKeyFile, x509.ExtKeyUsageClientAuth, ""},
	} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, c.cert), filepath.Join(dir, c.key))
		if err != nil {
			t.Fatalf("%s: %v", c.cert, err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: c.host, KeyUsages: []x509.ExtKeyUsage{c.usage}}); err != nil {
			t.Errorf("%s for %q (usage %v): %v", c.cert, c.host, c.usage, err)
		}
	}
	for _, f := range []string{CAKeyFile, ServerKeyFile, ClientKeyFile, UsersEnv, PasswordsConf} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v, want no group or other access", f, st.Mode().Perm())
		}
	}
}

func TestGenerate_keeps_passwords_and_adds_new_users(t *testing.T) {
	dir := t.TempDir()
	first, err := Generate(Config{Dir: dir, Users: []string{"runner"}, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	again, err := Generate(Config{Dir: dir, Users: []string{"runner"}, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Created) != 0 {
		t.Errorf("second run created %v, want nothing", again.Created)
	}
	more, err := Generate(Config{Dir: dir, Users: []string{"runner", "tenant-acme"}, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	if more.Passwords["runner"] != first.Passwords["runner"] {
		t.Error("adding a user changed runner's password")
	}
	env, err := ReadUsersEnv(filepath.Join(dir, UsersEnv))
	if err != nil {
		t.Fatal(err)
	}
	if env["NATS_PASSWORD_TENANT_ACME"] != more.Passwords["tenant-acme"] || env["NATS_PASSWORD_RUNNER"] != first.Passwords["runner"] {
		t.Errorf("users.env = %v, want both passwords", env)
	}
	conf, err := os.ReadFile(filepath.Join(dir, PasswordsConf))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(conf)), "\n")[1:] {
		name, hash, _ := strings.Cut(line, ": ")
		user := map[string]string{"RUNNER_PASSWORD": "runner", "TENANT_ACME_PASSWORD": "tenant-acme"}[name]
		if err := bcrypt.CompareHashAndPassword([]byte(strings.Trim(hash, `"`)), []byte(more.Passwords[user])); err != nil {
			t.Errorf("%s: hash does not match %s's password: %v", name, user, err)
		}
	}
}

func TestUsersInConfig_reads_users_and_refuses_a_mismatched_variable(t *testing.T) {
	got, err := UsersInConfig([]byte(`users: [
  { user: admin, password: $ADMIN_PASSWORD }
  { user: tenant-acme, password: $TENANT_ACME_PASSWORD, permissions: {} }
]`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "admin,tenant-acme" {
		t.Errorf("users = %v, want admin, tenant-acme", got)
	}
	if _, err := UsersInConfig([]byte(`{ user: runner, password: $RUNER_PASSWORD }`)); err == nil ||
		!strings.Contains(err.Error(), "$RUNNER_PASSWORD") {
		t.Errorf("mismatched variable: err = %v, want one naming $RUNNER_PASSWORD", err)
	}
}

func TestUsersInConfig_finds_every_user_of_the_deploy_accounts_file(t *testing.T) {
	conf, err := os.ReadFile("../nats/accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	got, err := UsersInConfig(conf)
	if err != nil {
		t.Fatal(err)
	}
	// Tenants are not users of accounts.conf: they have accounts of their
	// own, in tenants.conf.
	want := "admin,dispatcher,jobs,notifier,runner,spreader,sys"
	if strings.Join(got, ",") != want {
		t.Errorf("users = %v, want %s", got, want)
	}
}

func TestGenerate_makes_tenant_credentials_and_keeps_them(t *testing.T) {
	dir := t.TempDir()
	first, err := Generate(Config{Dir: dir, Users: []string{"runner"}, Tenants: []string{"acme"}, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(dir, TenantsDir, "acme.nk")
	if first.TenantSeeds["acme"] != seed {
		t.Errorf("acme's seed at %q, want %s", first.TenantSeeds["acme"], seed)
	}
	if !slices.Contains(first.Created, TenantsConf) || !slices.Contains(first.Created, filepath.Join(TenantsDir, "acme.nk")) {
		t.Errorf("created %v, want the seed and %s", first.Created, TenantsConf)
	}
	acmeSeed, err := os.ReadFile(seed)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{seed, filepath.Join(dir, TenantsDir)} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: %v, mode %v; want no group or other access", p, err, st.Mode().Perm())
		}
	}
	pub := publicKey(t, seed)
	conf := readFile(t, filepath.Join(dir, TenantsConf))
	if !strings.Contains(conf, pub) || strings.Contains(conf, strings.TrimSpace(string(acmeSeed))) {
		t.Errorf("tenants.conf should hold acme's public key and not its seed:\n%s", conf)
	}

	// Nothing new: nothing written.
	again, err := Generate(Config{Dir: dir, Users: []string{"runner"}, Tenants: []string{"acme"}, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Created) != 0 {
		t.Errorf("second run created %v, want nothing", again.Created)
	}
	// A tenant added by another tool (its seed dropped into tenants/) and
	// one added to the list: both in tenants.conf, acme's seed untouched.
	if _, err := TenantCredentials(dir).Ensure("initech", ""); err != nil {
		t.Fatal(err)
	}
	more, err := Generate(Config{Dir: dir, Users: []string{"runner"}, Tenants: []string{"acme", "globex"}, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(more.Created, TenantsConf) {
		t.Errorf("created %v, want %s rewritten", more.Created, TenantsConf)
	}
	if b, _ := os.ReadFile(seed); string(b) != string(acmeSeed) {
		t.Error("acme's seed changed")
	}
	conf = readFile(t, filepath.Join(dir, TenantsConf))
	for _, tenant := range []string{"acme", "globex", "initech"} {
		if !strings.Contains(conf, `"`+tenant+`" {`) {
			t.Errorf("tenants.conf has no account %s:\n%s", tenant, conf)
		}
	}

	if _, err := Generate(Config{Dir: dir, Tenants: []string{"JETWAY"}}); err == nil {
		t.Error("a tenant named after the JETWAY account was accepted")
	}
}

func TestGenerate_writes_tenants_conf_with_no_tenant(t *testing.T) {
	// accounts.conf includes it: a server does not start without the file.
	dir := t.TempDir()
	if _, err := Generate(Config{Dir: dir, Users: []string{"runner"}, BcryptCost: bcrypt.MinCost}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, TenantsConf)); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func publicKey(t *testing.T, seedFile string) string {
	t.Helper()
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(readFile(t, seedFile))))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

func TestGenerate_drops_the_passwords_of_users_no_longer_listed(t *testing.T) {
	// The per-user layout had tenant-<t> users; the account layout has
	// none, and nats-server refuses a passwords.conf variable nothing uses.
	dir := t.TempDir()
	old, err := Generate(Config{Dir: dir, Users: []string{"runner", "tenant-acme"}, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	now, err := Generate(Config{Dir: dir, Users: []string{"runner"}, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	if now.Passwords["runner"] != old.Passwords["runner"] {
		t.Error("runner's password changed")
	}
	for _, f := range []string{UsersEnv, PasswordsConf} {
		if text := readFile(t, filepath.Join(dir, f)); strings.Contains(text, "TENANT_ACME") {
			t.Errorf("%s still holds tenant-acme:\n%s", f, text)
		}
	}
}
