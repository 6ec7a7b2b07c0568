package dispatcher

import (
	"fmt"
	"net/http"
	"sync"

	"golang.org/x/time/rate"

	"jetway/pkg/auth"
)

// gate is what every request passes before a core sees it, on either
// transport: its bearer token mapped to a principal and a token taken from
// the tenant's rate bucket. One gate serves both transports, so a tenant
// has one bucket however it calls.
type gate struct {
	auth *auth.Store
	// rate and burst size each tenant's bucket; a negative rate turns
	// limiting off (Config.RatePerSecond, Config.RateBurst).
	perSecond float64
	burst     int

	limMu    sync.Mutex
	limiters map[string]*rate.Limiter
}

func newGate(a *auth.Store, perSecond float64, burst int) *gate {
	return &gate{auth: a, perSecond: perSecond, burst: burst, limiters: map[string]*rate.Limiter{}}
}

// authenticate maps a bearer token to its principal and takes one token
// from the tenant's rate bucket.
func (d *gate) authenticate(token string) (auth.Principal, error) {
	p, err := d.auth.Authenticate(token)
	if err != nil {
		return auth.Principal{}, err
	}
	if err := d.allow(p.Tenant); err != nil {
		return auth.Principal{}, err
	}
	return p, nil
}

// needsTenant refuses a principal of no tenant (an operator token given
// without one) everything but Ground Stop: every other operation is keyed by
// the caller's tenant, and an empty one must never become a key prefix that
// matches every tenant's records.
func needsTenant(p auth.Principal) error {
	if p.Tenant == "" {
		return fmt.Errorf("%w: this operator token belongs to no tenant; it may only use Ground Stop (give it a tenant to act for one)", auth.ErrForbidden)
	}
	return nil
}

// allow applies the tenant's token bucket. A refused request reserves
// nothing, and its problem says when to come back.
func (d *gate) allow(tenant string) error {
	if d.perSecond < 0 {
		return nil
	}
	d.limMu.Lock()
	lim, ok := d.limiters[tenant]
	if !ok {
		lim = rate.NewLimiter(rate.Limit(d.perSecond), d.burst)
		d.limiters[tenant] = lim
	}
	d.limMu.Unlock()
	r := lim.Reserve()
	if !r.OK() {
		return problem(http.StatusTooManyRequests, "rate-limited", "Too many requests",
			"the tenant's rate limit admits no requests")
	}
	if delay := r.Delay(); delay > 0 {
		r.Cancel()
		p := problemf(http.StatusTooManyRequests, "rate-limited", "Too many requests",
			"tenant %q is over its limit of %g requests per second (burst %d)", tenant, d.perSecond, d.burst)
		p.RetryAfter = retryAfterSeconds(delay)
		return p
	}
	return nil
}
