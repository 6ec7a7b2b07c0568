package bus

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"

	"jetway/pkg/events"
)

// The NATS account layout. Every service lives in the JETWAY account, the
// only one with JetStream; every tenant has an account of its own, named
// after the tenant, holding its users (people's tools and outside systems).
// A tenant reaches jetway only through what JETWAY exports and its account
// imports, so the boundary between tenants, and between a tenant and the
// services, is the account: nothing of $JS, $KV, job, agent, schedule or
// transcript subjects exists in a tenant account, and every reply to a
// tenant's request is routed back into the tenant's account by the server.
const (
	// AccountJetway holds the services, the streams and the buckets.
	AccountJetway = "JETWAY"
	// AccountSystem is the server's system account.
	AccountSystem = "SYS"
)

// Export is one subject family JETWAY offers to tenant accounts. Each is
// exported with account_token_position 3: the third token of the subject
// must be the importing account's name, so a tenant account can import
// its own tenant's subjects and no other's, and the server refuses a
// configuration that tries.
type Export struct {
	// Kind is "service" (the tenant sends; replies come back through the
	// import) or "stream" (JETWAY publishes; the tenant receives).
	Kind string
	// Subject is the JETWAY side, the tenant token a wildcard:
	// jetway.events.*.*.
	Subject string
	// Local is what the tenant's users see in their own account:
	// jetway.events.*.
	Local string
	// Why says what the tenant does with it.
	Why string
}

// TenantExports is everything a tenant account may reach of JETWAY. The
// attack suites enumerate it: a subject added here is attacked by them
// without further change, and one that reaches a tenant any other way
// fails their check of the configuration.
var TenantExports = []Export{
	{Kind: "service", Subject: "jetway.events.*.*", Local: "jetway.events.*",
		Why: "host events into the tenant's sessions; the stream's PubAck comes back through the import"},
	{Kind: "service", Subject: "jetway.api.*.*", Local: "jetway.api.*",
		Why: "the dispatcher's NATS API; the dispatcher reads the tenant from the subject"},
	{Kind: "stream", Subject: "jetway.out.*.*", Local: "jetway.out.*",
		Why: "run output of the tenant's sessions"},
	{Kind: "stream", Subject: "jetway.notify.*.*", Local: "jetway.notify.*",
		Why: "headlines of the tenant's sessions"},
}

// For is the export's subject in JETWAY for one tenant:
// jetway.events.acme.*.
func (e Export) For(tenant string) string {
	return strings.Replace(e.Subject, "*", tenant, 1)
}

// reservedAccounts are account names a tenant may not take.
var reservedAccounts = []string{AccountJetway, AccountSystem, "$G", "$SYS"}

// ValidTenantAccount checks that tenant can name a NATS account: the
// subject token rule, and none of the accounts the layout itself uses.
func ValidTenantAccount(tenant string) error {
	if err := events.ValidateToken("tenant", tenant); err != nil {
		return err
	}
	for _, r := range reservedAccounts {
		if strings.EqualFold(tenant, r) {
			return fmt.Errorf("tenant %q: the name is reserved for NATS account %s", tenant, r)
		}
	}
	return nil
}

// ExportsConf is the exports block of the JETWAY account, as it appears in
// a nats-server configuration.
func ExportsConf(indent string) string {
	var b strings.Builder
	b.WriteString(indent + "exports: [\n")
	for _, e := range TenantExports {
		fmt.Fprintf(&b, "%s  # %s\n%s  { %s: %q, account_token_position: 3 }\n", indent, e.Why, indent, e.Kind, e.Subject)
	}
	b.WriteString(indent + "]\n")
	return b.String()
}

// TenantAccountConf is one tenant's account: its users (nkey public keys)
// and its imports of TenantExports.
func TenantAccountConf(tenant string, users []string) string {
	var b strings.Builder
	// A server with JetStream gives it to every account that does not say
	// otherwise: a tenant account says so.
	fmt.Fprintf(&b, "%q {\n  jetstream: disabled\n  users: [\n", tenant)
	for _, u := range users {
		fmt.Fprintf(&b, "    { nkey: %q }\n", u)
	}
	b.WriteString("  ]\n  imports: [\n")
	for _, e := range TenantExports {
		fmt.Fprintf(&b, "    { %s: { account: %s, subject: %q }, to: %q }\n", e.Kind, AccountJetway, e.For(tenant), e.Local)
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

// TenantCredentials are the nkey seed files of tenant users, one directory
// for a deployment: <tenant>.nk is the tenant's first user,
// <tenant>.<user>.nk any other. The account configuration is made from
// what is there (TenantsConf), so revoking a user is removing its file and
// reloading the servers.
type TenantCredentials struct{ Dir string }

// SeedFileExt ends every tenant credential file.
const SeedFileExt = ".nk"

// Path is the seed file of a tenant's user ("" for its first user).
func (c TenantCredentials) Path(tenant, user string) string {
	name := tenant
	if user != "" {
		name += "." + user
	}
	return filepath.Join(c.Dir, name+SeedFileExt)
}

// Ensure makes the seed file of a tenant's user (mode 0600) unless it
// exists, and reports whether it made it.
func (c TenantCredentials) Ensure(tenant, user string) (made bool, err error) {
	if err := ValidTenantUser(tenant, user); err != nil {
		return false, err
	}
	path := c.Path(tenant, user)
	if _, err := os.Stat(path); err == nil {
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("tenant credential %s: %w", path, err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return false, fmt.Errorf("tenant credential for %s: %w", tenant, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return false, fmt.Errorf("tenant credential for %s: %w", tenant, err)
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return false, fmt.Errorf("tenant credentials: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, fmt.Errorf("tenant credential %s: %w", path, err)
	}
	_, werr := f.Write(append(seed, '\n'))
	if err := errors.Join(werr, f.Close()); err != nil {
		return false, fmt.Errorf("tenant credential %s: %w", path, err)
	}
	return true, nil
}

// ValidTenantUser checks a tenant's name and a user's ("" for the
// tenant's first): both name a credential file, so neither may hold a dot.
func ValidTenantUser(tenant, user string) error {
	if err := ValidTenantAccount(tenant); err != nil {
		return err
	}
	if user != "" {
		return events.ValidateToken("user", user)
	}
	return nil
}

// Remove deletes the seed file of a tenant's user.
func (c TenantCredentials) Remove(tenant, user string) error {
	path := c.Path(tenant, user)
	err := os.Remove(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		who := "tenant " + tenant + " has no credential"
		if user != "" {
			who = "tenant " + tenant + " has no user " + user
		}
		return fmt.Errorf("revoke: %s (no %s)", who, path)
	case err != nil:
		return fmt.Errorf("revoke %s: %w", path, err)
	}
	return nil
}

// Tenants maps each tenant with a credential to its users' public keys,
// read from the seed files.
func (c TenantCredentials) Tenants() (map[string][]string, error) {
	entries, err := os.ReadDir(c.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string][]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tenant credentials: %w", err)
	}
	out := map[string][]string{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), SeedFileExt)
		if !ok || e.IsDir() {
			continue
		}
		tenant, _, _ := strings.Cut(name, ".")
		if err := ValidTenantAccount(tenant); err != nil {
			return nil, fmt.Errorf("tenant credential %s: %w", e.Name(), err)
		}
		pub, err := seedPublicKey(filepath.Join(c.Dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out[tenant] = append(out[tenant], pub)
	}
	return out, nil
}

func seedPublicKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("tenant credential: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return "", fmt.Errorf("tenant credential %s: %w", path, err)
	}
	defer kp.Wipe()
	return kp.PublicKey()
}

// TenantsConf is every tenant account of a deployment, for inclusion in
// the accounts block of a nats-server configuration.
func TenantsConf(tenants map[string][]string) string {
	var b strings.Builder
	b.WriteString("# Tenant accounts, made by jetway from the tenant credentials: do not edit.\n")
	for _, t := range slices.Sorted(maps.Keys(tenants)) {
		b.WriteString(TenantAccountConf(t, tenants[t]))
	}
	return b.String()
}

// WriteTenantsConf writes TenantsConf of c's credentials to path, through a
// rename so a server reloading at that moment reads a whole file.
func (c TenantCredentials) WriteTenantsConf(path string) error {
	tenants, err := c.Tenants()
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(TenantsConf(tenants)), 0o644); err != nil {
		return fmt.Errorf("tenant accounts: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("tenant accounts: %w", err)
	}
	return nil
}

// DevAccountsConf is the accounts part of a one-machine bus (jetway dev):
// the JETWAY account with one user for every service (user, password),
// its exports, its partition mapping for P partitions (0:
// DefaultPartitions), and the tenant accounts from tenantsConf, a file
// beside it.
func DevAccountsConf(user, password, tenantsConf string, partitions int) string {
	if partitions <= 0 {
		partitions = DefaultPartitions
	}
	var b strings.Builder
	b.WriteString("# The account layout of jetway dev, made at every start: do not edit.\n")
	fmt.Fprintf(&b, "accounts {\n  %s {\n    jetstream: enabled\n", AccountJetway)
	fmt.Fprintf(&b, "    users: [ { user: %q, password: %q } ]\n", user, password)
	b.WriteString(ExportsConf("    "))
	b.WriteString(MappingsConf(partitions, "    "))
	fmt.Fprintf(&b, "  }\n  include %q\n}\n", tenantsConf)
	return b.String()
}

// MoveGlobalAccountStore renames the JetStream state of the global account
// ($G, where a bus without accounts keeps it) to the JETWAY account's,
// before a server that has accounts starts on storeDir: nothing stored or
// pending is lost when a bus moves to the account layout. It does nothing
// when there is no such state or JETWAY already has some.
func MoveGlobalAccountStore(storeDir string) (moved bool, err error) {
	from := filepath.Join(storeDir, "jetstream", "$G")
	to := filepath.Join(storeDir, "jetstream", AccountJetway)
	if _, err := os.Stat(from); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("bus: move the global account's streams: %w", err)
	}
	if _, err := os.Stat(to); err == nil {
		return false, fmt.Errorf("bus: both %s and %s exist: move or remove one by hand", from, to)
	}
	if err := os.Rename(from, to); err != nil {
		return false, fmt.Errorf("bus: move the global account's streams: %w", err)
	}
	return true, nil
}
