package notifier

import (
	"errors"
	"net/http"
	"net/netip"
	"time"

	"jetway/pkg/egress"
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

// webhookClient is the HTTP client that posts webhooks: every dial through
// the guard, no proxy, no redirects (egress.Guard.Client).
func webhookClient(timeout time.Duration, allowHosts []string) *http.Client {
	return newEgressGuard(allowHosts).Client(timeout)
}
