// Package auth maps bearer tokens to tenants and decides what a caller may do.
//
// Tokens come from a JSON file and from the environment; they are kept in
// memory only as SHA-256 hashes and compared in constant time, so neither a
// heap dump nor response timing gives one away. There is no "auth off" mode:
// a Store with no tokens refuses to be built.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"jetway/pkg/events"
)

// ReservedTypePrefix starts the event types only jobs workers publish (on
// jetway.jobevents.…). No token may publish them, whatever its patterns say:
// otherwise a tenant could forge a job's exit.
const ReservedTypePrefix = "io.jetway.job."

// ReservedAgentTypePrefix starts the event types only runners publish (on
// jetway.agentevents.…, sub-agents): no token may send one.
const ReservedAgentTypePrefix = "io.jetway.agent."

// Errors a caller can test for with errors.Is. Each returned error wraps one
// of them and says what exactly was wrong.
var (
	// ErrNoToken: the request carried no bearer token.
	ErrNoToken = errors.New("no bearer token")
	// ErrUnknownToken: the token is not one this Store knows.
	ErrUnknownToken = errors.New("unknown token")
	// ErrForbidden: the token is known but may not do this.
	ErrForbidden = errors.New("forbidden")
	// ErrNoTokens: a Store was asked for with no tokens at all.
	ErrNoTokens = errors.New("no tokens configured")
)

// Roles a token can hold. A tenant's own tokens are RoleUser or RoleAdmin
// and never reach past the tenant; RoleOperator belongs to whoever runs the
// installation, because only they may stop (or see why someone stopped)
// every tenant at once.
const (
	// RoleUser sends input and events and reads its tenant's sessions.
	RoleUser = "user"
	// RoleAdmin may also flip Ground Stop for its own tenant and sessions.
	RoleAdmin = "admin"
	// RoleOperator may flip and read the global Ground Stop and any
	// tenant's switch. Its tenant is optional; without one it acts for no
	// tenant's sessions.
	RoleOperator = "operator"
)

// Grant is one token and what it may do, as written in a tokens file.
type Grant struct {
	Token  string `json:"token"`
	Tenant string `json:"tenant,omitempty"`
	// Role is RoleUser (the default), RoleAdmin or RoleOperator.
	Role string `json:"role,omitempty"`
	// Admin is the older spelling of Role "admin", still read so tokens
	// files written before roles keep working.
	Admin bool `json:"admin,omitempty"`
	// EventTypes are glob patterns ('*' any run of characters, '?' one) of
	// the CloudEvent types this token may publish. Empty means every type
	// except the reserved io.jetway.job.* and io.jetway.agent.* ones.
	EventTypes []string `json:"event_types,omitempty"`
}

// Principal is who a token belongs to: the tenant it acts for and its rights.
type Principal struct {
	Tenant string
	// Admin may flip Ground Stop for its own tenant (operators are admins
	// too).
	Admin bool
	// Operator may flip and read the global Ground Stop and every tenant's.
	Operator   bool
	eventTypes []string
}

// MayAccess reports whether p may touch sessions of tenant. A tenant only
// ever touches its own sessions; admin rights do not cross tenants either.
func (p Principal) MayAccess(tenant string) error {
	if tenant != p.Tenant {
		return fmt.Errorf("%w: token of tenant %q may not act for tenant %q", ErrForbidden, p.Tenant, tenant)
	}
	return nil
}

// Role is the name of p's role (RoleUser, RoleAdmin or RoleOperator), as
// a tokens file spells it: what the console's header shows, so a person
// signed in can tell which of their tokens they used.
func (p Principal) Role() string {
	switch {
	case p.Operator:
		return RoleOperator
	case p.Admin:
		return RoleAdmin
	}
	return RoleUser
}

// MayPublish reports whether p may publish a CloudEvent of type typ.
func (p Principal) MayPublish(typ string) error {
	if strings.HasPrefix(typ, ReservedTypePrefix) {
		return fmt.Errorf("%w: event type %q is reserved for jobs workers (%s*)", ErrForbidden, typ, ReservedTypePrefix)
	}
	if strings.HasPrefix(typ, ReservedAgentTypePrefix) {
		return fmt.Errorf("%w: event type %q is reserved for runners (%s*, sub-agents)", ErrForbidden, typ, ReservedAgentTypePrefix)
	}
	if len(p.eventTypes) == 0 {
		return nil
	}
	for _, pat := range p.eventTypes {
		if Match(pat, typ) {
			return nil
		}
	}
	return fmt.Errorf("%w: tenant %q may not publish event type %q (allowed: %s)",
		ErrForbidden, p.Tenant, typ, strings.Join(p.eventTypes, ", "))
}

// MayAdminister reports whether p may flip its tenant's switches (Ground
// Stop for the tenant or one of its sessions).
func (p Principal) MayAdminister() error {
	if !p.Admin && !p.Operator {
		return fmt.Errorf("%w: an admin token is required", ErrForbidden)
	}
	return nil
}

// MayOperate reports whether p may touch what spans every tenant: the
// global Ground Stop and other tenants' switches. A tenant admin may not —
// one tenant must not be able to stop, or read why someone stopped, all the
// others.
func (p Principal) MayOperate() error {
	if !p.Operator {
		return fmt.Errorf("%w: only an operator token (role %q) may touch the global Ground Stop or another tenant's switch; a tenant admin acts on its own tenant", ErrForbidden, RoleOperator)
	}
	return nil
}

type entry struct {
	hash      [sha256.Size]byte
	principal Principal
}

// Store answers "whose token is this?". Its tokens can be replaced while
// it answers (Replace), so a tenant added to a running deployment gets its
// tokens without a restart.
type Store struct {
	entries atomic.Pointer[[]entry]
}

// New builds a Store from grants. Every grant needs a token and a valid
// tenant name; the same token may not be given twice with different rights.
func New(grants ...Grant) (*Store, error) {
	if len(grants) == 0 {
		return nil, fmt.Errorf("auth: %w (give a tokens file, JETWAY_TOKENS or JETWAY_ADMIN_TOKEN)", ErrNoTokens)
	}
	s := &Store{}
	var entries []entry
	seen := map[[sha256.Size]byte]int{}
	for i, g := range grants {
		if err := g.validate(); err != nil {
			return nil, fmt.Errorf("auth: token %d (tenant %q): %w", i+1, g.Tenant, err)
		}
		h := sha256.Sum256([]byte(g.Token))
		if j, dup := seen[h]; dup {
			return nil, fmt.Errorf("auth: token %d (tenant %q) repeats token %d (tenant %q)",
				i+1, g.Tenant, j+1, grants[j].Tenant)
		}
		seen[h] = i
		role := g.role()
		entries = append(entries, entry{hash: h, principal: Principal{
			Tenant:     g.Tenant,
			Admin:      role == RoleAdmin || role == RoleOperator,
			Operator:   role == RoleOperator,
			eventTypes: append([]string(nil), g.EventTypes...),
		}})
	}
	s.entries.Store(&entries)
	return s, nil
}

// Replace makes s answer with from's tokens from now on: a token removed
// is refused at its next request, one added is known at once.
func (s *Store) Replace(from *Store) { s.entries.Store(from.entries.Load()) }

func (g Grant) validate() error {
	if g.Token == "" {
		return errors.New("empty token")
	}
	if strings.ContainsFunc(g.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return errors.New("token contains whitespace or control characters")
	}
	switch g.Role {
	case "", RoleUser, RoleAdmin, RoleOperator:
	default:
		return fmt.Errorf("unknown role %q (want %s, %s or %s)", g.Role, RoleUser, RoleAdmin, RoleOperator)
	}
	if g.Admin && g.Role != "" && g.Role != RoleAdmin {
		return fmt.Errorf("admin: true contradicts role %q", g.Role)
	}
	if g.Tenant != "" || g.role() != RoleOperator {
		if err := validTenant(g.Tenant); err != nil {
			return err
		}
	}
	for _, p := range g.EventTypes {
		if p == "" {
			return errors.New("empty event type pattern")
		}
	}
	return nil
}

// role is the grant's role with the legacy admin flag folded in.
func (g Grant) role() string {
	switch {
	case g.Role != "":
		return g.Role
	case g.Admin:
		return RoleAdmin
	}
	return RoleUser
}

// IsAdmin reports whether the grant may flip its tenant's Ground Stop.
func (g Grant) IsAdmin() bool { r := g.role(); return r == RoleAdmin || r == RoleOperator }

// IsOperator reports whether the grant holds the operator role.
func (g Grant) IsOperator() bool { return g.role() == RoleOperator }

// Authenticate returns the principal a token belongs to. Every known token
// is compared, in constant time, so the answer takes as long for a miss as
// for a hit.
func (s *Store) Authenticate(token string) (Principal, error) {
	if token == "" {
		return Principal{}, fmt.Errorf("auth: %w", ErrNoToken)
	}
	h := sha256.Sum256([]byte(token))
	entries := *s.entries.Load()
	found := -1
	for i := range entries {
		if subtle.ConstantTimeCompare(h[:], entries[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, fmt.Errorf("auth: %w", ErrUnknownToken)
	}
	return entries[found].principal, nil
}

// Len is the number of tokens the Store knows.
func (s *Store) Len() int { return len(*s.entries.Load()) }

// BearerToken extracts the token from an Authorization header value
// ("Bearer <token>", scheme case-insensitive). It returns "" when there is
// none, which Authenticate refuses with ErrNoToken.
func BearerToken(header string) string {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// Match reports whether typ matches the glob pattern pat: '*' matches any
// run of characters (dots included, so "com.github.*" covers
// "com.github.push.v1"), '?' exactly one, everything else itself.
func Match(pat, typ string) bool {
	// Iterative wildcard matching with single backtrack point: linear enough
	// for type names, and no pattern can make it blow up.
	p, t := 0, 0
	star, mark := -1, 0
	for t < len(typ) {
		switch {
		case p < len(pat) && (pat[p] == '?' || pat[p] == typ[t]):
			p++
			t++
		case p < len(pat) && pat[p] == '*':
			star, mark = p, t
			p++
		case star >= 0:
			p = star + 1
			mark++
			t = mark
		default:
			return false
		}
	}
	for p < len(pat) && pat[p] == '*' {
		p++
	}
	return p == len(pat)
}

// validTenant holds tenants to the subject token rule, so a token can never
// name a tenant that would break (or widen) a subject.
func validTenant(tenant string) error {
	return events.ValidateToken("tenant", tenant)
}
