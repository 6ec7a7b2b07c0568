// Package certs makes the secrets a locked-down jetway deployment needs: a
// local certificate authority, a server certificate for the NATS nodes
// (client and route TLS), a client certificate for the optional mTLS variant,
// one random password per NATS user with its bcrypt hash, and an nkey
// credential for each tenant's first user with the tenant accounts the
// servers include (pkg/bus, "The NATS account layout").
//
// It is written in Go rather than as an openssl script so that CI and a
// fresh machine need nothing but the Go toolchain.
package certs

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"jetway/pkg/bus"
)

// File names written into Config.Dir.
const (
	CAFile         = "ca.pem"
	CAKeyFile      = "ca-key.pem"
	ServerCertFile = "server.pem"
	ServerKeyFile  = "server-key.pem"
	ClientCertFile = "client.pem"
	ClientKeyFile  = "client-key.pem"
	// PasswordsConf holds nats-server config variables, one bcrypt hash per
	// user (NAME_PASSWORD: "$2a$…"), included by accounts.conf.
	PasswordsConf = "passwords.conf"
	// UsersEnv holds the plain passwords as shell variables
	// (NATS_PASSWORD_NAME=…) for scripts and compose.
	UsersEnv = "users.env"
	// TenantsDir holds the tenants' nkey seeds, <tenant>.nk and
	// <tenant>.<user>.nk (bus.TenantCredentials): secrets of the tenants'
	// clients, never mounted into a server.
	TenantsDir = "tenants"
	// TenantsConf holds the tenant accounts (their users' public keys and
	// their imports of JETWAY's exports), included by accounts.conf. It
	// holds no secret: the servers need it and nothing else of TenantsDir.
	TenantsConf = "tenants.conf"
)

// DefaultTenants are the tenants `make certs` makes credentials for when
// told no others: the two the examples and tests use.
var DefaultTenants = []string{"acme", "globex"}

// DefaultHosts are the names the server certificate is valid for: loopback
// for `make cluster` and tests, the compose service names, and the in-cluster
// names the NATS Helm chart gives its pods in namespace "jetway".
var DefaultHosts = []string{
	"localhost", "127.0.0.1", "::1",
	"nats", "nats-1", "nats-2", "nats-3",
	"nats.jetway.svc", "nats.jetway.svc.cluster.local",
	"*.nats-headless.jetway.svc", "*.nats-headless.jetway.svc.cluster.local",
}

// Config says where to write and what to make.
type Config struct {
	// Dir receives every file (created with mode 0700 if missing).
	Dir string
	// Hosts are DNS names or IP addresses for the server certificate
	// (default DefaultHosts).
	Hosts []string
	// Users are the NATS user names that get a password. A name is mapped to
	// its config variable by PasswordVar.
	Users []string
	// ValidFor is the certificates' lifetime (default one year).
	ValidFor time.Duration
	// BcryptCost is the hash cost (default bcrypt.DefaultCost). The server
	// pays it on every connect, so keep it modest.
	BcryptCost int
	// Tenants get a credential (the nkey seed of their first user) unless
	// they have one. Tenants with a seed in TenantsDir but not listed here
	// keep it: TenantsConf is made from every seed there, so a tenant added
	// since (jetway tenants add) is not dropped by the next run.
	Tenants []string
	// Force replaces certificates that already exist. Passwords are never
	// replaced: a user already in UsersEnv keeps its password, so running
	// Generate again only adds what is missing (and drops the passwords of
	// users no longer in Users).
	Force bool
}

// Result says what Generate wrote.
type Result struct {
	// Created lists the files written this time (base names).
	Created []string
	// Passwords maps each user of Config.Users to its plain password.
	Passwords map[string]string
	// TenantSeeds maps each tenant of Config.Tenants to the seed file of
	// its first user.
	TenantSeeds map[string]string
}

// Generate writes the CA, certificates and passwords into cfg.Dir, keeping
// whatever is already there unless cfg.Force asks for new certificates.
func Generate(cfg Config) (Result, error) {
	if cfg.Dir == "" {
		return Result{}, errors.New("certs: config: Dir is required")
	}
	if len(cfg.Hosts) == 0 {
		cfg.Hosts = DefaultHosts
	}
	if cfg.ValidFor <= 0 {
		cfg.ValidFor = 365 * 24 * time.Hour
	}
	if cfg.BcryptCost == 0 {
		cfg.BcryptCost = bcrypt.DefaultCost
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return Result{}, fmt.Errorf("certs: create %s: %w", cfg.Dir, err)
	}
	var res Result
	created, err := ensureCerts(cfg)
	if err != nil {
		return Result{}, err
	}
	res.Created = append(res.Created, created...)
	pw, wrote, err := ensurePasswords(cfg)
	if err != nil {
		return Result{}, err
	}
	res.Passwords = pw
	if wrote {
		res.Created = append(res.Created, UsersEnv, PasswordsConf)
	}
	seeds, created, err := ensureTenants(cfg)
	if err != nil {
		return Result{}, err
	}
	res.TenantSeeds = seeds
	res.Created = append(res.Created, created...)
	return res, nil
}

// TenantCredentials are the tenant credentials kept in dir.
func TenantCredentials(dir string) bus.TenantCredentials {
	return bus.TenantCredentials{Dir: filepath.Join(dir, TenantsDir)}
}

// ensureTenants makes a seed for every tenant of cfg.Tenants that has none
// and writes TenantsConf from every seed in TenantsDir when it changed or
// is missing. The file is written even with no tenant at all, because
// accounts.conf includes it and a server does not start without it.
func ensureTenants(cfg Config) (map[string]string, []string, error) {
	creds := TenantCredentials(cfg.Dir)
	seeds := map[string]string{}
	var created []string
	for _, tenant := range cfg.Tenants {
		made, err := creds.Ensure(tenant, "")
		if err != nil {
			return nil, nil, fmt.Errorf("certs: %w", err)
		}
		path := creds.Path(tenant, "")
		seeds[tenant] = path
		if made {
			created = append(created, filepath.Join(TenantsDir, filepath.Base(path)))
		}
	}
	tenants, err := creds.Tenants()
	if err != nil {
		return nil, nil, fmt.Errorf("certs: %w", err)
	}
	old, err := os.ReadFile(cfg.path(TenantsConf))
	if err == nil && string(old) == bus.TenantsConf(tenants) {
		return seeds, created, nil
	}
	if err := creds.WriteTenantsConf(cfg.path(TenantsConf)); err != nil {
		return nil, nil, fmt.Errorf("certs: %w", err)
	}
	return seeds, append(created, TenantsConf), nil
}

func (c Config) path(name string) string { return filepath.Join(c.Dir, name) }

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ensureCerts makes the CA and both leaf certificates unless all are there.
func ensureCerts(cfg Config) ([]string, error) {
	all := []string{CAFile, CAKeyFile, ServerCertFile, ServerKeyFile, ClientCertFile, ClientKeyFile}
	if !cfg.Force && !slices.ContainsFunc(all, func(f string) bool { return !exists(cfg.path(f)) }) {
		return nil, nil
	}
	now := time.Now().Add(-5 * time.Minute) // tolerate small clock skew
	caKey, err := newKey()
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "jetway local CA", Organization: []string{"jetway"}},
		NotBefore:             now,
		NotAfter:              now.Add(cfg.ValidFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("certs: sign CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("certs: parse CA: %w", err)
	}
	if err := writeCert(cfg.path(CAFile), caDER); err != nil {
		return nil, err
	}
	if err := writeKey(cfg.path(CAKeyFile), caKey); err != nil {
		return nil, err
	}

	// The server certificate also serves as the client certificate of
	// route connections, which nats-server verifies both ways.
	server := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "jetway nats server", Organization: []string{"jetway"}},
		NotBefore:    now,
		NotAfter:     now.Add(cfg.ValidFor),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range cfg.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			server.IPAddresses = append(server.IPAddresses, ip)
		} else {
			server.DNSNames = append(server.DNSNames, h)
		}
	}
	if err := issue(cfg, "server", server, ca, caKey, ServerCertFile, ServerKeyFile); err != nil {
		return nil, err
	}
	client := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "jetway client", Organization: []string{"jetway"}},
		NotBefore:    now,
		NotAfter:     now.Add(cfg.ValidFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := issue(cfg, "client", client, ca, caKey, ClientCertFile, ClientKeyFile); err != nil {
		return nil, err
	}
	return all, nil
}

func issue(cfg Config, what string, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certFile, keyFile string) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("certs: sign %s certificate: %w", what, err)
	}
	if err := writeCert(cfg.path(certFile), der); err != nil {
		return err
	}
	return writeKey(cfg.path(keyFile), key)
}

func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: generate key: %w", err)
	}
	return k, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}

func writeCert(path string, der []byte) error {
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("certs: encode key for %s: %w", path, err)
	}
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// writeFile replaces path atomically, so a server reading it never sees half
// a file.
func writeFile(path string, data []byte, mode fs.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	return nil
}

var userName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// PasswordVar is the nats-server config variable that holds user's bcrypt
// hash: upper case, dashes to underscores, "_PASSWORD" appended
// ("tenant-acme" → "TENANT_ACME_PASSWORD").
func PasswordVar(user string) string {
	return strings.ToUpper(strings.ReplaceAll(user, "-", "_")) + "_PASSWORD"
}

// EnvVar is the UsersEnv variable that holds user's plain password
// ("tenant-acme" → "NATS_PASSWORD_TENANT_ACME").
func EnvVar(user string) string {
	return "NATS_PASSWORD_" + strings.TrimSuffix(PasswordVar(user), "_PASSWORD")
}

// ensurePasswords keeps existing passwords, adds missing ones, and rewrites
// both password files when anything was added (or either is missing).
func ensurePasswords(cfg Config) (map[string]string, bool, error) {
	existing, err := ReadUsersEnv(cfg.path(UsersEnv))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	users := slices.Clone(cfg.Users)
	slices.Sort(users)
	users = slices.Compact(users)
	plain := map[string]string{}
	changed := !exists(cfg.path(PasswordsConf)) || !exists(cfg.path(UsersEnv))
	// A user no longer in the list (the tenant-<t> users of the layout
	// before tenant accounts) is dropped from both files: nats-server
	// refuses to start on a passwords.conf variable the configuration does
	// not use ("unknown field").
	for k := range existing {
		if !slices.ContainsFunc(users, func(u string) bool { return EnvVar(u) == k }) {
			changed = true
		}
	}
	for _, u := range users {
		if !userName.MatchString(u) {
			return nil, false, fmt.Errorf("certs: user name %q: want letters, digits, '-' or '_'", u)
		}
		if p, ok := existing[EnvVar(u)]; ok {
			plain[u] = p
			continue
		}
		p, err := NewPassword()
		if err != nil {
			return nil, false, fmt.Errorf("certs: password for %s: %w", u, err)
		}
		plain[u] = p
		changed = true
	}
	if !changed {
		return plain, false, nil
	}
	var env, conf bytes.Buffer
	env.WriteString("# Generated by deploy/certs/gen. Plain NATS passwords: keep private, never commit.\n")
	conf.WriteString("# Generated by deploy/certs/gen: bcrypt hashes of the NATS user passwords.\n")
	for _, u := range users {
		hash, err := bcrypt.GenerateFromPassword([]byte(plain[u]), cfg.BcryptCost)
		if err != nil {
			return nil, false, fmt.Errorf("certs: hash password of %s: %w", u, err)
		}
		fmt.Fprintf(&env, "%s=%s\n", EnvVar(u), plain[u])
		fmt.Fprintf(&conf, "%s: %q\n", PasswordVar(u), hash)
	}
	if err := writeFile(cfg.path(UsersEnv), env.Bytes(), 0o600); err != nil {
		return nil, false, err
	}
	if err := writeFile(cfg.path(PasswordsConf), conf.Bytes(), 0o600); err != nil {
		return nil, false, err
	}
	return plain, true, nil
}

// NewPassword returns a fresh NATS user password: "jwp_" and 24 random
// bytes in unpadded base64url, safe inside a URL's user info. The prefix
// is what lets redaction (pkg/redact) hide a password a job prints on its
// own, as it does jetway's "jw_" tokens: 32 random base64url characters
// without one cannot be told from an identifier, and two in three of them
// hold '-' or '_', which splits them into runs too short to look random.
// Passwords made before the prefix are kept (ensurePasswords) and are
// hidden where a name, a URL or a flag says what they are. The redaction
// tests run this generator.
func NewPassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("certs: random password: %w", err)
	}
	return "jwp_" + base64.RawURLEncoding.EncodeToString(b), nil
}

// ReadUsersEnv reads a UsersEnv file into a map of variable to value.
func ReadUsersEnv(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("certs: read %s: %w", path, err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("certs: read %s: line %q is not NAME=value", path, line)
		}
		out[k] = v
	}
	return out, nil
}

var userEntry = regexp.MustCompile(`user:\s*"?([A-Za-z0-9_-]+)"?[\s,]+password:\s*\$([A-Za-z0-9_]+)`)

// UsersInConfig returns the users a nats-server accounts file declares with
// a password variable (user: tenant-acme, password: $TENANT_ACME_PASSWORD),
// so that the accounts file stays the one list of users. A variable that is
// not PasswordVar of its user is an error: the generated hash would not
// reach it.
func UsersInConfig(conf []byte) ([]string, error) {
	var users []string
	for _, m := range userEntry.FindAllSubmatch(conf, -1) {
		user, v := string(m[1]), string(m[2])
		if want := PasswordVar(user); v != want {
			return nil, fmt.Errorf("certs: user %s has password $%s, want $%s", user, v, want)
		}
		users = append(users, user)
	}
	if len(users) == 0 {
		return nil, errors.New("certs: no \"user: NAME, password: $NAME_PASSWORD\" entries found")
	}
	slices.Sort(users)
	return slices.Compact(users), nil
}
