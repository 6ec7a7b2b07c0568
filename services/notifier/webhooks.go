package notifier

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"jetway/pkg/auth"
	"jetway/pkg/events"
)

// Webhook is one receiver of a tenant's headlines.
type Webhook struct {
	// URL receives a POST per headline (http or https).
	URL string `json:"url"`
	// Secret keys the HMAC-SHA256 sent as Jetway-Signature (over the
	// Jetway-Timestamp and the body), so the receiver can tell the POST came
	// from this notifier, unchanged and recently.
	Secret string `json:"secret"`
	// Types are glob patterns ('*' any run, '?' one character) of the event
	// type a headline is about (io.jetway.job.exited, io.jetway.run.*, …).
	// Empty means every headline.
	Types []string `json:"types,omitempty"`
}

// Wants reports whether the hook takes a headline about events of type typ.
func (w Webhook) Wants(typ string) bool {
	if len(w.Types) == 0 {
		return true
	}
	for _, p := range w.Types {
		if auth.Match(p, typ) {
			return true
		}
	}
	return false
}

// Webhooks maps a tenant to its receivers. Its file form is the same JSON:
//
//	{"acme": [{"url": "https://example.com/hook", "secret": "…", "types": ["io.jetway.job.*"]}]}
type Webhooks map[string][]Webhook

// Validate checks every tenant name, URL and secret, naming the one at fault.
func (ws Webhooks) Validate() error {
	for tenant, hooks := range ws {
		if err := events.ValidateToken("tenant", tenant); err != nil {
			return fmt.Errorf("webhooks: %w", err)
		}
		seen := map[string]bool{}
		for i, h := range hooks {
			u, err := url.Parse(h.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("webhooks: %s[%d]: url %q is not an http(s) URL", tenant, i, h.URL)
			}
			if h.Secret == "" {
				return fmt.Errorf("webhooks: %s[%d] (%s): secret is empty; receivers need it to check the signature", tenant, i, h.URL)
			}
			if seen[h.URL] {
				return fmt.Errorf("webhooks: %s[%d]: url %s is listed twice", tenant, i, h.URL)
			}
			seen[h.URL] = true
		}
	}
	return nil
}

// find returns the tenant's hook for url, as configured now.
func (ws Webhooks) find(tenant, url string) (Webhook, bool) {
	for _, h := range ws[tenant] {
		if h.URL == url {
			return h, true
		}
	}
	return Webhook{}, false
}

// LoadWebhooks reads a webhooks file. Like a tokens file it holds secrets,
// so one that others can read is refused.
func LoadWebhooks(path string) (Webhooks, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("webhooks: %s has mode %04o; it holds secrets, run: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var ws Webhooks
	if err := dec.Decode(&ws); err != nil {
		return nil, fmt.Errorf("webhooks: %s: %w", path, err)
	}
	if err := ws.Validate(); err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return ws, nil
}

// Signature headers. A receiver checks Jetway-Signature over the
// Jetway-Timestamp and the exact body bytes, and refuses a timestamp older
// than its replay window (ReplayWindow): a captured POST then replays for
// minutes at most, and the X-Jetway-Delivery id dedupes within them.
const (
	// TimestampHeader carries the Unix time (seconds) the POST was signed.
	TimestampHeader = "Jetway-Timestamp"
	// SignatureV1Header carries "v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>".
	SignatureV1Header = "Jetway-Signature"
	// SignatureHeader is the old body-only signature, "sha256=<hex
	// HMAC-SHA256(secret, body)>", sent only with Config.LegacySignature.
	//
	// Deprecated: it covers no time, so a captured POST replays forever.
	SignatureHeader = "X-Jetway-Signature"
)

// ReplayWindow is how old a signed timestamp a receiver should accept (and
// how far in the future, for clock skew).
const ReplayWindow = 5 * time.Minute

// Errors VerifyV1 wraps.
var (
	ErrBadSignature = errors.New("webhook signature does not match")
	ErrStale        = errors.New("webhook timestamp outside the replay window")
)

// SignV1 is the Jetway-Signature value for body signed at timestamp (the
// Jetway-Timestamp value, decimal Unix seconds).
func SignV1(secret, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// VerifyV1 checks a webhook POST as a receiver should: the signature over
// timestamp and body, in constant time, then the timestamp within window of
// now (ReplayWindow when window is 0). The signature header may hold several
// comma-separated values (during a secret rotation); one match is enough.
func VerifyV1(secret, timestamp, signature string, body []byte, now time.Time, window time.Duration) error {
	if window <= 0 {
		window = ReplayWindow
	}
	want := []byte(SignV1(secret, timestamp, body))
	ok := false
	for _, s := range strings.Split(signature, ",") {
		if hmac.Equal(want, []byte(strings.TrimSpace(s))) {
			ok = true
		}
	}
	if !ok {
		return ErrBadSignature
	}
	secs, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not Unix seconds", ErrStale, timestamp)
	}
	if age := now.Sub(time.Unix(secs, 0)); age > window || age < -window {
		return fmt.Errorf("%w: signed %s ago, window %s", ErrStale, age.Round(time.Second), window)
	}
	return nil
}

// Sign is the legacy SignatureHeader value for body under secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// VerifySignature checks a legacy SignatureHeader value in constant time.
//
// Deprecated: use VerifyV1, which also refuses replays.
func VerifySignature(secret string, body []byte, header string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(header))
}
