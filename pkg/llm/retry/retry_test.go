package retry_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"jetway/pkg/llm/retry"
)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestRetryAfter_reads_ms_seconds_and_http_dates(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{"ms wins over seconds", header("retry-after-ms", "250", "retry-after", "9"), 250 * time.Millisecond, true},
		{"seconds", header("retry-after", "2"), 2 * time.Second, true},
		{"fractional seconds", header("retry-after", "0.5"), 500 * time.Millisecond, true},
		{"http date", header("retry-after", now.Add(90*time.Second).Format(http.TimeFormat)), 90 * time.Second, true},
		{"date in the past is no wait", header("retry-after", now.Add(-time.Minute).Format(http.TimeFormat)), 0, true},
		{"garbage", header("retry-after", "soon"), 0, false},
		{"absent", header(), 0, false},
	}
	for _, c := range cases {
		got, ok := retry.RetryAfter(c.h, now)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: got %v %v, want %v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestHTTP_retries_rate_limits_overload_and_server_errors_only(t *testing.T) {
	for status, want := range map[int]bool{400: false, 401: false, 404: false, 408: true, 409: true, 429: true, 500: true, 503: true, 529: true} {
		if got := retry.HTTP(status, http.Header{}).Retry; got != want {
			t.Errorf("status %d: retry=%v, want %v", status, got, want)
		}
	}
	if retry.HTTP(500, header("x-should-retry", "false")).Retry {
		t.Error("x-should-retry: false must win over a 500")
	}
	if !retry.HTTP(400, header("x-should-retry", "true")).Retry {
		t.Error("x-should-retry: true must win over a 400")
	}
	if v := retry.HTTP(429, header("retry-after", "3")); v.After != 3*time.Second {
		t.Errorf("after = %v", v.After)
	}
}

func TestBackoff_doubles_with_jitter_under_the_cap(t *testing.T) {
	p := retry.Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	for attempt, full := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 6: time.Second} {
		for range 50 {
			d := p.Backoff(attempt)
			if d < full/2 || d > full {
				t.Fatalf("attempt %d: %v outside [%v, %v]", attempt, d, full/2, full)
			}
		}
	}
}

var errBusy = errors.New("busy")

func always(err error) retry.Verdict { return retry.Verdict{Retry: errors.Is(err, errBusy)} }

func TestDo_retries_until_success(t *testing.T) {
	calls := 0
	var waits []time.Duration
	p := retry.Policy{BaseDelay: time.Millisecond, OnRetry: func(_ int, w time.Duration, _ error) { waits = append(waits, w) }}
	err := p.Do(context.Background(), always, func(context.Context) error {
		calls++
		if calls < 3 {
			return errBusy
		}
		return nil
	})
	if err != nil || calls != 3 || len(waits) != 2 {
		t.Fatalf("err=%v calls=%d waits=%v", err, calls, waits)
	}
}

func TestDo_is_bounded_and_returns_the_last_error(t *testing.T) {
	calls := 0
	err := retry.Policy{MaxRetries: 2, BaseDelay: time.Millisecond}.Do(context.Background(), always, func(context.Context) error {
		calls++
		return errBusy
	})
	if !errors.Is(err, errBusy) || calls != 3 {
		t.Fatalf("err=%v calls=%d, want busy after 3 calls", err, calls)
	}
	calls = 0
	_ = retry.Policy{MaxRetries: -1}.Do(context.Background(), always, func(context.Context) error { calls++; return errBusy })
	if calls != 1 {
		t.Fatalf("MaxRetries -1 made %d calls", calls)
	}
}

func TestDo_does_not_retry_what_the_classifier_refuses(t *testing.T) {
	calls := 0
	fatal := errors.New("bad request")
	err := retry.Policy{BaseDelay: time.Millisecond}.Do(context.Background(), always, func(context.Context) error { calls++; return fatal })
	if !errors.Is(err, fatal) || calls != 1 {
		t.Fatalf("err=%v calls=%d", err, calls)
	}
}

func TestDo_gives_up_when_the_server_asks_for_too_long_a_wait(t *testing.T) {
	calls := 0
	err := retry.Policy{MaxRetryAfter: time.Second}.Do(context.Background(),
		func(error) retry.Verdict { return retry.Verdict{Retry: true, After: time.Hour} },
		func(context.Context) error { calls++; return errBusy })
	if !errors.Is(err, errBusy) || calls != 1 {
		t.Fatalf("err=%v calls=%d", err, calls)
	}
}

func TestDo_stops_waiting_when_the_context_ends(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := retry.Policy{OnRetry: func(int, time.Duration, error) { cancel() }}
	done := make(chan error, 1)
	go func() {
		done <- p.Do(ctx, func(error) retry.Verdict { return retry.Verdict{Retry: true, After: 30 * time.Second} },
			func(context.Context) error { return errBusy })
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Do kept waiting after the context ended")
	}
}
