package auth

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// File is the on-disk form of a tokens file:
//
//	{"tokens":[
//	  {"token":"...","tenant":"acme","event_types":["com.github.*"]},
//	  {"token":"...","tenant":"acme","role":"admin"},
//	  {"token":"...","role":"operator"}
//	],
//	 "operators":[{"token":"..."}]}
//
// An operator token may sit in "tokens" with role "operator" or in
// "operators" (role implied). `jetway dev` writes its operator under
// "operators", so scripts that pick a dev token with
// `.tokens[] | select(.admin)` or `select(.admin | not)` still get exactly one.
type File struct {
	Tokens    []Grant `json:"tokens"`
	Operators []Grant `json:"operators,omitempty"`
}

// Grants are all of the file's grants, operators with their role set.
func (f File) Grants() []Grant {
	out := append([]Grant(nil), f.Tokens...)
	for _, g := range f.Operators {
		if g.Role == "" {
			g.Role = RoleOperator
		}
		out = append(out, g)
	}
	return out
}

// validate refuses an "operators" entry with another role.
func (f File) validate() error {
	for i, g := range f.Operators {
		if (g.Role != "" && g.Role != RoleOperator) || g.Admin {
			return fmt.Errorf("operators[%d]: an operator entry may not have role %q or admin", i, g.Role)
		}
	}
	return nil
}

// Environment variables read by FromEnv.
const (
	// EnvTokens lists tenant tokens as token:tenant pairs separated by commas.
	EnvTokens = "JETWAY_TOKENS"
	// EnvAdminToken is one admin token, optionally token:tenant (tenant
	// defaults to DefaultTenant).
	EnvAdminToken = "JETWAY_ADMIN_TOKEN"
	// EnvOperatorToken is one operator token (role "operator"), optionally
	// token:tenant. It is the only kind that flips the global Ground Stop.
	EnvOperatorToken = "JETWAY_OPERATOR_TOKEN"
)

// DefaultTenant is the tenant of dev tokens and of an admin token given
// without one.
const DefaultTenant = "default"

// DevTokensFile is the name of the tokens file EnsureDevTokens keeps in the
// data directory.
const DevTokensFile = "tokens.json"

// ReadFile reads a tokens file. A file others can read is refused: it holds
// secrets in clear, and quietly accepting one would teach people to leave it
// so.
func ReadFile(path string) (File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return File{}, fmt.Errorf("auth: tokens file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return File{}, fmt.Errorf("auth: tokens file %s has mode %04o; it holds secrets, run: chmod 600 %s",
			path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("auth: tokens file: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return File{}, fmt.Errorf("auth: tokens file %s: %w", path, err)
	}
	if err := f.validate(); err != nil {
		return File{}, fmt.Errorf("auth: tokens file %s: %w", path, err)
	}
	return f, nil
}

// FromEnv reads grants from JETWAY_TOKENS, JETWAY_ADMIN_TOKEN and
// JETWAY_OPERATOR_TOKEN through
// getenv (os.Getenv when nil). Unset variables give no grants.
func FromEnv(getenv func(string) string) ([]Grant, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var grants []Grant
	if v := strings.TrimSpace(getenv(EnvTokens)); v != "" {
		for i, pair := range strings.Split(v, ",") {
			pair = strings.TrimSpace(pair)
			tok, tenant, ok := strings.Cut(pair, ":")
			if !ok || tok == "" || tenant == "" {
				return nil, fmt.Errorf("auth: %s entry %d: want token:tenant", EnvTokens, i+1)
			}
			grants = append(grants, Grant{Token: tok, Tenant: tenant})
		}
	}
	if v := strings.TrimSpace(getenv(EnvAdminToken)); v != "" {
		tok, tenant, ok := strings.Cut(v, ":")
		if !ok {
			tenant = DefaultTenant
		}
		if tok == "" || tenant == "" {
			return nil, fmt.Errorf("auth: %s: want token or token:tenant", EnvAdminToken)
		}
		grants = append(grants, Grant{Token: tok, Tenant: tenant, Admin: true})
	}
	if v := strings.TrimSpace(getenv(EnvOperatorToken)); v != "" {
		tok, tenant, _ := strings.Cut(v, ":")
		if tok == "" {
			return nil, fmt.Errorf("auth: %s: want token or token:tenant", EnvOperatorToken)
		}
		grants = append(grants, Grant{Token: tok, Tenant: tenant, Role: RoleOperator})
	}
	return grants, nil
}

// Sources says where a Store's tokens come from. Both are read and merged.
type Sources struct {
	// File is a tokens file; empty for none.
	File string
	// Getenv reads JETWAY_TOKENS and JETWAY_ADMIN_TOKEN; nil means os.Getenv.
	Getenv func(string) string
}

// Load builds a Store from a tokens file and the environment. It fails
// with ErrNoTokens when neither gives a token.
func Load(src Sources) (*Store, error) {
	var grants []Grant
	if src.File != "" {
		f, err := ReadFile(src.File)
		if err != nil {
			return nil, err
		}
		grants = append(grants, f.Grants()...)
	}
	env, err := FromEnv(src.Getenv)
	if err != nil {
		return nil, err
	}
	return New(append(grants, env...)...)
}

// DevTokens is what EnsureDevTokens made or found.
type DevTokens struct {
	Path     string // <data>/tokens.json
	User     Grant  // the first non-admin grant (tenant "default" when created)
	Admin    Grant  // the first tenant admin grant (not an operator)
	Operator Grant  // the first operator grant
}

// EnsureDevTokens makes sure <dataDir>/tokens.json exists, creating it
// (mode 0600) on first start with three random tokens for tenant "default":
// a user and a tenant admin in "tokens", and an operator (the only one that
// flips the global Ground Stop) in "operators"; and returns what it holds. A file written before roles
// existed gets its operator token added, so an old data directory can still
// stop everything. Concurrent first starts agree on one file: it is written
// aside and linked into place, which fails if another got there first.
func EnsureDevTokens(dataDir string) (DevTokens, error) {
	path := filepath.Join(dataDir, DevTokensFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if err := createDevTokens(dataDir, path); err != nil {
			return DevTokens{}, err
		}
	} else if err != nil {
		return DevTokens{}, fmt.Errorf("auth: dev tokens: %w", err)
	}
	f, err := ReadFile(path)
	if err != nil {
		return DevTokens{}, err
	}
	if !slices.ContainsFunc(f.Grants(), Grant.IsOperator) {
		if f, err = addDevOperator(dataDir, path, f); err != nil {
			return DevTokens{}, err
		}
	}
	if _, err := New(f.Grants()...); err != nil {
		return DevTokens{}, fmt.Errorf("auth: dev tokens %s: %w", path, err)
	}
	dt := DevTokens{Path: path}
	for _, g := range f.Grants() {
		switch {
		case g.IsOperator():
			if dt.Operator.Token == "" {
				dt.Operator = g
			}
		case g.IsAdmin():
			if dt.Admin.Token == "" {
				dt.Admin = g
			}
		default:
			if dt.User.Token == "" {
				dt.User = g
			}
		}
	}
	return dt, nil
}

// addDevOperator adds an operator token to a dev tokens file that has none
// and replaces it in one rename, then reads back what is there (another
// process may have done the same at once; the file it left wins).
func addDevOperator(dataDir, path string, f File) (File, error) {
	op, err := NewToken()
	if err != nil {
		return File{}, err
	}
	f.Operators = append(f.Operators, Grant{Token: op, Tenant: DefaultTenant})
	tmp, err := writeAside(dataDir, f)
	if err != nil {
		return File{}, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return File{}, errors.Join(fmt.Errorf("auth: dev tokens: add operator token to %s: %w", path, err), dropAside(tmp))
	}
	return ReadFile(path)
}

func createDevTokens(dataDir, path string) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("auth: dev tokens: %w", err)
	}
	var toks [3]string
	for i := range toks {
		t, err := NewToken()
		if err != nil {
			return err
		}
		toks[i] = t
	}
	// The tenant admin keeps the "admin": true spelling and the operator
	// goes under "operators", so "tokens" reads as it always did: one user,
	// one admin.
	tmp, err := writeAside(dataDir, File{
		Tokens: []Grant{
			{Token: toks[0], Tenant: DefaultTenant},
			{Token: toks[1], Tenant: DefaultTenant, Admin: true},
		},
		Operators: []Grant{{Token: toks[2], Tenant: DefaultTenant}},
	})
	if err != nil {
		return err
	}
	// A link, not a rename: a file another dev start linked first wins.
	err = os.Link(tmp, path)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		err = fmt.Errorf("auth: dev tokens: create %s: %w", path, err)
	} else {
		err = nil
	}
	return errors.Join(err, dropAside(tmp))
}

// writeAside writes f to a new private file in dir, synced, and returns its
// name.
func writeAside(dir string, f File) (string, error) {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return "", fmt.Errorf("auth: dev tokens: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".tokens-*.json")
	if err != nil {
		return "", fmt.Errorf("auth: dev tokens: %w", err)
	}
	fail := func(err error) (string, error) {
		_ = tmp.Close() // the failure at hand is the one to report
		return "", errors.Join(err, dropAside(tmp.Name()))
	}
	if err := tmp.Chmod(0o600); err != nil {
		return fail(fmt.Errorf("auth: dev tokens: %w", err))
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		return fail(fmt.Errorf("auth: dev tokens: write %s: %w", tmp.Name(), err))
	}
	if err := tmp.Sync(); err != nil {
		return fail(fmt.Errorf("auth: dev tokens: sync %s: %w", tmp.Name(), err))
	}
	if err := tmp.Close(); err != nil {
		return "", errors.Join(fmt.Errorf("auth: dev tokens: %w", err), dropAside(tmp.Name()))
	}
	return tmp.Name(), nil
}

// dropAside removes a file writeAside made. It holds tokens, so a copy
// left behind is a leak and a failure to remove it is an error; a file a
// rename already took is not.
func dropAside(name string) error {
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("auth: remove the tokens' temporary copy: %w", err)
	}
	return nil
}

// NewToken returns a fresh random token: "jw_" and 32 random bytes in
// unpadded base64url. The prefix makes leaked tokens easy to grep for.
func NewToken() (string, error) { return prefixedToken("jw_") }

// NewDevBusToken returns a fresh token for the dev bus (the embedded NATS
// server of `jetway dev`): "jwn_" and 32 random bytes in unpadded
// base64url. It lives here, beside NewToken, so that the redaction tests
// run the very generator the dev command uses (pkg/redact).
func NewDevBusToken() (string, error) { return prefixedToken("jwn_") }

// SignInCodePrefix starts every one-time console sign-in code, so a
// person, a secret scanner and the redactor can tell one from a token.
const SignInCodePrefix = "jwsi_"

// NewSignInCode returns a fresh one-time console sign-in code: the prefix
// and 160 random bits in unpadded lower-case base32 (easy to read out and
// type). It lives here, beside NewToken, so that the redaction tests run
// the very generator the dispatcher uses (pkg/redact).
func NewSignInCode() (string, error) {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("auth: random sign-in code: %w", err)
	}
	return SignInCodePrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b)), nil
}

func prefixedToken(prefix string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("auth: random token: %w", err)
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// WriteFile replaces the tokens file at path with f in one rename (mode
// 0600), so a dispatcher reloading at that moment reads a whole file.
func WriteFile(path string, f File) error {
	tmp, err := writeAside(filepath.Dir(path), f)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(fmt.Errorf("auth: tokens file %s: %w", path, err), dropAside(tmp))
	}
	return nil
}
