package auth

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"jetway/pkg/events"
)

func mustStore(t *testing.T, grants ...Grant) *Store {
	t.Helper()
	s, err := New(grants...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func TestAuthenticate_maps_a_token_to_its_tenant(t *testing.T) {
	s := mustStore(t,
		Grant{Token: "tok-acme", Tenant: "acme"},
		Grant{Token: "tok-root", Tenant: "ops", Admin: true},
	)
	p, err := s.Authenticate("tok-acme")
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	if p.Tenant != "acme" || p.Admin {
		t.Fatalf("got %+v, want tenant acme, not admin", p)
	}
	p, err = s.Authenticate("tok-root")
	if err != nil || p.Tenant != "ops" || !p.Admin {
		t.Fatalf("got %+v, %v; want admin of ops", p, err)
	}
}

func TestAuthenticate_refuses_missing_and_unknown_tokens(t *testing.T) {
	s := mustStore(t, Grant{Token: "tok-acme", Tenant: "acme"})
	if _, err := s.Authenticate(""); !errors.Is(err, ErrNoToken) {
		t.Fatalf("empty token: got %v, want ErrNoToken", err)
	}
	for _, tok := range []string{"tok-acm", "tok-acme ", "TOK-ACME", "tok-acmee"} {
		if _, err := s.Authenticate(tok); !errors.Is(err, ErrUnknownToken) {
			t.Fatalf("token %q: got %v, want ErrUnknownToken", tok, err)
		}
	}
}

func TestStore_keeps_no_token_in_clear(t *testing.T) {
	s := mustStore(t, Grant{Token: "very-secret-token", Tenant: "acme"})
	for _, e := range *s.entries.Load() {
		if strings.Contains(string(e.hash[:]), "very-secret-token") {
			t.Fatal("token stored in clear")
		}
	}
}

func TestNew_refuses_no_tokens_at_all(t *testing.T) {
	if _, err := New(); !errors.Is(err, ErrNoTokens) {
		t.Fatalf("got %v, want ErrNoTokens", err)
	}
}

func TestNew_refuses_bad_grants(t *testing.T) {
	cases := map[string][]Grant{
		"empty token":       {{Token: "", Tenant: "acme"}},
		"tenant with a dot": {{Token: "t", Tenant: "a.b"}},
		"empty tenant":      {{Token: "t", Tenant: ""}},
		"space in token":    {{Token: "a b", Tenant: "acme"}},
		"repeated token":    {{Token: "t", Tenant: "acme"}, {Token: "t", Tenant: "other"}},
		"empty pattern":     {{Token: "t", Tenant: "acme", EventTypes: []string{""}}},
	}
	for name, grants := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := New(grants...); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}

func TestNew_names_the_token_rule_a_tenant_breaks(t *testing.T) {
	_, err := New(Grant{Token: "t", Tenant: "a.b"})
	if !errors.Is(err, events.ErrInvalidToken) || !strings.Contains(err.Error(), "A-Z a-z 0-9 _ -") {
		t.Fatalf("got %v, want the token rule", err)
	}
}

func TestMayAccess_only_the_own_tenant(t *testing.T) {
	p := Principal{Tenant: "acme", Admin: true}
	if err := p.MayAccess("acme"); err != nil {
		t.Fatalf("own tenant: %v", err)
	}
	if err := p.MayAccess("globex"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("other tenant: got %v, want ErrForbidden", err)
	}
}

func TestMayPublish_defaults_to_everything_but_job_events(t *testing.T) {
	s := mustStore(t, Grant{Token: "t", Tenant: "acme"})
	p, _ := s.Authenticate("t")
	for _, typ := range []string{"io.jetway.input", "io.jetway.steer", "com.github.push", "x"} {
		if err := p.MayPublish(typ); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
	}
	for _, typ := range []string{"io.jetway.job.exited", "io.jetway.job.overdue", "io.jetway.job.anything"} {
		if err := p.MayPublish(typ); !errors.Is(err, ErrForbidden) {
			t.Fatalf("%s: got %v, want ErrForbidden", typ, err)
		}
	}
}

func TestMayPublish_job_events_refused_even_when_a_pattern_allows_them(t *testing.T) {
	s := mustStore(t, Grant{Token: "t", Tenant: "acme", EventTypes: []string{"*", "io.jetway.job.*"}})
	p, _ := s.Authenticate("t")
	if err := p.MayPublish("io.jetway.job.exited"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("got %v, want ErrForbidden", err)
	}
}

func TestMayPublish_follows_the_grant_patterns(t *testing.T) {
	s := mustStore(t, Grant{Token: "t", Tenant: "acme", EventTypes: []string{"com.github.*", "io.jetway.input"}})
	p, _ := s.Authenticate("t")
	for _, typ := range []string{"com.github.push", "com.github.pull_request.opened", "io.jetway.input"} {
		if err := p.MayPublish(typ); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
	}
	for _, typ := range []string{"io.jetway.steer", "com.gitlab.push", "com.github"} {
		err := p.MayPublish(typ)
		if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), typ) {
			t.Fatalf("%s: got %v, want ErrForbidden naming the type", typ, err)
		}
	}
}

func TestMayAdminister_needs_an_admin_token(t *testing.T) {
	if err := (Principal{Tenant: "a"}).MayAdminister(); !errors.Is(err, ErrForbidden) {
		t.Fatalf("got %v, want ErrForbidden", err)
	}
	if err := (Principal{Tenant: "a", Admin: true}).MayAdminister(); err != nil {
		t.Fatalf("admin: %v", err)
	}
}

func TestMatch(t *testing.T) {
	cases := []struct {
		pat, typ string
		want     bool
	}{
		{"*", "", true},
		{"*", "anything.at.all", true},
		{"com.github.*", "com.github.push", true},
		{"com.github.*", "com.github.", true},
		{"com.github.*", "com.github", false},
		{"io.jetway.input", "io.jetway.input", true},
		{"io.jetway.input", "io.jetway.inputs", false},
		{"io.?.x", "io.a.x", true},
		{"io.?.x", "io.ab.x", false},
		{"*.push", "com.github.push", true},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"", "", true},
		{"", "x", false},
	}
	for _, c := range cases {
		if got := Match(c.pat, c.typ); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pat, c.typ, got, c.want)
		}
	}
}

func TestBearerToken(t *testing.T) {
	cases := map[string]string{
		"Bearer abc":     "abc",
		"bearer  abc ":   "abc",
		"Basic abc":      "",
		"":               "",
		"Bearer":         "",
		"abc":            "",
		"BEARER x.y-z_1": "x.y-z_1",
	}
	for in, want := range cases {
		if got := BearerToken(in); got != want {
			t.Errorf("BearerToken(%q) = %q, want %q", in, got, want)
		}
	}
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestFromEnv_reads_tenant_tokens_and_the_admin_token(t *testing.T) {
	grants, err := FromEnv(env(map[string]string{
		EnvTokens:     "t1:acme, t2:globex",
		EnvAdminToken: "root",
	}))
	if err != nil {
		t.Fatalf("FromEnv: %v", err)
	}
	want := []Grant{{Token: "t1", Tenant: "acme"}, {Token: "t2", Tenant: "globex"}, {Token: "root", Tenant: DefaultTenant, Admin: true}}
	if len(grants) != len(want) {
		t.Fatalf("got %+v, want %+v", grants, want)
	}
	for i := range want {
		if grants[i].Token != want[i].Token || grants[i].Tenant != want[i].Tenant || grants[i].Admin != want[i].Admin {
			t.Fatalf("grant %d: got %+v, want %+v", i, grants[i], want[i])
		}
	}
}

func TestFromEnv_refuses_a_pair_without_tenant(t *testing.T) {
	if _, err := FromEnv(env(map[string]string{EnvTokens: "t1"})); err == nil || !strings.Contains(err.Error(), EnvTokens) {
		t.Fatalf("got %v, want an error naming %s", err, EnvTokens)
	}
}

func writeFile(t *testing.T, mode os.FileMode, f File) string {
	t.Helper()
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoad_merges_file_and_environment(t *testing.T) {
	path := writeFile(t, 0o600, File{Tokens: []Grant{{Token: "ft", Tenant: "acme", EventTypes: []string{"com.github.*"}}}})
	s, err := Load(Sources{File: path, Getenv: env(map[string]string{EnvTokens: "et:globex"})})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	p, err := s.Authenticate("ft")
	if err != nil || p.Tenant != "acme" {
		t.Fatalf("file token: %+v, %v", p, err)
	}
	if err := p.MayPublish("io.jetway.input"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("file patterns not applied: %v", err)
	}
	if p, err := s.Authenticate("et"); err != nil || p.Tenant != "globex" {
		t.Fatalf("env token: %+v, %v", p, err)
	}
}

func TestLoad_with_nothing_configured_is_an_error(t *testing.T) {
	if _, err := Load(Sources{Getenv: env(nil)}); !errors.Is(err, ErrNoTokens) {
		t.Fatalf("got %v, want ErrNoTokens", err)
	}
}

func TestReadFile_refuses_a_file_others_can_read(t *testing.T) {
	path := writeFile(t, 0o644, File{Tokens: []Grant{{Token: "ft", Tenant: "acme"}}})
	if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("got %v, want a refusal telling to chmod 600", err)
	}
}

func TestReadFile_refuses_unknown_fields(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(path, []byte(`{"tokens":[{"token":"a","tenant":"b","admn":true}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), "admn") {
		t.Fatalf("got %v, want an error naming the misspelt field", err)
	}
}

func TestEnsureDevTokens_creates_a_private_file_once_and_loads_it_after(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first, err := EnsureDevTokens(dir)
	if err != nil {
		t.Fatalf("first start: %v", err)
	}
	fi, err := os.Stat(first.Path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %04o, want 0600", fi.Mode().Perm())
	}
	if first.User.Tenant != DefaultTenant || first.User.Admin || first.User.Token == "" {
		t.Fatalf("user grant %+v", first.User)
	}
	if !first.Admin.IsAdmin() || first.Admin.IsOperator() || first.Admin.Token == "" || first.Admin.Token == first.User.Token {
		t.Fatalf("admin grant %+v", first.Admin)
	}
	if !first.Operator.IsOperator() || first.Operator.Token == "" ||
		first.Operator.Token == first.Admin.Token || first.Operator.Token == first.User.Token {
		t.Fatalf("operator grant %+v", first.Operator)
	}
	second, err := EnsureDevTokens(dir)
	if err != nil {
		t.Fatalf("second start: %v", err)
	}
	if second.User.Token != first.User.Token || second.Admin.Token != first.Admin.Token {
		t.Fatal("second start made new tokens instead of loading the file")
	}
	s, err := Load(Sources{File: first.Path, Getenv: env(nil)})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if p, err := s.Authenticate(first.Admin.Token); err != nil || !p.Admin || p.Operator {
		t.Fatalf("admin token: %+v, %v", p, err)
	}
	if p, err := s.Authenticate(first.Operator.Token); err != nil || !p.Operator {
		t.Fatalf("operator token: %+v, %v", p, err)
	}
}

func TestEnsureDevTokens_adds_an_operator_token_to_a_file_from_before_roles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, DevTokensFile)
	old := `{"tokens":[{"token":"jw_u","tenant":"default"},{"token":"jw_a","tenant":"default","admin":true}]}`
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	dt, err := EnsureDevTokens(dir)
	if err != nil {
		t.Fatal(err)
	}
	if dt.User.Token != "jw_u" || dt.Admin.Token != "jw_a" {
		t.Fatalf("old tokens not kept: %+v", dt)
	}
	if !dt.Operator.IsOperator() || dt.Operator.Token == "" {
		t.Fatalf("no operator token added: %+v", dt.Operator)
	}
	again, err := EnsureDevTokens(dir)
	if err != nil || again.Operator.Token != dt.Operator.Token {
		t.Fatalf("second start: %+v, %v; want the same operator token", again.Operator, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("rewritten file: %v, %v; want mode 0600", fi, err)
	}
	// "tokens" still reads as before: one user, one admin.
	f, err := ReadFile(path)
	if err != nil || len(f.Tokens) != 2 || len(f.Operators) != 1 {
		t.Fatalf("file after the upgrade: %+v, %v", f, err)
	}
}

func TestDev_tokens_file_keeps_one_user_and_one_admin_in_tokens_for_scripts(t *testing.T) {
	dt, err := EnsureDevTokens(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(dt.Path)
	if err != nil {
		t.Fatal(err)
	}
	var users, admins int
	for _, g := range f.Tokens {
		if g.Admin { // what `jq '.tokens[] | select(.admin)'` picks
			admins++
		} else {
			users++
		}
	}
	if users != 1 || admins != 1 || len(f.Operators) != 1 || f.Operators[0].Token != dt.Operator.Token {
		t.Fatalf("tokens.json = %+v: want one user and one admin in tokens, the operator in operators", f)
	}
	s, err := Load(Sources{File: dt.Path, Getenv: env(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s.Authenticate(dt.Operator.Token); err != nil || !p.Operator {
		t.Fatalf("operator from the operators list: %+v, %v", p, err)
	}
}

func TestReadFile_refuses_an_operators_entry_with_another_role(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(path, []byte(`{"tokens":[],"operators":[{"token":"x","role":"admin"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), "operators[0]") {
		t.Fatalf("got %v, want an error naming operators[0]", err)
	}
}

func TestRoles_only_an_operator_may_operate_and_admin_true_still_means_tenant_admin(t *testing.T) {
	s, err := New(
		Grant{Token: "u", Tenant: "acme"},
		Grant{Token: "a-old", Tenant: "acme", Admin: true},
		Grant{Token: "a", Tenant: "acme", Role: RoleAdmin},
		Grant{Token: "op", Role: RoleOperator},
	)
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string][2]bool{"u": {false, false}, "a-old": {true, false}, "a": {true, false}, "op": {true, true}} {
		p, err := s.Authenticate(tok)
		if err != nil {
			t.Fatal(err)
		}
		if got := [2]bool{p.MayAdminister() == nil, p.MayOperate() == nil}; got != want {
			t.Errorf("token %s: administer/operate = %v, want %v", tok, got, want)
		}
	}
	p, _ := s.Authenticate("a")
	if err := p.MayOperate(); !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "operator") {
		t.Fatalf("tenant admin MayOperate: %v, want ErrForbidden naming the operator role", err)
	}
	for _, bad := range []Grant{
		{Token: "x", Tenant: "acme", Role: "root"},
		{Token: "x", Tenant: "acme", Role: RoleOperator, Admin: true},
		{Token: "x", Role: RoleAdmin},
	} {
		if _, err := New(bad); err == nil {
			t.Errorf("grant %+v accepted", bad)
		}
	}
}

func TestFromEnv_reads_an_operator_token(t *testing.T) {
	grants, err := FromEnv(env(map[string]string{EnvOperatorToken: "jw_op"}))
	if err != nil || len(grants) != 1 || !grants[0].IsOperator() || grants[0].Tenant != "" {
		t.Fatalf("grants %+v, %v", grants, err)
	}
}

func TestEnsureDevTokens_concurrent_first_starts_agree(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	got := make([]DevTokens, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i], errs[i] = EnsureDevTokens(dir) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("start %d: %v", i, errs[i])
		}
		if got[i].User.Token != got[0].User.Token {
			t.Fatalf("start %d got a different token", i)
		}
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".tokens-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

func TestNewToken_is_random_and_prefixed(t *testing.T) {
	a, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewToken()
	if a == b || !strings.HasPrefix(a, "jw_") || len(a) < 40 {
		t.Fatalf("tokens %q, %q", a, b)
	}
}
