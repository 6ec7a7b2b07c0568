package providers

import (
	"net/http"
	"sync"
	"time"
)

// IdleConnsPerHost is how many idle connections to one model endpoint a
// process keeps for its next calls. Go's default is two: a runner with a
// hundred runs calling at once closed ninety-eight connections after
// every wave of calls and opened them again for the next, each with its
// TLS handshake, to any endpoint that speaks HTTP/1.1 (a local
// OpenAI-compatible server, a proxy in front of a provider). Over HTTP/2
// the calls share one connection and this does not matter.
const IdleConnsPerHost = 256

// responseHeaderTimeout bounds the wait for a response's headers, as the
// Anthropic SDK's default client does: a server that accepts a call and never
// answers does not hold a run for ever. A stream's body is not bounded.
const responseHeaderTimeout = 10 * time.Minute

// HTTPClient is the client every provider this package builds calls its
// model with: one pool of connections per process, shared by every model
// and endpoint, keeping IdleConnsPerHost of them warm for the next calls.
var HTTPClient = sync.OnceValue(func() *http.Client {
	base, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		// Replaced by a wrapper (tracing): it keeps its own pool.
		return &http.Client{Transport: http.DefaultTransport}
	}
	t := base.Clone()
	t.MaxIdleConns = 0 // no bound over all hosts: the per-host one is the bound
	t.MaxIdleConnsPerHost = IdleConnsPerHost
	t.ResponseHeaderTimeout = responseHeaderTimeout
	return &http.Client{Transport: t}
})
