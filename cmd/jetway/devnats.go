package main

import (
	"github.com/nats-io/nats-server/v2/server"

	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
)

// The dev bus runs the production account layout (pkg/bus, "The NATS
// account layout"): the services in the JETWAY account as one user, each
// tenant in an account of its own with a credential per user in
// <data>/tenants. So every test and every user of `jetway dev` meets the
// real boundary between tenants and services.
const (
	// devNATSTokenFile holds the password of the services' user. Jobs are
	// confined to their workspace and cannot read it.
	devNATSTokenFile = "nats.token"
	// devServiceUser is the services' NATS user in the JETWAY account.
	devServiceUser = "jetway"
	// devAccountsFile and devTenantsFile are the server's configuration,
	// made at every start from the tenant credentials.
	devAccountsFile = "nats-accounts.conf"
	devTenantsFile  = "nats-tenants.conf"
	// devTenantsDir holds a tenant's credentials: <tenant>.nk, nkey seeds.
	devTenantsDir = "tenants"
	// devPartitionsFile keeps P across restarts: the server's partition
	// mapping is made from it at every start, and changing P moves
	// sessions between partitions.
	devPartitionsFile = "partitions"
)

// devBus is what the dev bus needs to start and reload.
type devBus struct {
	password     string // the services' user's
	passwordPath string
	creds        bus.TenantCredentials
	accountsConf string
	tenantsConf  string
	partitions   int // P, in the server's mapping
}

// prepareDevBus makes the services' password on first start (kept across
// restarts so clients configured once keep working), a credential for every
// tenant that has a token (in tokens.json or the environment), and the
// server's configuration. partitions is P (0: what an earlier start kept,
// or bus.DefaultPartitions on the first).
func prepareDevBus(dataDir string, partitions int) (devBus, error) {
	b := devBus{
		passwordPath: filepath.Join(dataDir, devNATSTokenFile),
		creds:        bus.TenantCredentials{Dir: filepath.Join(dataDir, devTenantsDir)},
		accountsConf: filepath.Join(dataDir, devAccountsFile),
		tenantsConf:  filepath.Join(dataDir, devTenantsFile),
	}
	var err error
	if b.password, err = devNATSPassword(b.passwordPath); err != nil {
		return b, err
	}
	if b.partitions, err = devPartitions(filepath.Join(dataDir, devPartitionsFile), partitions); err != nil {
		return b, err
	}
	if _, err := auth.EnsureDevTokens(dataDir); err != nil {
		return b, err
	}
	f, err := auth.ReadFile(filepath.Join(dataDir, auth.DevTokensFile))
	if err != nil {
		return b, err
	}
	env, err := auth.FromEnv(os.Getenv)
	if err != nil {
		return b, err
	}
	for _, g := range append(f.Grants(), env...) {
		if g.Tenant == "" {
			continue // an operator of no tenant
		}
		if _, err := b.creds.Ensure(g.Tenant, ""); err != nil {
			return b, fmt.Errorf("dev bus: %w", err)
		}
	}
	return b, b.writeConf()
}

// writeConf writes the accounts file and the tenant accounts it includes.
func (b devBus) writeConf() error {
	if err := b.creds.WriteTenantsConf(b.tenantsConf); err != nil {
		return fmt.Errorf("dev bus: %w", err)
	}
	conf := bus.DevAccountsConf(devServiceUser, b.password, filepath.Base(b.tenantsConf), b.partitions)
	if err := os.WriteFile(b.accountsConf, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("dev bus: %w", err)
	}
	return nil
}

// devPartitions returns P: asked, else kept at path, else the default;
// and keeps it at path.
func devPartitions(path string, asked int) (int, error) {
	p := asked
	if p <= 0 {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			if p, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil || p <= 0 {
				return 0, fmt.Errorf("dev bus: %s: %q is not a partition count", path, strings.TrimSpace(string(b)))
			}
		case errors.Is(err, fs.ErrNotExist):
			p = bus.DefaultPartitions
		default:
			return 0, fmt.Errorf("dev bus: %w", err)
		}
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(p)+"\n"), 0o600); err != nil {
		return 0, fmt.Errorf("dev bus: %w", err)
	}
	return p, nil
}

// devNATSPassword returns the services' password, making it on first start.
func devNATSPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("dev NATS password: %w", err)
	}
	token, err := auth.NewDevBusToken()
	if err != nil {
		return "", fmt.Errorf("dev NATS password: %w", err)
	}
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("dev NATS password: %w", err)
	}
	return token, nil
}

// reloadDevBusOnHangup makes the dev bus take its tenant credentials again
// on SIGHUP (what `jetway tenants add` and `revoke` send it): a new
// tenant's account holds at once, a revoked user is disconnected.
func reloadDevBusOnHangup(b devBus, srv *server.Server, cfg bus.EmbeddedConfig, say func(string, ...any)) (stop func()) {
	return onHangup(func() {
		err := b.writeConf()
		if err == nil {
			err = bus.ReloadEmbedded(srv, cfg)
		}
		if err != nil {
			say("reload of the tenant accounts failed: %v", err)
			return
		}
		say("tenant accounts reloaded from %s", b.creds.Dir)
	})
}
