package notifier

import (
	"errors"
	"net/http"
	"net/netip"
	"time"

	"jetway/internal/egress"
)

// ErrForbiddenTarget is wrapped by every refusal to connect to a webhook
// target on a loopback, link-local, private, unspecified or multicast
// address that no operator allowed (package egress holds the rule).
var ErrForbiddenTarget = egress.ErrForbiddenTarget

// forbiddenAddr names the kind of address a webhook may not reach unless
// allowed, or "" when ip is an ordinary public address.
func forbiddenAddr(ip netip.Addr) string { return egress.ForbiddenAddr(ip) }

// newEgressGuard dials webhook targets, refusing forbidden addresses
// unless their host name is on the operator's allow list.
func newEgressGuard(allowHosts []string) *egress.Guard {
	return egress.NewGuard(allowHosts, "webhook", "--webhook-allow-host")
}

// errRedirect marks a 3xx answer: never followed, because following would
// send the body and its signature to wherever the receiver points, another
// host included.
var errRedirect = errors.New("redirects are not followed")

// webhookClient is the HTTP client that posts webhooks: no redirects, no
// proxy from the environment (a proxy would be dialled instead of the
// target and the address check would see only the proxy), every dial
// through the guard.
func webhookClient(timeout time.Duration, allowHosts []string) *http.Client {
	g := newEgressGuard(allowHosts)
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           g.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		CheckRedirect: noRedirects,
	}
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
