package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func TestConsole_assets_are_served_with_their_content_types_and_security_headers(t *testing.T) {
	for path, want := range map[string]string{
		"/":                    "text/html; charset=utf-8",
		"/console/console.js":  "text/javascript; charset=utf-8",
		"/console/console.css": "text/css; charset=utf-8",
	} {
		res, body := get(t, path)
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != want || body == "" {
			t.Errorf("GET %s: %d %q (%d bytes), want 200 %q", path, res.StatusCode, res.Header.Get("Content-Type"), len(body), want)
		}
		for h, v := range map[string]string{
			"Content-Security-Policy": ContentSecurityPolicy,
			"X-Content-Type-Options":  "nosniff",
			"X-Frame-Options":         "DENY",
			"Referrer-Policy":         "no-referrer",
		} {
			if got := res.Header.Get(h); got != v {
				t.Errorf("GET %s: %s = %q, want %q", path, h, got, v)
			}
		}
	}
	for _, frag := range []string{"script-src 'self'", "frame-ancestors 'none'", "connect-src 'self'"} {
		if !strings.Contains(ContentSecurityPolicy, frag) {
			t.Errorf("the CSP lacks %q", frag)
		}
	}
	if strings.Contains(ContentSecurityPolicy, "unsafe-inline") || strings.Contains(ContentSecurityPolicy, "unsafe-eval") {
		t.Errorf("the CSP allows inline or eval'd script: %s", ContentSecurityPolicy)
	}
	for _, path := range []string{"/console/", "/console/index.html", "/console/nope.js", "/console/../console.go", "/console/console.go"} {
		if res, _ := get(t, path); res.StatusCode != http.StatusNotFound || res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: %d, want 404 with the security headers", path, res.StatusCode)
		}
	}
}

func TestConsole_page_has_no_inline_script_or_style_the_CSP_would_block(t *testing.T) {
	_, page := get(t, "/")
	if regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`).MatchString(page) || strings.Contains(page, "<style") ||
		regexp.MustCompile(`\son[a-z]+=`).MatchString(page) || strings.Contains(page, "style=") {
		t.Errorf("index.html has inline script, style or event handlers:\n%s", page)
	}
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Errorf("index.html loads something from elsewhere:\n%s", page)
	}
}

// The token may travel in the Authorization header only: never in a URL
// (where logs, history and referrers would keep it), never in storage that
// outlives the tab.
func TestConsole_never_puts_the_token_in_a_URL_or_lasting_storage(t *testing.T) {
	js, err := os.ReadFile("assets/console.js")
	if err != nil {
		t.Fatal(err)
	}
	src := string(js)
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`[?&](token|access_token|auth|authorization|bearer)=`),
		regexp.MustCompile(`localStorage|document\.cookie|new EventSource|console\.log`),
		regexp.MustCompile(`(url|href|hash|path)[^;\n]*\+\s*token\(\)`),
	} {
		if m := bad.FindString(src); m != "" {
			t.Errorf("console.js: %q", m)
		}
	}
	// Every fetch goes out with headers built from the token.
	fetches := regexp.MustCompile(`fetch\(`).FindAllStringIndex(src, -1)
	withHeaders := regexp.MustCompile(`fetch\([^;]*headers`).FindAllStringIndex(src, -1)
	if len(fetches) == 0 || len(fetches) != len(withHeaders) {
		t.Errorf("%d fetch calls, %d with headers: each must send the Authorization header", len(fetches), len(withHeaders))
	}
	// The one fetch without the token is a sign-in code's exchange, which
	// has no token yet: it posts the code, in its body, to /v1/signin.
	exchanges := regexp.MustCompile(`fetch\('/v1/signin', \{[^;]*body: JSON\.stringify\(\{ code \}\)`).FindAllStringIndex(src, -1)
	if len(exchanges) != 1 {
		t.Errorf("%d sign-in code exchanges posting the code in the body, want 1", len(exchanges))
	}
	if strings.Count(src, "'Bearer ' + token()") != len(fetches)-len(exchanges) {
		t.Errorf("the token is used other than as a bearer header:\n%d uses for %d fetches (%d of them code exchanges)",
			strings.Count(src, "'Bearer ' + token()"), len(fetches), len(exchanges))
	}
	// A sign-in link's code leaves the address bar without a history entry.
	if !strings.Contains(src, "history.replaceState(null, '', location.pathname + location.search)") {
		t.Error("console.js does not drop a sign-in code from the address with replaceState")
	}
	// Without script, submitting the sign-in form would put named inputs
	// into the page's URL: the token input has no name.
	_, page := get(t, "/")
	if strings.Contains(src, "name: 'token'") || strings.Contains(page, `name="token"`) {
		t.Error("the token input has a name, so a plain form submission would put it in the URL")
	}
}
