package dispatcher

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"jetway/pkg/bus"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/control/layovers"
	"jetway/services/runner"
)

// waitUntil polls cond until it holds or the test's wait runs out.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", waitFor, what)
		}
		<-tick.C
	}
}

func TestSessionDetail_shows_state_every_covering_Ground_Stop_pending_events_layovers_and_recovery(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	since := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	rec := runner.SessionRecord{Tenant: "default", Session: "s1", State: runner.StateRunning, Run: "r-7",
		Runner: "r1", Since: since, Cause: "input", Runs: 3}
	b, _ := json.Marshal(rec)
	if _, err := f.sessions().Create(ctx, "default.s1", b); err != nil {
		t.Fatal(err)
	}
	control, err := f.js.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	for _, sw := range []struct{ tenant, session, why string }{{"", "", "incident 12"}, {"default", "", "tenant pause"}, {"default", "s1", "look first"}} {
		if _, err := groundstop.Set(ctx, control, sw.tenant, sw.session, groundstop.Record{Reason: sw.why, By: "operator", At: since}); err != nil {
			t.Fatal(err)
		}
	}
	l := layovers.Layover{Tenant: "default", Session: "s1", ID: "l-1", Event: "ev-1", WaitingFor: "CI", BookedAt: since, At: since.Add(time.Hour)}
	if err := layovers.Put(ctx, control, l); err != nil {
		t.Fatal(err)
	}
	decode[RecoveryState](t, f.do("PUT", "/v1/sessions/s1/recovery", tokUser, `{"policy":"manual"}`), http.StatusOK)
	for range 2 {
		decode[Accepted](t, f.do("POST", "/v1/sessions/s1/input", tokUser, `{"text":"hello"}`), http.StatusAccepted)
	}

	var d SessionDetail
	waitUntil(t, "both inputs to wait in the work queue", func() bool {
		d = decode[SessionDetail](t, f.do("GET", "/v1/sessions/s1", tokUser, nil), http.StatusOK)
		return d.PendingEvents == 2
	})
	if d.State != "running" || d.Run != "r-7" || d.Cause != "input" || !d.Since.Equal(since) || d.Runs != 3 || d.Agent != "default" {
		t.Errorf("state = %q run %q cause %q since %v runs %d agent %q", d.State, d.Run, d.Cause, d.Since, d.Runs, d.Agent)
	}
	if d.Session != "s1" || d.Revision == 0 || len(d.Record) == 0 {
		t.Errorf("the record fields of the old answer are gone: %+v", d.SessionInfo)
	}
	if len(d.GroundStop) != 3 {
		t.Fatalf("ground_stop = %+v, want global, tenant and session", d.GroundStop)
	}
	for i, want := range []string{"global", "tenant", "session"} {
		if sw := d.GroundStop[i]; sw.Scope != want || !sw.Since.Equal(since) {
			t.Errorf("switch %d = %+v, want scope %s since %v", i, sw, want, since)
		}
	}
	if g := d.GroundStop[0]; g.Reason != "" || g.By != "" {
		t.Errorf("a tenant token reads the global switch's reason: %+v", g)
	}
	if s := d.GroundStop[2]; s.Reason != "look first" || s.By != "operator" {
		t.Errorf("session switch = %+v, want its reason and who set it", s)
	}
	if len(d.Layovers) != 1 || d.Layovers[0].WaitingFor != "CI" {
		t.Errorf("layovers = %+v", d.Layovers)
	}
	if d.Recovery.Effective.Policy != "manual" {
		t.Errorf("recovery = %+v, want the manual override in effect", d.Recovery)
	}
	if d.Jobs == nil || len(d.Jobs) != 0 || d.JobsError != "" {
		t.Errorf("jobs = %+v (%q), want an empty list for a session bound to no worker", d.Jobs, d.JobsError)
	}

	// Nor does the tenant's admin: the global switch is an operator's.
	adm := decode[SessionDetail](t, f.do("GET", "/v1/sessions/s1", tokAdmin, nil), http.StatusOK)
	if adm.GroundStop[0].Reason != "" {
		t.Errorf("a tenant admin reads the global reason: %+v", adm.GroundStop[0])
	}

	// Another tenant has no such session, whatever default's holds.
	problemOf(t, f.do("GET", "/v1/sessions/s1", tokAcme, nil), http.StatusNotFound)
}

func TestSessionDetail_of_a_session_with_no_record_but_waiting_input_says_it_is_held(t *testing.T) {
	f := newFixture(t)
	problemOf(t, f.do("GET", "/v1/sessions/fresh", tokUser, nil), http.StatusNotFound)
	decode[StopState](t, f.do("POST", "/v1/stop?session=fresh", tokAdmin, nil), http.StatusOK)
	decode[Accepted](t, f.do("POST", "/v1/sessions/fresh/input", tokUser, `{"text":"hello"}`), http.StatusAccepted)
	var d SessionDetail
	waitUntil(t, "the input to wait in the work queue", func() bool {
		resp := f.do("GET", "/v1/sessions/fresh", tokUser, nil)
		if resp.StatusCode == http.StatusNotFound {
			return false
		}
		d = decode[SessionDetail](t, resp, http.StatusOK)
		return true
	})
	if d.State != "idle" || d.PendingEvents != 1 || len(d.GroundStop) != 1 || d.GroundStop[0].Scope != "session" {
		t.Fatalf("detail = %+v, want idle, one pending event, held by the session's switch", d)
	}
}
