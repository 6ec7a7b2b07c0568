// Package retry is the one retry policy of the model providers: exponential
// backoff with jitter on rate limits, overload and server errors, honouring
// the server's retry-after, bounded and context-aware. The providers turn
// their SDKs' own retries off so there is exactly one policy, in one place,
// that a test can see.
package retry

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of a zero Policy.
const (
	DefaultMaxRetries    = 3
	DefaultBaseDelay     = 500 * time.Millisecond
	DefaultMaxDelay      = 30 * time.Second
	DefaultMaxRetryAfter = 60 * time.Second
)

// Policy says how often and how long to wait between attempts. The zero
// value is the default policy.
type Policy struct {
	// MaxRetries bounds the attempts after the first: 0 means
	// DefaultMaxRetries, a negative value means none.
	MaxRetries int
	// BaseDelay is the first backoff; each retry doubles it up to MaxDelay.
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// MaxRetryAfter is the longest server-asked wait honoured; a server
	// asking for longer gets no retry, since the caller is better off told
	// now than blocked for minutes.
	MaxRetryAfter time.Duration
	// OnRetry, if set, is told about each retry before its wait (for logs
	// and metrics).
	OnRetry func(attempt int, wait time.Duration, err error)
}

// Verdict is what a classifier says about a failed attempt.
type Verdict struct {
	Retry bool
	// After is the wait the server asked for, 0 if it asked for none.
	After time.Duration
}

func (p Policy) maxRetries() int {
	switch {
	case p.MaxRetries < 0:
		return 0
	case p.MaxRetries == 0:
		return DefaultMaxRetries
	}
	return p.MaxRetries
}

// Backoff is the wait before retry number attempt (1-based) when the server
// asked for none: BaseDelay doubled per attempt, capped at MaxDelay, with
// jitter taking it down by up to half so that clients spread out.
func (p Policy) Backoff(attempt int) time.Duration {
	base, ceil := p.BaseDelay, p.MaxDelay
	if base <= 0 {
		base = DefaultBaseDelay
	}
	if ceil <= 0 {
		ceil = DefaultMaxDelay
	}
	d := base
	for i := 1; i < attempt && d < ceil; i++ {
		d *= 2
	}
	d = min(d, ceil)
	return d - time.Duration(rand.Int64N(int64(d/2)+1))
}

// Do runs op until it succeeds, classify says its error is not worth a
// retry, the retries are used up or ctx ends. It returns op's last error
// (or ctx's, if ctx ended while waiting).
func (p Policy) Do(ctx context.Context, classify func(error) Verdict, op func(ctx context.Context) error) error {
	maxAfter := p.MaxRetryAfter
	if maxAfter <= 0 {
		maxAfter = DefaultMaxRetryAfter
	}
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || attempt > p.maxRetries() {
			return err
		}
		v := classify(err)
		if !v.Retry || v.After > maxAfter {
			return err
		}
		wait := v.After
		if wait <= 0 {
			wait = p.Backoff(attempt)
		}
		if p.OnRetry != nil {
			p.OnRetry(attempt, wait, err)
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// Stream runs a streaming call under p: attempt passes each event it reads
// to emit, which hands it to yield, and asks stopped whether the caller
// has stopped (yield returned false) so it can return at once. A failed
// attempt is retried, as classify says, only while nothing has been
// yielded: after that a retry would repeat what the caller has already
// seen. Stream returns the last failure, or nil when the call succeeded
// or the caller stopped.
func Stream[E any](ctx context.Context, p Policy, classify func(error) Verdict, yield func(E) bool,
	attempt func(ctx context.Context, emit func(E), stopped func() bool) error) error {
	yielded, stopped := false, false
	emit := func(ev E) {
		yielded = true
		if !stopped && !yield(ev) {
			stopped = true
		}
	}
	err := p.Do(ctx, func(err error) Verdict {
		if yielded || stopped {
			return Verdict{}
		}
		return classify(err)
	}, func(ctx context.Context) error {
		return attempt(ctx, emit, func() bool { return stopped })
	})
	if stopped {
		return nil
	}
	return err
}

// Network classifies a failure that never got a response: a broken or
// refused connection, or a body cut short, is worth a retry.
func Network(err error) Verdict {
	var urlErr *url.Error
	return Verdict{Retry: errors.As(err, &urlErr) || errors.Is(err, io.ErrUnexpectedEOF)}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RetryableStatus reports whether an HTTP status is worth retrying: request
// timeout, conflict, rate limit, and every server error including
// Anthropic's 529 overloaded.
func RetryableStatus(status int) bool {
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusConflict, status == http.StatusTooManyRequests:
		return true
	case status >= 500:
		return true
	}
	return false
}

// HTTP classifies a failed HTTP response from its status and headers: the
// server's `x-should-retry` wins, then the status; the wait is the one
// retry-after asks for.
func HTTP(status int, h http.Header) Verdict {
	after, _ := RetryAfter(h, time.Now())
	switch strings.ToLower(h.Get("x-should-retry")) {
	case "true":
		return Verdict{Retry: true, After: after}
	case "false":
		return Verdict{}
	}
	return Verdict{Retry: RetryableStatus(status), After: after}
}

// Header is resp's header, or an empty one when there is no response (a
// failure before it arrived), for HTTP and RetryAfter.
func Header(resp *http.Response) http.Header {
	if resp == nil {
		return http.Header{}
	}
	return resp.Header
}

// RetryAfter reads the wait a response asks for: `retry-after-ms`
// (milliseconds), else `retry-after` as seconds or as an HTTP date
// (relative to now). It reports false when neither is there or parses.
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("retry-after"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
