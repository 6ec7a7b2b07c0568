package notifier

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"jetway/pkg/events"
)

// waitDeadLetter waits until tenant has a dead letter and returns it.
func waitDeadLetter(t *testing.T, n *Notifier, tenant string) DeadLetter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		dls, err := n.DeadLetters(ctx, tenant)
		if err != nil {
			t.Fatalf("DeadLetters: %v", err)
		}
		if len(dls) > 0 {
			return dls[0]
		}
		select {
		case <-ctx.Done():
			t.Fatal("no dead letter")
		case <-tick.C:
		}
	}
}

// countingServer is a real HTTP server that counts the requests it gets.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if h != nil {
			h(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestWebhook_redirect_is_not_followed_and_ends_as_a_dead_letter_saying_why(t *testing.T) {
	e := newEnv(t)
	elsewhere, elsewhereHits := countingServer(t, nil)
	first, firstHits := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/steal", http.StatusTemporaryRedirect)
	})
	n, _ := start(t, testConfig(e.nc, Webhooks{"default": {{URL: first.URL, Secret: "k"}}}))
	publish(t, e.js, jobEventsSubject(t, "default", "s1"), "default", "s1", events.JobExited{ID: 3, Program: "gh", RunningForMS: 1000})

	dl := waitDeadLetter(t, n, "default")
	if !strings.Contains(dl.LastError, "307") || !strings.Contains(dl.LastError, "redirects are not followed") {
		t.Fatalf("dead letter reason %q does not name the redirect", dl.LastError)
	}
	if got := firstHits.Load(); got != 3 {
		t.Errorf("first server hit %d times, want 3 (every attempt)", got)
	}
	if got := elsewhereHits.Load(); got != 0 {
		t.Fatalf("the redirect target was hit %d times; body and signature left for another host", got)
	}
}

func TestWebhook_to_a_loopback_target_is_refused_unless_its_host_is_allowed_by_name(t *testing.T) {
	e := newEnv(t)
	srv, hits := countingServer(t, nil)
	_, port, _ := strings.Cut(srv.Listener.Addr().String(), ":")
	// "localhost" is a name, not an address: it is refused for what it
	// resolves to, at dial time, although only 127.0.0.1 is allowed.
	byName := "http://localhost:" + port + "/hook"
	cfg := testConfig(e.nc, Webhooks{"default": {{URL: srv.URL, Secret: "k"}}, "acme": {{URL: byName, Secret: "k"}}})
	cfg.WebhookAllowHosts = nil
	n, stop := start(t, cfg)
	publish(t, e.js, jobEventsSubject(t, "default", "s1"), "default", "s1", events.JobExited{ID: 1, Program: "a", RunningForMS: 1})
	publish(t, e.js, jobEventsSubject(t, "acme", "s1"), "acme", "s1", events.JobExited{ID: 2, Program: "b", RunningForMS: 1})
	for _, tenant := range []string{"default", "acme"} {
		dl := waitDeadLetter(t, n, tenant)
		if !strings.Contains(dl.LastError, ErrForbiddenTarget.Error()) || !strings.Contains(dl.LastError, "loopback") ||
			!strings.Contains(dl.LastError, "--webhook-allow-host") {
			t.Fatalf("%s: dead letter reason %q does not say the loopback target was refused and how to allow it", tenant, dl.LastError)
		}
	}
	if got := hits.Load(); got != 0 {
		t.Fatalf("refused target was hit %d times", got)
	}
	stop()

	// Allowed by name, the same target is delivered to.
	cfg = testConfig(e.nc, Webhooks{"default": {{URL: srv.URL, Secret: "k"}}})
	cfg.WebhookAllowHosts = []string{"127.0.0.1"}
	start(t, cfg)
	publish(t, e.js, jobEventsSubject(t, "default", "s2"), "default", "s2", events.JobExited{ID: 3, Program: "c", RunningForMS: 1})
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for hits.Load() == 0 {
		select {
		case <-deadline.C:
			t.Fatal("allowed target never hit")
		case <-tick.C:
		}
	}
}

func TestEgress_guard_refuses_every_non_public_address_kind(t *testing.T) {
	for addr, kind := range map[string]string{
		"127.0.0.1": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"169.254.169.254": "link-local", "fe80::1": "link-local",
		"10.1.2.3": "private", "172.16.0.1": "private", "172.31.255.255": "private", "192.168.1.1": "private", "fc00::1": "private", "fd12::1": "private",
		"0.0.0.0": "unspecified", "0.1.2.3": "unspecified", "::": "unspecified",
		"224.0.0.1": "link-local", "224.0.1.1": "multicast", "239.1.1.1": "multicast", "ff02::1": "link-local", "ff05::1": "multicast",
		"8.8.8.8": "", "172.32.0.1": "", "2001:4860:4860::8888": "",
	} {
		if got := forbiddenAddr(netip.MustParseAddr(addr)); got != kind {
			t.Errorf("%s: %q, want %q", addr, got, kind)
		}
	}
	// A refused dial says why, and is the sentinel error.
	g := newEgressGuard([]string{"LOCALHOST."})
	srv, _ := countingServer(t, nil)
	_, err := g.DialContext(context.Background(), "tcp", srv.Listener.Addr().String())
	if !errors.Is(err, ErrForbiddenTarget) {
		t.Fatalf("dial 127.0.0.1 with only localhost allowed: %v, want ErrForbiddenTarget", err)
	}
	_, port, _ := strings.Cut(srv.Listener.Addr().String(), ":")
	c, err := g.DialContext(context.Background(), "tcp", "localhost:"+port)
	if err != nil {
		t.Fatalf("dial allowed localhost: %v", err)
	}
	c.Close()
}

func TestWebhook_signature_covers_timestamp_and_body_and_a_tampered_timestamp_fails(t *testing.T) {
	// python3 -c "import hmac,hashlib;print(hmac.new(b'key',b'1700000000.hello',hashlib.sha256).hexdigest())"
	const vector = "v1=4d583a269f4f276a3fa80ff31b5a01879a848096983222a17893d198418939aa"
	if got := SignV1("key", "1700000000", []byte("hello")); got != vector {
		t.Fatalf("SignV1 = %s, want %s", got, vector)
	}

	e := newEnv(t)
	type post struct {
		ts, sig, legacy string
		body            []byte
	}
	got := make(chan post, 1)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case got <- post{r.Header.Get(TimestampHeader), r.Header.Get(SignatureV1Header), r.Header.Get(SignatureHeader), b}:
		default:
		}
	})
	start(t, testConfig(e.nc, Webhooks{"default": {{URL: srv.URL, Secret: "s3cret"}}}))
	publish(t, e.js, jobEventsSubject(t, "default", "s1"), "default", "s1", events.JobExited{ID: 3, Program: "gh", RunningForMS: 1000})
	var p post
	select {
	case p = <-got:
	case <-time.After(waitFor):
		t.Fatal("webhook not delivered")
	}
	now := time.Now()
	if err := VerifyV1("s3cret", p.ts, p.sig, p.body, now, 0); err != nil {
		t.Fatalf("a real delivery does not verify: %v (ts %q sig %q)", err, p.ts, p.sig)
	}
	if p.legacy != "" {
		t.Errorf("legacy body-only signature sent without LegacySignature: %q", p.legacy)
	}
	secs, _ := strconv.ParseInt(p.ts, 10, 64)
	later := strconv.FormatInt(secs+3600, 10)
	if err := VerifyV1("s3cret", later, p.sig, p.body, now.Add(time.Hour), 0); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("tampered timestamp: %v, want ErrBadSignature", err)
	}
	tampered := append([]byte(nil), p.body...)
	tampered[len(tampered)/2] ^= 1
	if err := VerifyV1("s3cret", p.ts, p.sig, tampered, now, 0); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("tampered body: %v, want ErrBadSignature", err)
	}
	if err := VerifyV1("s3cret", p.ts, p.sig, p.body, now.Add(ReplayWindow+time.Minute), 0); !errors.Is(err, ErrStale) {
		t.Fatalf("replay after the window: %v, want ErrStale", err)
	}
	if err := VerifyV1("wrong", p.ts, p.sig, p.body, now, 0); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("wrong secret: %v, want ErrBadSignature", err)
	}
}
