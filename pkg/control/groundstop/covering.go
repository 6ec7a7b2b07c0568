package groundstop

import "slices"

// Scope is one switch that stops a session while it is on.
type Scope struct {
	// Name is what a person is told the switch is: "global", "tenant",
	// "session" (the session's own) or "ancestor" (a sub-agent's
	// ancestor's: its root's switch holds the whole tree).
	Name string
	// Tenant and Session are the switch's own scope: both empty for the
	// global switch, Session empty for a tenant's.
	Tenant, Session string
}

// Key is the control-bucket key of the switch.
func (s Scope) Key() string {
	switch {
	case s.Tenant == "":
		return KeyGlobal
	case s.Session == "":
		return KeyGlobal + "." + s.Tenant
	}
	return KeyGlobal + "." + s.Tenant + "." + s.Session
}

// Covering lists, widest first, every switch that stops tenant/session:
// the global one, the tenant's, the session's own and, for a sub-agent,
// each ancestor's in lineage (root first). It is the one answer to "what
// covers a session", so the runner that holds a sub-agent by its root's
// switch and the dispatcher that shows why it is held cannot disagree.
func Covering(tenant, session string, lineage []string) []Scope {
	out := make([]Scope, 0, 3+len(lineage))
	out = append(out, Scope{Name: "global"}, Scope{Name: "tenant", Tenant: tenant}, Scope{Name: "session", Tenant: tenant, Session: session})
	for _, s := range lineage {
		out = append(out, Scope{Name: "ancestor", Tenant: tenant, Session: s})
	}
	return out
}

// Covers reports whether the switch that changed stops tenant/session, or
// (a sub-agent) any of its ancestors in lineage.
func (c Change) Covers(tenant, session string, lineage ...string) bool {
	return slices.ContainsFunc(Covering(tenant, session, lineage), func(s Scope) bool {
		return s.Tenant == c.Tenant && s.Session == c.Session
	})
}
