package dispatcher

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/internal/testutil"
	"jetway/pkg/auth"
	"jetway/pkg/bus"
	api "jetway/pkg/dispatcherapi"
)

// newCode asks for a sign-in code with token and checks the answer's shape.
func (f *fixture) newCode(token string) api.SignInCode {
	f.t.Helper()
	c := decode[api.SignInCode](f.t, f.do("POST", "/v1/signin/codes", token, nil), http.StatusCreated)
	if !strings.HasPrefix(c.Code, signInCodePrefix) || c.Path != "/#code="+c.Code || c.ExpiresAt.IsZero() {
		f.t.Fatalf("code answer %+v: want a %s code, its /#code= path and an expiry", c, signInCodePrefix)
	}
	return c
}

// exchange spends code over HTTP, as the console does (no bearer token).
func (f *fixture) exchange(code string) *http.Response {
	f.t.Helper()
	return f.do("POST", "/v1/signin", "", api.SignInRequest{Code: code})
}

func TestSignIn_code_gives_back_its_token_once_bound_to_its_tenant_and_role(t *testing.T) {
	f := newFixture(t)
	c := f.newCode(tokAcmeAdmin)
	if c.Tenant != "acme" || c.Role != "admin" {
		t.Errorf("code made by acme's admin says tenant %q role %q", c.Tenant, c.Role)
	}
	if left := time.Until(c.ExpiresAt); left <= 0 || left > api.SignInCodeTTL {
		t.Errorf("code expires in %s, want within %s", left, api.SignInCodeTTL)
	}
	got := decode[api.SignIn](t, f.exchange(c.Code), http.StatusOK)
	if got.Token != tokAcmeAdmin || got.Tenant != "acme" || got.Role != "admin" {
		t.Fatalf("exchange gave %+v, want acme's admin token", got)
	}
	p := problemOf(t, f.exchange(c.Code), http.StatusGone)
	if p.Slug() != "signin-code-used" || !strings.Contains(p.Detail, "signs in once") || !strings.Contains(p.Detail, "jetway console") {
		t.Errorf("second use: %+v, want signin-code-used saying a code signs in once and how to get another", p)
	}

	// Another token's code is its own token's: codes do not widen anything.
	u := decode[api.SignIn](t, f.exchange(f.newCode(tokUser).Code), http.StatusOK)
	if u.Token != tokUser || u.Tenant != "default" || u.Role != "user" {
		t.Errorf("user's code gave %+v", u)
	}
}

func TestSignIn_wrong_malformed_and_expired_codes_are_refused_saying_which(t *testing.T) {
	f := newFixture(t)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	f.d.signIn.now = func() time.Time { return time.Unix(0, clock.Load()) }

	if p := problemOf(t, f.exchange(signInCodePrefix+"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), http.StatusUnauthorized); p.Slug() != "signin-code-unknown" {
		t.Errorf("a code never issued: %+v, want signin-code-unknown", p)
	}
	if p := problemOf(t, f.exchange(tokUser), http.StatusBadRequest); !strings.Contains(p.Detail, "starts with") {
		t.Errorf("a token where a code goes: %+v, want a refusal naming the code's form", p)
	}
	if p := problemOf(t, f.exchange(""), http.StatusBadRequest); !strings.Contains(p.Detail, `"code"`) {
		t.Errorf("no code: %+v, want the missing field named", p)
	}

	c := f.newCode(tokUser)
	clock.Add(int64(api.SignInCodeTTL + time.Second))
	p := problemOf(t, f.exchange(c.Code), http.StatusGone)
	if p.Slug() != "signin-code-expired" || !strings.Contains(p.Detail, "expired at") {
		t.Errorf("an expired code: %+v, want signin-code-expired with when", p)
	}
	// Refused once as expired, it stays refused as expired (not unknown).
	if p := problemOf(t, f.exchange(c.Code), http.StatusGone); p.Slug() != "signin-code-expired" {
		t.Errorf("an expired code tried again: %+v", p)
	}
	// Made just before its expiry, a code still works.
	c2 := f.newCode(tokUser)
	clock.Add(int64(api.SignInCodeTTL - time.Second))
	if got := decode[api.SignIn](t, f.exchange(c2.Code), http.StatusOK); got.Token != tokUser {
		t.Errorf("a code a second before its expiry gave %+v", got)
	}
}

func TestSignIn_a_code_races_on_two_dispatchers_and_signs_in_exactly_once(t *testing.T) {
	f := newFixture(t)
	d2, err := New(f.d.cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(d2.Handler())
	t.Cleanup(srv2.Close)
	c := f.newCode(tokUser)

	const tries = 8
	var wins, used atomic.Int32
	var wg sync.WaitGroup
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := f.srv.URL
			if i%2 == 1 {
				base = srv2.URL
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/signin", strings.NewReader(`{"code":"`+c.Code+`"}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("exchange %d: %v", i, err)
				return
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				wins.Add(1)
			case http.StatusGone:
				used.Add(1)
			default:
				t.Errorf("exchange %d: status %d", i, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 || used.Load() != tries-1 {
		t.Fatalf("%d exchanges on two dispatchers: %d signed in, %d refused as used; want exactly 1 and %d", tries, wins.Load(), used.Load(), tries-1)
	}
}

func TestSignIn_the_token_and_code_are_in_no_URL_log_line_or_stored_record(t *testing.T) {
	logs := &testutil.LockedBuffer{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel)
	f := newFixture(t, func(c *Config) { c.Logger = &log })
	c := f.newCode(tokAdmin)
	if strings.Contains(c.Path, tokAdmin) {
		t.Fatalf("the link %q carries the token", c.Path)
	}
	decode[api.SignIn](t, f.exchange(c.Code), http.StatusOK)
	problemOf(t, f.exchange(c.Code), http.StatusGone)
	if !strings.Contains(logs.String(), "/v1/signin") {
		t.Fatalf("no request was logged, so the test sees nothing:\n%s", logs)
	}
	for what, secret := range map[string]string{"token": tokAdmin, "code": c.Code} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the %s appears in the log:\n%s", what, logs)
		}
	}

	// Every message the control bucket ever held under the code's key (the
	// roll-up leaves only the spent record) holds neither.
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := f.js.Stream(ctx, "KV_"+bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetLastMsgForSubject(ctx, "$KV."+bus.BucketControl+"."+signInKey(c.Code))
	if err != nil {
		t.Fatalf("read the code's record: %v", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("$KV."+bus.BucketControl+"."+signInKey(c.Code)))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects["$KV."+bus.BucketControl+"."+signInKey(c.Code)]; n != 1 {
		t.Errorf("the code's key holds %d messages, want 1 (the spent record; the sealed one rolled up)", n)
	}
	for what, secret := range map[string]string{"token": tokAdmin, "code": c.Code} {
		if bytes.Contains(msg.Data, []byte(secret)) {
			t.Errorf("the stored record holds the %s: %s", what, msg.Data)
		}
	}
	if !bytes.Contains(msg.Data, []byte(`"used_at"`)) || bytes.Contains(msg.Data, []byte(`"sealed"`)) {
		t.Errorf("the spent record %s: want used_at and no sealed token", msg.Data)
	}
}

func TestWhoAmI_names_the_tokens_tenant_and_role_even_without_a_tenant(t *testing.T) {
	f := newFixture(t)
	for tok, want := range map[string]api.WhoAmI{
		tokUser: {Tenant: "default", Role: "user"}, tokAcmeAdmin: {Tenant: "acme", Role: "admin"},
		tokOperator: {Role: "operator"},
	} {
		if got := decode[api.WhoAmI](t, f.do("GET", "/v1/whoami", tok, nil), http.StatusOK); got != want {
			t.Errorf("whoami of %s = %+v, want %+v", tok, got, want)
		}
	}
	problemOf(t, f.do("GET", "/v1/whoami", "", nil), http.StatusUnauthorized)
	problemOf(t, f.do("POST", "/v1/signin/codes", "wrong", nil), http.StatusUnauthorized)
	// An operator of no tenant signs the console in as itself.
	if c := f.newCode(tokOperator); c.Role != "operator" || c.Tenant != "" {
		t.Errorf("operator's code: %+v", c)
	}
}

func TestSignIn_a_code_of_a_token_revoked_since_signs_nobody_in(t *testing.T) {
	f := newFixture(t)
	c := f.newCode(tokUser)
	// The tokens file is reloaded without the user's token (SIGHUP).
	fewer, err := auth.New(auth.Grant{Token: tokAdmin, Tenant: "default", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	f.d.auth.Replace(fewer)
	p := problemOf(t, f.exchange(c.Code), http.StatusUnauthorized)
	if !strings.Contains(p.Detail, "no longer valid") || strings.Contains(p.Detail, tokUser) {
		t.Errorf("a revoked token's code: %+v, want a refusal saying the token is no longer valid (and not naming it)", p)
	}
}
