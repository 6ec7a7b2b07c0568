package dispatcher

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/pkg/auth"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/events"
)

// stopCore is Ground Stop: reading and flipping the switches, and which of
// them cover a session (detail.go), from the bucket or from the in-memory
// mirror (stopmirror.go) that input answers read.
type stopCore struct {
	*store
	log zerolog.Logger

	// stops mirrors the Ground Stop switches for input answers.
	stopsOnce sync.Once
	stops     *groundstop.Mirror
}

// StopTarget names the switch a Ground Stop call is about. The zero value
// means the caller's default: the global switch for an operator, the
// caller's own tenant for everyone else — so an old "POST /v1/stop" from a
// tenant admin stops that tenant, never every tenant.
type StopTarget struct {
	// Scope is "" (the default), "global" or "tenant".
	Scope string
	// Tenant names another tenant (operators only); empty is the caller's.
	Tenant  string
	Session string
}

// ScopeByOperator is the Record.By of switches an operator flipped.
const ScopeByOperator = "operator"

// resolveStop turns a target into the switch's tenant and session (both
// empty for the global switch) and the scope to report, refusing what p may
// not address. Reads and writes share it: a tenant may neither flip nor read
// the global switch's reason or another tenant's switch.
func resolveStop(p auth.Principal, t StopTarget) (tenant, session, scope string, err error) {
	switch t.Scope {
	case "", "tenant":
	case "global":
		if t.Tenant != "" || t.Session != "" {
			return "", "", "", problem(http.StatusBadRequest, "bad-request", "Conflicting Ground Stop scope",
				"scope=global names no tenant or session; drop tenant and session, or the scope")
		}
		if err := p.MayOperate(); err != nil {
			return "", "", "", err
		}
		return "", "", "global", nil
	default:
		return "", "", "", problemf(http.StatusBadRequest, "bad-request", "Unknown Ground Stop scope",
			"scope %q: want global or tenant", shortenQ(t.Scope))
	}
	if t.Scope == "" && t.Tenant == "" && t.Session == "" && p.Operator {
		return "", "", "global", nil
	}
	tenant = t.Tenant
	if tenant == "" {
		tenant = p.Tenant
	}
	if tenant == "" {
		return "", "", "", problem(http.StatusBadRequest, "bad-request", "No tenant",
			"this operator token belongs to no tenant; name one with tenant=")
	}
	if err := events.ValidateToken("tenant", tenant); err != nil {
		return "", "", "", err
	}
	if tenant != p.Tenant {
		if err := p.MayOperate(); err != nil {
			return "", "", "", err
		}
	}
	if t.Session == "" {
		return tenant, "", tenant + "/*", nil
	}
	if err := events.ValidateToken("session", t.Session); err != nil {
		return "", "", "", err
	}
	return tenant, t.Session, tenant + "/" + t.Session, nil
}

// stopBy is what a switch records as who set it.
func stopBy(p auth.Principal) string {
	if p.Operator {
		return ScopeByOperator
	}
	return p.Tenant
}

// SetStop turns Ground Stop on: globally (operators only), for a tenant or
// for one session.
func (d *stopCore) SetStop(ctx context.Context, p auth.Principal, t StopTarget, req StopRequest) (StopState, error) {
	rec := groundstop.Record{Reason: req.Reason, By: stopBy(p), At: time.Now().UTC()}
	sw, err := d.flip(ctx, p, t, rec, true)
	if err != nil {
		return StopState{}, err
	}
	d.log.Warn().Str("by", rec.By).Str("tenant", p.Tenant).Str("scope", sw.scope).Str("reason", req.Reason).Msg("Ground Stop on")
	return StopState{GroundStop: true, Scope: sw.scope, Reason: rec.Reason, By: rec.By, At: rec.At}, nil
}

// ClearStop turns Ground Stop off, with the same scopes as SetStop.
func (d *stopCore) ClearStop(ctx context.Context, p auth.Principal, t StopTarget) (StopState, error) {
	sw, err := d.flip(ctx, p, t, groundstop.Record{}, false)
	if err != nil {
		return StopState{}, err
	}
	d.log.Warn().Str("by", stopBy(p)).Str("tenant", p.Tenant).Str("scope", sw.scope).Msg("Ground Stop off")
	return StopState{GroundStop: false, Scope: sw.scope}, nil
}

// addressed is the switch a Ground Stop call is about, resolved for its
// caller (resolveStop), with the bucket it lives in open.
type addressed struct {
	tenant, session, scope string
	kv                     jetstream.KeyValue
}

// address resolves t for p and opens the control bucket; reads and flips
// share it, so both refuse the same targets the same way.
func (d *stopCore) address(ctx context.Context, p auth.Principal, t StopTarget) (addressed, error) {
	tenant, session, scope, err := resolveStop(p, t)
	if err != nil {
		return addressed{}, err
	}
	kv, err := d.controlBucket(ctx)
	if err != nil {
		return addressed{}, err
	}
	return addressed{tenant: tenant, session: session, scope: scope, kv: kv}, nil
}

// flip turns the switch t addresses on (storing rec) or off, an admin
// token's right, and tells the mirror at once so this dispatcher's next
// answer already says so.
func (d *stopCore) flip(ctx context.Context, p auth.Principal, t StopTarget, rec groundstop.Record, on bool) (addressed, error) {
	if err := p.MayAdminister(); err != nil {
		return addressed{}, err
	}
	sw, err := d.address(ctx, p, t)
	if err != nil {
		return addressed{}, err
	}
	what := "clear Ground Stop"
	if on {
		what = "set Ground Stop"
		_, err = groundstop.Set(ctx, sw.kv, sw.tenant, sw.session, rec)
	} else {
		err = groundstop.Clear(ctx, sw.kv, sw.tenant, sw.session)
	}
	if err != nil {
		return addressed{}, unavailable(what, err)
	}
	if key, err := groundstop.Key(sw.tenant, sw.session); err == nil {
		d.flipped(key, rec, on)
	}
	return sw, nil
}

// Stop reads a Ground Stop switch. Any token may read its own tenant's
// switches; of the global one a tenant learns only whether it is on.
func (d *stopCore) Stop(ctx context.Context, p auth.Principal, t StopTarget) (StopState, error) {
	sw, err := d.address(ctx, p, t)
	if err != nil {
		return StopState{}, err
	}
	tenant, session, scope, kv := sw.tenant, sw.session, sw.scope, sw.kv
	rec, on, err := groundstop.Get(ctx, kv, tenant, session)
	if err != nil {
		return StopState{}, unavailable("read Ground Stop", err)
	}
	st := StopState{GroundStop: on, Scope: scope, Reason: rec.Reason, By: rec.By, At: rec.At}
	if scope == "global" {
		return st, nil
	}
	_, global, err := groundstop.Get(ctx, kv, "", "")
	if err != nil {
		return StopState{}, unavailable("read Ground Stop", err)
	}
	st.GlobalStop = &global
	if session != "" {
		_, tenantOn, err := groundstop.Get(ctx, kv, tenant, "")
		if err != nil {
			return StopState{}, unavailable("read Ground Stop", err)
		}
		st.TenantStop = &tenantOn
		if st.Covering, err = d.coveringSession(ctx, p, tenant, session); err != nil {
			return StopState{}, err
		}
		return st, nil
	}
	sws, err := groundstop.Sessions(ctx, kv, tenant)
	if err != nil {
		return StopState{}, unavailable("list Ground Stop switches", err)
	}
	for _, sw := range sws {
		st.Sessions = append(st.Sessions, StopState{GroundStop: true, Scope: tenant + "/" + sw.Session,
			Reason: sw.Record.Reason, By: sw.Record.By, At: sw.Record.At})
	}
	return st, nil
}
