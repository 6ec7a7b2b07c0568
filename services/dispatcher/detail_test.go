package dispatcher

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/control/layovers"
	"jetway/pkg/control/sessionrec"
	"jetway/services/runner"
)

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
	testutil.Eventually(t, waitFor, "both inputs to wait in the work queue", func() bool {
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
	testutil.Eventually(t, waitFor, "the input to wait in the work queue", func() bool {
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

func TestSessionDetail_lists_a_session_s_sub_agents_with_their_own_state(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	started := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	put := func(rec runner.SessionRecord) {
		t.Helper()
		b, _ := json.Marshal(rec)
		if _, err := f.sessions().Create(ctx, "default."+rec.Session, b); err != nil {
			t.Fatal(err)
		}
	}
	put(runner.SessionRecord{Tenant: "default", Session: "p1", State: runner.StateIdle, Runs: 1, Children: []sessionrec.Child{
		{Session: "p1-a1", Agent: "reviewer", Number: 1, Run: "r-p", Started: started},
		{Session: "p1-a2", Number: 2, Run: "r-p", Started: started},
	}})
	put(runner.SessionRecord{Tenant: "default", Session: "p1-a1", State: runner.StateRunning, Run: "r-c1", Since: started, Runs: 1,
		Agent: "reviewer", Lineage: []string{"p1"}, Number: 1})
	put(runner.SessionRecord{Tenant: "default", Session: "p1-a2", State: runner.StateIdle, Runs: 1, Reason: "completed",
		Lineage: []string{"p1"}, Number: 2})

	d := decode[SessionDetail](t, f.do("GET", "/v1/sessions/p1", tokUser, nil), http.StatusOK)
	if len(d.Children) != 2 {
		t.Fatalf("children = %+v", d.Children)
	}
	if c := d.Children[0]; c.Session != "p1-a1" || c.Agent != "reviewer" || c.State != "running" || c.Run != "r-c1" || !c.Since.Equal(started) || c.Number != 1 {
		t.Errorf("child 1 = %+v", c)
	}
	if c := d.Children[1]; c.Session != "p1-a2" || c.Agent != "default" || c.State != "idle" || c.Run != "" || c.Reason != "completed" {
		t.Errorf("child 2 = %+v", c)
	}
	child := decode[SessionDetail](t, f.do("GET", "/v1/sessions/p1-a1", tokUser, nil), http.StatusOK)
	if child.Parent != "p1" || child.Root != "p1" || child.Children == nil || len(child.Children) != 0 {
		t.Errorf("the child's detail: parent %q root %q children %+v", child.Parent, child.Root, child.Children)
	}
	// The JSON names the web console reads.
	resp := f.do("GET", "/v1/sessions/p1", tokUser, nil)
	var raw struct {
		Children []map[string]any `json:"children"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, k := range []string{"session", "agent", "state", "run", "since"} {
		if _, ok := raw.Children[0][k]; !ok {
			t.Errorf("children[0] has no %q: %v", k, raw.Children[0])
		}
	}
}

func TestSessionDetail_of_a_sub_agent_shows_its_root_s_Ground_Stop_switch(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, rec := range []runner.SessionRecord{
		{Tenant: "default", Session: "p1", State: runner.StateStopped, Runs: 1},
		{Tenant: "default", Session: "p1-a1", State: runner.StateIdle, Lineage: []string{"p1"}, Number: 1},
	} {
		b, _ := json.Marshal(rec)
		if _, err := f.sessions().Create(ctx, "default."+rec.Session, b); err != nil {
			t.Fatal(err)
		}
	}
	control, err := f.js.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := groundstop.Set(ctx, control, "default", "p1", groundstop.Record{Reason: "look first", By: "default"}); err != nil {
		t.Fatal(err)
	}

	d := decode[SessionDetail](t, f.do("GET", "/v1/sessions/p1-a1", tokUser, nil), http.StatusOK)
	if len(d.GroundStop) != 1 {
		t.Fatalf("ground_stop = %+v, want the root's switch (the runner holds the sub-agent by it)", d.GroundStop)
	}
	if sw := d.GroundStop[0]; sw.Scope != "ancestor" || sw.Session != "p1" || sw.Reason != "look first" {
		t.Errorf("switch = %+v, want the ancestor p1's, with its reason", sw)
	}
}

// The answer to an input and the stop status of a sub-agent name its
// root's switch too, as its detail does: the runner holds the sub-agent by
// it, so "sent" must not read as "being worked on".
func TestInput_answer_and_stop_status_of_a_sub_agent_show_its_root_s_switch(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, rec := range []runner.SessionRecord{
		{Tenant: "default", Session: "p1", State: runner.StateStopped, Runs: 1},
		{Tenant: "default", Session: "p1-a1", State: runner.StateIdle, Lineage: []string{"p1"}, Number: 1},
	} {
		b, _ := json.Marshal(rec)
		if _, err := f.sessions().Create(ctx, "default."+rec.Session, b); err != nil {
			t.Fatal(err)
		}
	}
	// Before the mirror is ready the answer reads the bucket; after, the
	// mirror: both paths are taken.
	decode[StopState](t, f.do("POST", "/v1/stop?session=p1", tokAdmin, `{"reason":"look first"}`), http.StatusOK)
	held := func() bool {
		acc := decode[Accepted](t, f.do("POST", "/v1/sessions/p1-a1/input", tokUser, `{"text":"hi"}`), http.StatusAccepted)
		return len(acc.Held) == 1 && acc.Held[0].Scope == "ancestor" && acc.Held[0].Session == "p1"
	}
	if !held() {
		t.Error("the first input's answer does not name the root's switch")
	}
	testutil.Eventually(t, waitFor, "the switch mirror to be ready", f.mirrorReady)
	testutil.Eventually(t, waitFor, "the root's switch in an answer from the mirror", held)
	st := decode[StopState](t, f.do("GET", "/v1/stop?session=p1-a1", tokUser, nil), http.StatusOK)
	if len(st.Covering) != 1 || st.Covering[0].Scope != "ancestor" || st.Covering[0].Session != "p1" {
		t.Errorf("stop status covering = %+v, want the ancestor p1's switch", st.Covering)
	}
}
