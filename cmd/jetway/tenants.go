package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/devlock"
)

func init() { addCommand(newTenantsCmd) }

// tenantsFlags say where a deployment keeps its tenant credentials: a dev
// data directory (the default), or a cluster's secrets directory.
type tenantsFlags struct {
	data    string // jetway dev's data directory
	secrets string // a cluster's secrets directory (deploy/secrets)
	tokens  string // the dispatcher's tokens file, for a cluster
}

func (f *tenantsFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.data, "data", ".jetway", "jetway dev's data directory (credentials in DIR/tenants, tokens in DIR/tokens.json)")
	cmd.Flags().StringVar(&f.secrets, "secrets", "", "a cluster's secrets directory instead (credentials in DIR/tenants, accounts in DIR/tenants.conf)")
	cmd.Flags().StringVar(&f.tokens, "tokens", "", "with --secrets: the dispatcher's tokens file to add the tenant's HTTP tokens to")
}

// where is the credentials, the tenant accounts file the servers include,
// and the tokens file, for the deployment the flags name.
func (f *tenantsFlags) where() (creds bus.TenantCredentials, accountsConf, tokens string, err error) {
	if f.secrets != "" {
		return bus.TenantCredentials{Dir: filepath.Join(f.secrets, "tenants")}, filepath.Join(f.secrets, "tenants.conf"), f.tokens, nil
	}
	if f.tokens != "" {
		return creds, "", "", errors.New("--tokens goes with --secrets (a cluster); jetway dev's tokens are DATA/tokens.json")
	}
	return bus.TenantCredentials{Dir: filepath.Join(f.data, devTenantsDir)}, filepath.Join(f.data, devTenantsFile), filepath.Join(f.data, auth.DevTokensFile), nil
}

func newTenantsCmd(*globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenants",
		Short: "Add tenants and their users, revoke users: each tenant is a NATS account of its own",
		Long: `tenants manages the tenants of a deployment. Each tenant is a NATS account
of its own that reaches jetway only through what the JETWAY account exports:
its sessions' events, the dispatcher's API, its sessions' output and
headlines. A tenant's users authenticate with nkey seed files.

Without flags it works on jetway dev's data directory (.jetway) and tells a
running jetway dev to reload, so a change holds at once. With --secrets it
works on a cluster's secrets directory; reload the servers afterwards
(scripts/cluster.sh reload, or nats-server --signal reload twice: a new
account's imports are wired at the second reload).`,
	}
	cmd.AddCommand(newTenantsAddCmd(), newTenantsRevokeCmd(), newTenantsListCmd())
	return cmd
}

func newTenantsAddCmd() *cobra.Command {
	var f tenantsFlags
	var user string
	cmd := &cobra.Command{
		Use:   "add TENANT [--user NAME]",
		Short: "Add a tenant (its account, a credential, HTTP tokens), or another user of one",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant := args[0]
			creds, conf, tokens, err := f.where()
			if err != nil {
				return err
			}
			if err := bus.ValidTenantUser(tenant, user); err != nil {
				return err
			}
			if user != "" {
				if _, err := os.Stat(creds.Path(tenant, "")); err != nil {
					return fmt.Errorf("tenant %s has no credential in %s: add the tenant first (jetway tenants add %s)", tenant, creds.Dir, tenant)
				}
			}
			made, err := creds.Ensure(tenant, user)
			if err != nil {
				return err
			}
			if err := creds.WriteTenantsConf(conf); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			path := creds.Path(tenant, user)
			if made {
				outf(out, "NATS credential of %s: %s (nkey seed, mode 0600)\n", describeUser(tenant, user), path)
			} else {
				outf(out, "NATS credential of %s exists: %s\n", describeUser(tenant, user), path)
			}
			if user == "" && tokens != "" {
				if err := addTenantTokens(out, tokens, tenant); err != nil {
					return err
				}
			}
			outf(out, "publish into a session: nats --nkey %s pub jetway.events.<session> …\n", path)
			return reloadDeployment(out, f)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&user, "user", "", "add this user to an existing tenant instead (e.g. an outside system: ci)")
	return cmd
}

func newTenantsRevokeCmd() *cobra.Command {
	var f tenantsFlags
	var user string
	cmd := &cobra.Command{
		Use:   "revoke TENANT [--user NAME]",
		Short: "Revoke a tenant user's NATS credential; its connections are closed at the reload",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			creds, conf, _, err := f.where()
			if err != nil {
				return err
			}
			if err := bus.ValidTenantUser(args[0], user); err != nil {
				return err
			}
			if err := creds.Remove(args[0], user); err != nil {
				return err
			}
			if err := creds.WriteTenantsConf(conf); err != nil {
				return err
			}
			outf(cmd.OutOrStdout(), "revoked the NATS credential of %s\n", describeUser(args[0], user))
			return reloadDeployment(cmd.OutOrStdout(), f)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&user, "user", "", "the user to revoke (default: the tenant's first user)")
	return cmd
}

func newTenantsListCmd() *cobra.Command {
	var f tenantsFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the tenants and how many NATS users each has",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			creds, _, _, err := f.where()
			if err != nil {
				return err
			}
			tenants, err := creds.Tenants()
			if err != nil {
				return err
			}
			for _, t := range slices.Sorted(maps.Keys(tenants)) {
				outf(cmd.OutOrStdout(), "%s\t%d user(s)\n", t, len(tenants[t]))
			}
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

func describeUser(tenant, user string) string {
	if user == "" {
		return "tenant " + tenant
	}
	return "user " + user + " of tenant " + tenant
}

// addTenantTokens gives a new tenant a user and an admin HTTP token in
// the tokens file, unless it has tokens already.
func addTenantTokens(out io.Writer, path, tenant string) error {
	f, err := auth.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		f = auth.File{}
	} else if err != nil {
		return err
	}
	if slices.ContainsFunc(f.Tokens, func(g auth.Grant) bool { return g.Tenant == tenant }) {
		outf(out, "HTTP tokens of tenant %s: already in %s\n", tenant, path)
		return nil
	}
	for _, admin := range []bool{false, true} {
		tok, err := auth.NewToken()
		if err != nil {
			return err
		}
		f.Tokens = append(f.Tokens, auth.Grant{Token: tok, Tenant: tenant, Admin: admin})
	}
	if err := auth.WriteFile(path, f); err != nil {
		return err
	}
	outf(out, "HTTP tokens of tenant %s (a user and an admin): added to %s\n", tenant, path)
	return nil
}

// reloadDeployment tells a running jetway dev to take the change (SIGHUP:
// the bus reloads its accounts, the dispatcher its tokens), or says how to
// make a cluster take it.
func reloadDeployment(out io.Writer, f tenantsFlags) error {
	if f.secrets != "" {
		outln(out, "now reload every NATS server twice (scripts/cluster.sh reload does; or nats-server --signal reload=<pid>, twice: "+
			"a new account's imports are wired at the second reload) and, for new tokens, send the dispatchers SIGHUP")
		return nil
	}
	info, ok := devlock.Running(f.data)
	if !ok || info.PID <= 0 {
		outln(out, "no jetway dev is running on "+f.data+": it takes the change when it starts")
		return nil
	}
	if err := syscall.Kill(info.PID, syscall.SIGHUP); err != nil {
		return fmt.Errorf("tell jetway dev (pid %d) to reload: %w", info.PID, err)
	}
	outf(out, "jetway dev (pid %d) reloads its tenant accounts and tokens now\n", info.PID)
	return nil
}

// reloadTokensOnHangup makes store take src again on SIGHUP, so tokens
// added by `jetway tenants add` (or by hand) hold without a restart. A file
// that no longer loads keeps the tokens in force and is logged.
func reloadTokensOnHangup(store *auth.Store, src auth.Sources, log *zerolog.Logger) (stop func()) {
	return onHangup(func() {
		fresh, err := auth.Load(src)
		if err != nil {
			log.Error().Err(err).Msg("tokens not reloaded; the ones in force stay")
			return
		}
		store.Replace(fresh)
		log.Info().Int("tokens", fresh.Len()).Msg("tokens reloaded")
	})
}

// onHangup calls reload on every SIGHUP until stop is called; while it
// runs, SIGHUP no longer ends the process.
func onHangup(reload func()) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-hup:
				reload()
			}
		}
	}()
	return func() { signal.Stop(hup); close(done) }
}
