package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/handover"
	"jetway/services/runner"
)

const tokGlobex = "tok-globex" // tenant globex, unrestricted

// withGlobex adds a second unrestricted tenant to the fixture's tokens.
func withGlobex(t *testing.T) func(*Config) {
	return func(c *Config) {
		store, err := auth.New(
			auth.Grant{Token: tokUser, Tenant: "default"},
			auth.Grant{Token: tokAdmin, Tenant: "default", Admin: true},
			auth.Grant{Token: tokAcme, Tenant: "acme", EventTypes: []string{"com.github.*", "io.jetway.input"}},
			auth.Grant{Token: tokGlobex, Tenant: "globex"},
		)
		if err != nil {
			t.Fatal(err)
		}
		c.Auth = store
	}
}

func (f *fixture) sessions() jetstream.KeyValue {
	f.t.Helper()
	kv, err := f.js.KeyValue(context.Background(), bus.BucketSessions)
	if err != nil {
		f.t.Fatal(err)
	}
	return kv
}

// stored reads a session record's top-level fields; nil when there is none.
func (f *fixture) stored(key string) map[string]json.RawMessage {
	f.t.Helper()
	e, err := f.sessions().Get(context.Background(), key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(e.Value(), &m); err != nil {
		f.t.Fatalf("stored %s is not a JSON object: %s", key, e.Value())
	}
	return m
}

// asRunner decodes a stored record the way the runner does.
func (f *fixture) asRunner(key string) runner.SessionRecord {
	f.t.Helper()
	e, err := f.sessions().Get(context.Background(), key)
	if err != nil {
		f.t.Fatal(err)
	}
	var rec runner.SessionRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		f.t.Fatalf("the runner cannot read %s: %v", e.Value(), err)
	}
	return rec
}

// settings is the wire form of a recovery rule, as an answer carries it.
func settings(p handover.RecoveryPolicy, n int) api.RecoverySettings {
	return api.RecoverySettings{Policy: p.String(), MaxAttempts: n}
}

func defaultSettings() api.RecoverySettings {
	d := handover.DefaultRecoverySettings()
	return settings(d.Policy, d.MaxAttempts)
}

func TestRecovery_is_set_read_and_cleared(t *testing.T) {
	f := newFixture(t)
	st := decode[RecoveryState](t, f.do("GET", "/v1/sessions/s1/recovery", tokUser, nil), http.StatusOK)
	if st.Override != nil || st.Effective != defaultSettings() || st.Revision != 0 {
		t.Fatalf("before any write: %+v, want no override and the defaults", st)
	}

	st = decode[RecoveryState](t, f.do("PUT", "/v1/sessions/s1/recovery", tokUser, `{"policy":"manual","max_attempts":1}`), http.StatusOK)
	if st.Override == nil || *st.Override.Policy != handover.Manual.String() || *st.Override.MaxAttempts != 1 ||
		st.Effective != settings(handover.Manual, 1) || st.Revision == 0 {
		t.Fatalf("after PUT: %+v", st)
	}
	got := decode[RecoveryState](t, f.do("GET", "/v1/sessions/s1/recovery", tokUser, nil), http.StatusOK)
	if got.Effective != st.Effective || got.Revision != st.Revision {
		t.Fatalf("GET after PUT = %+v, want %+v", got, st)
	}

	// Absent fields clear: only the attempts are overridden now.
	st = decode[RecoveryState](t, f.do("PUT", "/v1/sessions/s1/recovery", tokUser, `{"max_attempts":0,"policy":null}`), http.StatusOK)
	if st.Override == nil || st.Override.Policy != nil || st.Effective != settings(handover.Automatic, 0) {
		t.Fatalf("after second PUT: %+v", st)
	}

	st = decode[RecoveryState](t, f.do("DELETE", "/v1/sessions/s1/recovery", tokUser, nil), http.StatusOK)
	if st.Override != nil || st.Effective != defaultSettings() {
		t.Fatalf("after DELETE: %+v", st)
	}
	rec := f.stored("default.s1")
	if _, ok := rec["policy"]; ok || string(rec["state"]) != `"idle"` {
		t.Fatalf("stored after DELETE: %v, want an idle record without policy", rec)
	}
}

func TestRecovery_of_a_session_without_a_record_creates_one_the_runner_reads_as_idle(t *testing.T) {
	f := newFixture(t)
	// Clearing what is not there writes nothing.
	decode[RecoveryState](t, f.do("DELETE", "/v1/sessions/fresh/recovery", tokUser, nil), http.StatusOK)
	if rec := f.stored("default.fresh"); rec != nil {
		t.Fatalf("DELETE created a record: %v", rec)
	}
	decode[RecoveryState](t, f.do("PUT", "/v1/sessions/fresh/recovery", tokUser, `{"policy":"never"}`), http.StatusOK)
	rec := f.asRunner("default.fresh")
	if rec.Tenant != "default" || rec.Session != "fresh" || rec.State != runner.StateIdle {
		t.Fatalf("created record %+v, want default/fresh idle", rec)
	}
	if rec.Policy == nil || rec.Policy.Policy == nil || *rec.Policy.Policy != handover.Never || rec.Policy.MaxAttempts != nil {
		t.Fatalf("created record's policy = %+v, want never only", rec.Policy)
	}
}

func TestRecovery_stored_policy_is_what_the_runner_authorizes_by(t *testing.T) {
	f := newFixture(t)
	decode[RecoveryState](t, f.do("PUT", "/v1/sessions/s1/recovery", tokUser, `{"policy":"manual"}`), http.StatusOK)
	rec := f.asRunner("default.s1")
	// As services/runner/run.go recover decides: defaults, then the record's override.
	s := handover.DefaultRecoverySettings()
	if rec.Policy != nil {
		s = s.With(*rec.Policy)
	}
	err := s.Authorize(handover.Interruption{Kind: handover.RunnerRestart}, handover.ChildGone, rec.Attempts)
	if !errors.Is(err, handover.ErrNeedsAHuman) {
		t.Fatalf("authorize under the stored policy = %v, want it to wait for a person", err)
	}
}

func TestRecovery_refuses_bad_requests_with_a_problem_naming_what_is_allowed(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name, path, body, slug string
		want                   []string
	}{
		{"unknown policy", "/v1/sessions/s1/recovery", `{"policy":"sometimes"}`, "invalid-policy", []string{`"sometimes"`, `"automatic"`, `"manual"`, `"never"`}},
		{"negative attempts", "/v1/sessions/s1/recovery", `{"max_attempts":-1}`, "invalid-policy", []string{"-1", "0 to 100"}},
		{"misspelt field", "/v1/sessions/s1/recovery", `{"maxAttempts":2}`, "bad-request", []string{"maxAttempts"}},
		{"no body", "/v1/sessions/s1/recovery", ``, "bad-request", []string{"DELETE"}},
		{"bad session name", "/v1/sessions/a.b/recovery", `{"policy":"manual"}`, "invalid-token", []string{"may contain only"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := problemOf(t, f.do("PUT", c.path, tokUser, c.body), http.StatusBadRequest)
			if p.Type != ProblemTypePrefix+c.slug {
				t.Fatalf("type %s, want %s (%s)", p.Type, c.slug, p.Detail)
			}
			for _, w := range c.want {
				if !strings.Contains(p.Detail, w) {
					t.Fatalf("detail %q does not mention %s", p.Detail, w)
				}
			}
		})
	}
	if rec := f.stored("default.s1"); rec != nil {
		t.Fatalf("a refused request wrote %v", rec)
	}
}

func TestRecovery_of_another_tenant_is_out_of_reach(t *testing.T) {
	f := newFixture(t, withGlobex(t))
	decode[RecoveryState](t, f.do("PUT", "/v1/sessions/s1/recovery", tokUser, `{"policy":"manual"}`), http.StatusOK)

	// Another tenant's token names its own s1, never default's.
	other := decode[RecoveryState](t, f.do("GET", "/v1/sessions/s1/recovery", tokGlobex, nil), http.StatusOK)
	if other.Override != nil {
		t.Fatalf("globex sees default's override: %+v", other)
	}
	decode[RecoveryState](t, f.do("PUT", "/v1/sessions/s1/recovery", tokGlobex, `{"policy":"never"}`), http.StatusOK)
	decode[RecoveryState](t, f.do("DELETE", "/v1/sessions/s1/recovery", tokGlobex, nil), http.StatusOK)
	if rec := f.asRunner("default.s1"); rec.Policy == nil || *rec.Policy.Policy != handover.Manual {
		t.Fatalf("default's policy after globex's writes = %+v, want manual", rec.Policy)
	}

	// A token that may not steer may not change recovery either, but may read.
	p := problemOf(t, f.do("PUT", "/v1/sessions/s1/recovery", tokAcme, `{"policy":"automatic"}`), http.StatusForbidden)
	if !strings.Contains(p.Detail, "steer") {
		t.Fatalf("403 detail %q does not say steering is needed", p.Detail)
	}
	problemOf(t, f.do("DELETE", "/v1/sessions/s1/recovery", tokAcme, nil), http.StatusForbidden)
	decode[RecoveryState](t, f.do("GET", "/v1/sessions/s1/recovery", tokAcme, nil), http.StatusOK)
	if rec := f.stored("acme.s1"); rec != nil {
		t.Fatalf("acme's refused write stored %v", rec)
	}
	problemOf(t, f.do("GET", "/v1/sessions/s1/recovery", "", nil), http.StatusUnauthorized)
}

func TestRecovery_write_keeps_every_other_field_and_retries_after_a_concurrent_update(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	kv := f.sessions()
	const key = "default.s1"
	start := `{"tenant":"default","session":"s1","state":"running","run":"r-1","runner":"a","runs":4,` +
		`"attempts":{"restarts":1},"inputs":["go"],"future_field":{"kept":[1,2.50,"x"]}}`
	if _, err := kv.Create(ctx, key, []byte(start)); err != nil {
		t.Fatal(err)
	}

	// A runner writes between the dispatcher's read and its write, once.
	var calls atomic.Int32
	f.d.sessions.beforeRecordWrite = func(k string) {
		if calls.Add(1) != 1 {
			return
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Errorf("runner read: %v", err)
			return
		}
		var rec map[string]json.RawMessage
		json.Unmarshal(e.Value(), &rec)
		rec["runs"] = json.RawMessage("5")
		b, _ := json.Marshal(rec)
		if _, err := kv.Update(ctx, k, b, e.Revision()); err != nil {
			t.Errorf("runner write: %v", err)
		}
	}
	st := decode[RecoveryState](t, f.do("PUT", "/v1/sessions/s1/recovery", tokUser, `{"policy":"never","max_attempts":2}`), http.StatusOK)
	if n := calls.Load(); n < 2 {
		t.Fatalf("the write was tried %d times; the refused first write was not retried", n)
	}

	got := f.stored(key)
	if string(got["runs"]) != "5" {
		t.Errorf("runs = %s, want the runner's 5", got["runs"])
	}
	if string(got["future_field"]) != `{"kept":[1,2.50,"x"]}` {
		t.Errorf("unknown field = %s, want it byte for byte", got["future_field"])
	}
	for k, want := range map[string]string{"state": `"running"`, "run": `"r-1"`, "inputs": `["go"]`, "attempts": `{"restarts":1}`} {
		if string(got[k]) != want {
			t.Errorf("%s = %s, want %s", k, got[k], want)
		}
	}
	rec := f.asRunner(key)
	if rec.Policy == nil || *rec.Policy.Policy != handover.Never || *rec.Policy.MaxAttempts != 2 || rec.Runs != 5 {
		t.Fatalf("runner reads %+v policy %+v", rec, rec.Policy)
	}
	e, _ := kv.Get(ctx, key)
	if st.Revision != e.Revision() {
		t.Fatalf("answered revision %d, stored %d", st.Revision, e.Revision())
	}
}

func TestRecovery_gives_up_with_a_conflict_when_the_record_never_holds_still(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	kv := f.sessions()
	if _, err := kv.Create(ctx, "default.s1", []byte(`{"tenant":"default","session":"s1","state":"idle","runs":0}`)); err != nil {
		t.Fatal(err)
	}
	f.d.sessions.beforeRecordWrite = func(k string) {
		if _, err := kv.Put(ctx, k, []byte(`{"tenant":"default","session":"s1","state":"idle","runs":1}`)); err != nil {
			t.Errorf("runner write: %v", err)
		}
	}
	p := problemOf(t, f.do("PUT", "/v1/sessions/s1/recovery", tokUser, `{"policy":"manual"}`), http.StatusConflict)
	if !strings.Contains(p.Detail, "try again") {
		t.Fatalf("conflict detail %q", p.Detail)
	}
	if _, ok := f.stored("default.s1")["policy"]; ok {
		t.Fatal("a write that gave up stored a policy")
	}
}

func TestRecovery_unchanged_policy_is_not_written_again(t *testing.T) {
	f := newFixture(t)
	a := decode[RecoveryState](t, f.do("PUT", "/v1/sessions/s1/recovery", tokUser, `{"policy":"manual"}`), http.StatusOK)
	b := decode[RecoveryState](t, f.do("PUT", "/v1/sessions/s1/recovery", tokUser, `{"policy":"manual"}`), http.StatusOK)
	if a.Revision == 0 || a.Revision != b.Revision {
		t.Fatalf("revisions %d then %d: the same PUT twice wrote twice", a.Revision, b.Revision)
	}
}

func TestNATS_recovery_sets_reads_and_clears_like_HTTP(t *testing.T) {
	f := newFixture(t)
	svc, err := f.d.StartNATS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })

	var st RecoveryState
	resp := natsRequest(t, f, SubjectRecovery, tokUser, `{"session":"s1","action":"set","policy":"never","max_attempts":0}`)
	if err := json.Unmarshal(resp.Data, &st); err != nil || st.Effective != settings(handover.Never, 0) {
		t.Fatalf("set reply %s (%v)", resp.Data, err)
	}
	resp = natsRequest(t, f, SubjectRecovery, tokUser, `{"session":"s1"}`)
	if err := json.Unmarshal(resp.Data, &st); err != nil || st.Override == nil || *st.Override.Policy != handover.Never.String() {
		t.Fatalf("get reply %s (%v)", resp.Data, err)
	}
	resp = natsRequest(t, f, SubjectRecovery, tokUser, `{"session":"s1","action":"set","policy":"often"}`)
	if code := resp.Header.Get("Nats-Service-Error-Code"); code != "400" || !strings.Contains(string(resp.Data), "manual") {
		t.Fatalf("bad policy: code %q body %s", code, resp.Data)
	}
	resp = natsRequest(t, f, SubjectRecovery, tokUser, `{"session":"s1","action":"clear"}`)
	if err := json.Unmarshal(resp.Data, &st); err != nil || st.Override != nil {
		t.Fatalf("clear reply %s (%v)", resp.Data, err)
	}
}
