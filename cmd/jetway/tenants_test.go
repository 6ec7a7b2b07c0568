package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
)

// Bad input to `jetway tenants` is refused naming what is wrong, and
// writes nothing: no credential, no account, no token.
func TestTenants_refuse_bad_input_clearly_and_write_nothing(t *testing.T) {
	data := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "JETWAY"}, "reserved for NATS account JETWAY"},
		{[]string{"add", "a.b"}, "may contain only"},
		{[]string{"add", "ghost", "--user", "ci"}, "add the tenant first"},
		{[]string{"add", "acme", "--user", "c.i"}, "may contain only"},
		{[]string{"add", "acme", "--tokens", "x.json"}, "--tokens goes with --secrets"},
		{[]string{"revoke", "acme", "--user", "ci"}, "tenant acme has no user ci"},
		{[]string{"revoke", "..", "--user", "x"}, "may contain only"},
		{[]string{"revoke", "acme", "--user", "../../tokens"}, "may contain only"},
	} {
		out, err := runCLI(t, append(append([]string{"tenants"}, c.args...), "--data", data)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tenants %v: %v (%s); want an error saying %q", c.args, err, out, c.want)
		}
	}
	if entries, _ := os.ReadDir(data); len(entries) != 0 {
		t.Errorf("refused commands wrote %v", entries)
	}
}

// add makes a tenant's account (in the accounts file the dev bus
// includes), its credential and its HTTP tokens; --user adds a user;
// revoke removes one from the accounts file; list counts them.
func TestTenants_add_list_and_revoke_change_the_accounts_file(t *testing.T) {
	data := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		out, err := runCLI(t, append(append([]string{"tenants"}, args...), "--data", data)...)
		if err != nil {
			t.Fatalf("tenants %v: %v\n%s", args, err, out)
		}
		return out
	}
	run("add", "acme")
	run("add", "acme", "--user", "ci")
	if out := run("list"); !strings.Contains(out, "acme\t2 user(s)") {
		t.Errorf("list: %q; want acme with 2 users", out)
	}
	creds := bus.TenantCredentials{Dir: filepath.Join(data, devTenantsDir)}
	users, err := creds.Tenants()
	if err != nil || len(users["acme"]) != 2 {
		t.Fatalf("credentials: %v, %v", users, err)
	}
	conf, err := os.ReadFile(filepath.Join(data, devTenantsFile))
	if err != nil || !strings.Contains(string(conf), users["acme"][0]) || !strings.Contains(string(conf), users["acme"][1]) {
		t.Fatalf("accounts file lacks acme's users: %s (%v)", conf, err)
	}
	if fi, err := os.Stat(creds.Path("acme", "ci")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ci's credential: %v, %v; want mode 0600", fi, err)
	}
	f, err := auth.ReadFile(filepath.Join(data, auth.DevTokensFile))
	if err != nil {
		t.Fatal(err)
	}
	var user, admin int
	for _, g := range f.Tokens {
		if g.Tenant == "acme" && g.IsAdmin() {
			admin++
		} else if g.Tenant == "acme" {
			user++
		}
	}
	if user != 1 || admin != 1 {
		t.Errorf("acme's HTTP tokens: %d user, %d admin; want one each", user, admin)
	}

	ci := users["acme"]
	run("revoke", "acme", "--user", "ci")
	conf, _ = os.ReadFile(filepath.Join(data, devTenantsFile))
	kept := 0
	for _, u := range ci {
		if strings.Contains(string(conf), u) {
			kept++
		}
	}
	if kept != 1 {
		t.Errorf("after revoking ci, %d of acme's 2 users are in the accounts file; want 1", kept)
	}
}
