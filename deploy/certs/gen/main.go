// Command gen makes the local CA, the NATS server and client certificates and
// the NATS user passwords of a jetway deployment (see package certs).
//
//	go run ./deploy/certs/gen -out deploy/secrets -accounts deploy/nats/accounts.conf
//
// Existing files are kept (pass -force for new certificates); users added to
// the accounts file since the last run get a password, the others keep theirs.
package main

import (
	"flag"
	"fmt"
	"os"
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
	)
	flag.Parse()
	if err := run(*out, *accounts, *hosts, *validFor, *force); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(out, accounts, hosts string, validFor time.Duration, force bool) error {
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
		ValidFor: validFor,
		Force:    force,
	})
	if err != nil {
		return err
	}
	if len(res.Created) == 0 {
		fmt.Printf("secrets in %s are up to date (%d users)\n", out, len(users))
		return nil
	}
	fmt.Printf("wrote %s to %s (%d users: %s)\n", strings.Join(res.Created, ", "), out, len(users), strings.Join(users, ", "))
	return nil
}
