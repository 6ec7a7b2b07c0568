package agents

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"jetway/pkg/events"
)

// MCP secrets. A profile names the secrets its servers need; their values
// live only in the environment of the jobs workers (stdio secrets) and
// the runners (http headers). Which variable a name reads is decided in
// this file and nowhere else, so that no spelling in one tenant's profile
// reads another tenant's variable:
//
//   - a plain name reads JETWAY_MCP_SECRET_<TENANT>__<NAME> of the
//     profile's own tenant and nothing else: there is no fallback to a
//     name every tenant reaches, since a fallback is a name some other
//     tenant's profile can also write;
//   - shared:<name> reads JETWAY_MCP_SHARED_SECRET_<NAME>, which an
//     operator sets on purpose, knowing every tenant's profiles may name
//     it. Its prefix differs from a tenant's, so neither form reaches the
//     other.
//
// <TENANT> is the tenant written injectively: a lowercase letter
// upper-cased, a digit as itself, and every other byte (-, _, an
// uppercase letter) as _ and its two hex digits, so acme is ACME, my-org
// MY_2DORG and Acme _41CME. It never holds "__", so the first "__" after
// the prefix ends it, and no two tenants share it. <NAME> is the name
// upper-cased with - as _; a name is words of letters and digits joined
// by single separators, so it never starts with or holds "__" either.

// Prefixes of the variables secrets are read from. They are unexported so
// that a variable name is only ever made by mcpSecretVar.
const (
	mcpSecretPrefix       = "JETWAY_MCP_SECRET_"
	mcpSharedSecretPrefix = "JETWAY_MCP_SHARED_SECRET_"
)

// MCPSharedRef starts a profile's name of a shared secret:
// shared:<name>.
const MCPSharedRef = "shared:"

// maxSecretName bounds a secret's name, like a profile's.
const maxSecretName = 64

// mcpSecretNameProblem says what keeps name from being a secret's name,
// or "" when nothing does. A name is words of A-Z a-z 0-9 joined by
// single - or _: without runs and leading or trailing separators its
// variable's part holds no "__", which is what keeps the variable's
// tenant and name apart.
func mcpSecretNameProblem(name string) string {
	if name == "" {
		return "is empty"
	}
	if len(name) > maxSecretName {
		return fmt.Sprintf("is %d bytes, at most %d", len(name), maxSecretName)
	}
	prevSep := false
	for i, r := range name {
		sep := r == '-' || r == '_'
		switch {
		case sep && i == 0:
			return fmt.Sprintf("starts with %q", r)
		case sep && i == len(name)-1:
			return fmt.Sprintf("ends with %q", r)
		case sep && prevSep:
			return fmt.Sprintf("has %q, a run of separators", name[i-1:i+1])
		case !sep && !alnum(r):
			if r == utf8.RuneError {
				return "is not valid UTF-8"
			}
			return fmt.Sprintf("has %q, which is not a letter, digit, - or _", r)
		}
		prevSep = sep
	}
	return ""
}

func alnum(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' }

// MCPSecretRefProblem says what is wrong with ref as the name of a secret
// in a profile's secrets or headers, or "" when nothing is. Validate
// refuses a profile with it, and the lookup refuses it again for
// profiles stored before the rule.
func MCPSecretRefProblem(ref string) string {
	if holdsSecret(ref) {
		// Not quoted: the error must not carry what may be a credential.
		return "this looks like a secret itself, not a secret's name; a profile names secrets, it never holds them"
	}
	name, shared := strings.CutPrefix(ref, MCPSharedRef)
	why := mcpSecretNameProblem(name)
	if why == "" {
		return ""
	}
	if shared {
		why = "the name after " + MCPSharedRef + " " + why
	} else {
		why = "it " + why
	}
	return fmt.Sprintf("%q is not a secret's name: %s; a secret's name is 1–64 letters and digits in words joined by a single - or _ (github-token), or shared:<name> for a secret the operator shares with every tenant. A profile names secrets, it never holds them",
		ref, why)
}

// MCPSecretVar is the one variable ref, a name in a profile of tenant,
// is read from (see the top of this file). It fails for a ref
// MCPSecretRefProblem refuses and for a tenant that is not a valid
// tenant token.
func MCPSecretVar(tenant, ref string) (string, error) {
	if why := MCPSecretRefProblem(ref); why != "" {
		return "", errors.New(why)
	}
	if err := events.ValidateToken("tenant", tenant); err != nil {
		return "", fmt.Errorf("secret %q: %w", ref, err)
	}
	if name, ok := strings.CutPrefix(ref, MCPSharedRef); ok {
		return mcpSharedSecretPrefix + envName(name), nil
	}
	return mcpSecretPrefix + envTenant(tenant) + "__" + envName(ref), nil
}

// ResolveMCPSecret reads the secret ref names in a profile of tenant from
// env (nil: the process's environment), for a server on where (such as
// "jobs worker w1"). An empty value counts as not set. The error names
// the variable to set and never a value. It is the only way a secret's
// value is read: a worker's or runner's configuration may change env, the
// variables' source, never which variable a tenant's name reaches.
func ResolveMCPSecret(env func(string) (string, bool), tenant, ref, where string) (string, error) {
	v, err := MCPSecretVar(tenant, ref)
	if err != nil {
		return "", err
	}
	if env == nil {
		env = os.LookupEnv
	}
	if val, ok := env(v); ok && val != "" {
		return val, nil
	}
	if name, shared := strings.CutPrefix(ref, MCPSharedRef); shared {
		return "", fmt.Errorf("shared secret %q is not configured on %s (set %s there; every tenant's profiles may name it)", name, where, v)
	}
	return "", fmt.Errorf("secret %q of tenant %s is not configured on %s (set %s there)", ref, tenant, where, v)
}

// MCPSecretVarTenant is the tenant whose profiles read variable v, the
// inverse of MCPSecretVar for plain names; false when no tenant's do (v
// is shared, not a secret's variable, or not one MCPSecretVar makes).
func MCPSecretVarTenant(v string) (string, bool) {
	rest, ok := strings.CutPrefix(v, mcpSecretPrefix)
	if !ok {
		return "", false
	}
	enc, name, ok := strings.Cut(rest, "__")
	if !ok || mcpSecretNameProblem(name) != "" || name != envName(name) {
		return "", false
	}
	var tenant []byte
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		switch {
		case c >= 'A' && c <= 'Z':
			tenant = append(tenant, c-'A'+'a')
		case c >= '0' && c <= '9':
			tenant = append(tenant, c)
		case c == '_' && i+3 <= len(enc):
			b, ok := unhex(enc[i+1 : i+3])
			// Only the escape envTenant writes: a lowercase letter or
			// digit is never escaped.
			if !ok || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' {
				return "", false
			}
			tenant = append(tenant, b)
			i += 2
		default:
			return "", false
		}
	}
	if events.ValidateToken("tenant", string(tenant)) != nil || envTenant(string(tenant)) != enc {
		return "", false
	}
	return string(tenant), true
}

// UnreadMCPSecretVars are the variables of environ (os.Environ's form)
// that start like a tenant's secret but that no profile reads, sorted:
// above all the unscoped JETWAY_MCP_SECRET_<NAME> every tenant's profiles
// read before. Workers and runners warn of them at start, naming the
// variable, never its value, so an upgrade does not silently drop a
// secret.
func UnreadMCPSecretVars(environ []string) []string {
	var out []string
	for _, kv := range environ {
		v, _, _ := strings.Cut(kv, "=")
		if _, ok := MCPSecretVarTenant(v); strings.HasPrefix(v, mcpSecretPrefix) && !ok {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// UnreadMCPSecretWarning is what a worker or runner logs of the
// variables UnreadMCPSecretVars finds.
func UnreadMCPSecretWarning(vars []string) string {
	return fmt.Sprintf("no profile reads %s: a tenant's secret is JETWAY_MCP_SECRET_<TENANT>__<NAME>, a secret for every tenant JETWAY_MCP_SHARED_SECRET_<NAME> named shared:<name> (docs/OPERATIONS.md, MCP secrets)",
		strings.Join(vars, ", "))
}

// envTenant writes tenant injectively in a variable's characters (see the
// top of this file).
func envTenant(tenant string) string {
	var b strings.Builder
	for i := 0; i < len(tenant); i++ {
		switch c := tenant[i]; {
		case c >= 'a' && c <= 'z':
			b.WriteByte(c - 'a' + 'A')
		case c >= '0' && c <= '9':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "_%02X", c)
		}
	}
	return b.String()
}

// envName is a secret's name as its variable writes it: upper-cased, -
// as _. Names of one tenant that differ only so read one variable, which
// is that tenant's own.
func envName(name string) string { return strings.ToUpper(strings.ReplaceAll(name, "-", "_")) }

func unhex(s string) (byte, bool) {
	var b byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			b = b<<4 | (c - '0')
		case c >= 'A' && c <= 'F':
			b = b<<4 | (c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return b, len(s) == 2
}
