package notifier

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"

	"jetway/pkg/auth"
	"jetway/pkg/events"
)

// Webhook is one receiver of a tenant's headlines.
type Webhook struct {
	// URL receives a POST per headline (http or https).
	URL string `json:"url"`
	// Secret keys the HMAC-SHA256 of the body sent as X-Jetway-Signature,
	// so the receiver can tell the POST came from this notifier.
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

// SignatureHeader carries `sha256=<hex HMAC-SHA256 of the body>`.
const SignatureHeader = "X-Jetway-Signature"

// Sign is the SignatureHeader value for body under secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// VerifySignature checks a SignatureHeader value in constant time; a
// receiver written in Go can use it as it is.
func VerifySignature(secret string, body []byte, header string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(header))
}
