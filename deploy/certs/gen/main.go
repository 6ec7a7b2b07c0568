// Command gen makes the local CA, the NATS server and client certificates,
// the NATS user passwords and the tenant credentials of a jetway deployment
// (see package certs).
//
//	go run ./deploy/certs/gen -out deploy/secrets -accounts deploy/nats/accounts.conf -tenants acme,globex
//
// Existing files are kept (pass -force for new certificates); users added to
// the accounts file since the last run get a password, the others keep theirs;
// a listed tenant without a credential gets one (tenants/<tenant>.nk), and
// tenants.conf is made from every credential in tenants/.
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"jetway/deploy/certs"
)

func main() {
	var (
		out      = flag.String("out", "deploy/secrets", "directory to write the secrets into (keep it out of git)")
		accounts = flag.String("accounts", "deploy/nats/accounts.conf", "nats-server accounts file whose users get passwords")
		hosts    = flag.String("hosts", strings.Join(certs.DefaultHosts, ","), "comma-separated DNS names and IPs for the server certificate")
		validFor = flag.Duration("valid", 365*24*time.Hour, "certificate lifetime")
		force    = flag.Bool("force", false, "replace existing certificates (passwords are kept)")
		tenants  = flag.String("tenants", strings.Join(certs.DefaultTenants, ","), "comma-separated tenants that get an account and a credential (existing ones are kept)")
	)
	flag.Parse()
	if err := run(*out, *accounts, *hosts, *tenants, *validFor, *force); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(out, accounts, hosts, tenants string, validFor time.Duration, force bool) error {
	conf, err := os.ReadFile(accounts)
	if err != nil {
		return fmt.Errorf("read accounts: %w", err)
	}
	users, err := certs.UsersInConfig(conf)
	if err != nil {
		return fmt.Errorf("%s: %w", accounts, err)
	}
	res, err := certs.Generate(certs.Config{
		Dir:      out,
		Hosts:    strings.Split(hosts, ","),
		Users:    users,
		Tenants:  splitList(tenants),
		ValidFor: validFor,
		Force:    force,
	})
	if err != nil {
		return err
	}
	if len(res.Created) == 0 {
		fmt.Printf("secrets in %s are up to date (%d users, %d tenants)\n", out, len(users), len(res.TenantSeeds))
	} else {
		fmt.Printf("wrote %s to %s (%d users: %s)\n", strings.Join(res.Created, ", "), out, len(users), strings.Join(users, ", "))
	}
	for _, t := range slices.Sorted(maps.Keys(res.TenantSeeds)) {
		fmt.Printf("tenant %s: nkey seed %s (for the tenant's clients: nats --nkey; never for the servers)\n", t, res.TenantSeeds[t])
	}
	return nil
}

// splitList is a comma-separated list without empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
