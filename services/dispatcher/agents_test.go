package dispatcher

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
)

func TestAgent_profiles_are_written_by_a_tenant_admin_and_read_by_its_users(t *testing.T) {
	f := newFixture(t)
	// A user may not write; an admin of another tenant writes only its own.
	if p := problemOf(t, f.do("PUT", "/v1/agents/reviewer", tokAcme, `{"instructions":"Review."}`), http.StatusForbidden); p.Detail == "" {
		t.Fatalf("a user's PUT refused without a reason: %+v", p)
	}
	a := decode[Agent](t, f.do("PUT", "/v1/agents/reviewer", tokAcmeAdmin,
		`{"instructions":"Review.","tools":{"allow":["read_file"]},"limits":{"max_turns":5}}`), http.StatusOK)
	if a.Name != "reviewer" || a.Version == 0 || a.Instructions != "Review." {
		t.Fatalf("stored %+v", a)
	}
	got := decode[Agent](t, f.do("GET", "/v1/agents/reviewer", tokAcme, nil), http.StatusOK)
	if got.Version != a.Version || got.Limits.MaxTurns != 5 || len(got.Tools.Allow) != 1 {
		t.Fatalf("read back %+v", got)
	}
	list := decode[AgentList](t, f.do("GET", "/v1/agents", tokAcme, nil), http.StatusOK)
	if len(list.Agents) != 2 || list.Agents[0].Name != "default" || list.Agents[1].Name != "reviewer" {
		t.Fatalf("acme lists %+v", list.Agents)
	}
	// Another tenant sees none of it.
	p := problemOf(t, f.do("GET", "/v1/agents/reviewer", tokUser, nil), http.StatusNotFound)
	if p.Field != "agent" {
		t.Fatalf("unknown agent problem %+v, want the field named", p)
	}
	if list := decode[AgentList](t, f.do("GET", "/v1/agents", tokUser, nil), http.StatusOK); len(list.Agents) != 1 {
		t.Fatalf("tenant default lists %+v", list.Agents)
	}

	// An update is a new version; deleting needs an admin too.
	b := decode[Agent](t, f.do("PUT", "/v1/agents/reviewer", tokAcmeAdmin, `{"instructions":"Review harder."}`), http.StatusOK)
	if b.Version <= a.Version {
		t.Fatalf("update version %d after %d", b.Version, a.Version)
	}
	problemOf(t, f.do("DELETE", "/v1/agents/reviewer", tokAcme, nil), http.StatusForbidden)
	if d := decode[struct{ Deleted bool }](t, f.do("DELETE", "/v1/agents/reviewer", tokAcmeAdmin, nil), http.StatusOK); !d.Deleted {
		t.Fatal("delete said nothing was deleted")
	}
	problemOf(t, f.do("GET", "/v1/agents/reviewer", tokAcme, nil), http.StatusNotFound)
}

func TestA_bad_agent_profile_is_refused_naming_the_field_and_nothing_is_stored(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct{ body, field string }{
		{`{}`, "instructions"},
		{`{"instructions":"x","limits":{"max_turns":-1}}`, "limits.max_turns"},
		{`{"instructions":"x","limits":{"max_duration":"forever"}}`, "limits.max_duration"},
		{`{"instructions":"x","model":{"provider":"gemini"}}`, "model.provider"},
		{`{"instructions":"x","tools":{"allow":["shell","no such"]}}`, "tools.allow[1]"},
		{`{"instructions":"x","recovery":"sometimes"}`, "recovery"},
		{`{"instructions":"x","instrucions":"typo"}`, "instrucions"},
		{`{"instructions":"x","limits":{"max_turns":"five"}}`, "limits.max_turns"},
		{`{"instructions":"x","name":"other"}`, "name"},
	} {
		p := problemOf(t, f.do("PUT", "/v1/agents/reviewer", tokAdmin, c.body), http.StatusBadRequest)
		if p.Field != c.field {
			t.Errorf("PUT %s: field %q (%s), want %q", c.body, p.Field, p.Detail, c.field)
		}
	}
	if p := problemOf(t, f.do("PUT", "/v1/agents/bad.name", tokAdmin, `{"instructions":"x"}`), http.StatusBadRequest); p.Field != "name" {
		t.Errorf("bad name: %+v", p)
	}
	problemOf(t, f.do("GET", "/v1/agents/reviewer", tokUser, nil), http.StatusNotFound)
}

func TestThe_default_agent_always_exists_and_may_be_overridden(t *testing.T) {
	f := newFixture(t)
	a := decode[Agent](t, f.do("GET", "/v1/agents/default", tokUser, nil), http.StatusOK)
	if a.Name != "default" || a.Version != 0 {
		t.Fatalf("implicit default %+v", a)
	}
	decode[Agent](t, f.do("PUT", "/v1/agents/default", tokAdmin, `{"instructions":"Be brief."}`), http.StatusOK)
	if a := decode[Agent](t, f.do("GET", "/v1/agents/default", tokUser, nil), http.StatusOK); a.Instructions != "Be brief." || a.Version == 0 {
		t.Fatalf("stored default %+v", a)
	}
	decode[struct{ Deleted bool }](t, f.do("DELETE", "/v1/agents/default", tokAdmin, nil), http.StatusOK)
	if a := decode[Agent](t, f.do("GET", "/v1/agents/default", tokUser, nil), http.StatusOK); a.Version != 0 || a.Instructions != "" {
		t.Fatalf("default after delete %+v", a)
	}
}

func TestAgent_profiles_over_NATS_have_the_same_rights_and_errors(t *testing.T) {
	f := newFixture(t)
	startNATSAPI(t, f)
	resp := natsRequest(t, f, SubjectAgents, tokAcme, `{"action":"put","name":"reviewer","profile":{"instructions":"x"}}`)
	if code := resp.Header.Get("Nats-Service-Error-Code"); code != "403" {
		t.Fatalf("a user's put: code %q (%s), want 403", code, resp.Data)
	}
	resp = natsRequest(t, f, SubjectAgents, tokAcmeAdmin, `{"action":"put","name":"reviewer","profile":{"instructions":"x","limits":{"fuel":-1}}}`)
	var p Problem
	if code := resp.Header.Get("Nats-Service-Error-Code"); code != "400" || json.Unmarshal(resp.Data, &p) != nil || p.Field != "limits.fuel" {
		t.Fatalf("a bad put: code %q %s, want 400 naming limits.fuel", code, resp.Data)
	}
	resp = natsRequest(t, f, SubjectAgents, tokAcmeAdmin, `{"action":"put","name":"reviewer","profile":{"instructions":"x"}}`)
	var a Agent
	if err := json.Unmarshal(resp.Data, &a); err != nil || a.Version == 0 {
		t.Fatalf("put: %s (%v)", resp.Data, err)
	}
	resp = natsRequest(t, f, SubjectAgents, tokAcme, `{"name":"reviewer"}`)
	if err := json.Unmarshal(resp.Data, &a); err != nil || a.Name != "reviewer" || a.Instructions != "x" {
		t.Fatalf("get: %s (%v)", resp.Data, err)
	}
	resp = natsRequest(t, f, SubjectAgents, tokAcme, `{}`)
	var list AgentList
	if err := json.Unmarshal(resp.Data, &list); err != nil || len(list.Agents) != 2 {
		t.Fatalf("list: %s (%v)", resp.Data, err)
	}
	resp = natsRequest(t, f, SubjectAgents, tokAcme, `{"name":"nobody"}`)
	if code := resp.Header.Get("Nats-Service-Error-Code"); code != "404" {
		t.Fatalf("unknown: code %q (%s), want 404", code, resp.Data)
	}
}

func TestThe_Go_client_manages_agent_profiles_against_the_dispatcher(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	admin, user := f.client(t, tokAcmeAdmin), f.client(t, tokAcme)
	if _, err := user.PutAgent(ctx, "reviewer", Agent{Instructions: "x"}); err == nil || !strings.Contains(err.Error(), "admin") {
		t.Fatalf("a user's put: %v, want a refusal naming the admin right", err)
	}
	_, err := admin.PutAgent(ctx, "reviewer", Agent{Instructions: "x", Limits: api.AgentLimits{MaxDuration: "later"}})
	if err == nil || !strings.Contains(err.Error(), "limits.max_duration") {
		t.Fatalf("a bad put: %v, want an error naming limits.max_duration", err)
	}
	a, err := admin.PutAgent(ctx, "reviewer", Agent{Instructions: "Review."})
	if err != nil || a.Version == 0 {
		t.Fatalf("put: %+v, %v", a, err)
	}
	got, err := user.Agent(ctx, "reviewer")
	if err != nil || got.Instructions != "Review." || got.Version != a.Version {
		t.Fatalf("get: %+v, %v", got, err)
	}
	list, err := user.Agents(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if ok, err := admin.DeleteAgent(ctx, "reviewer"); !ok || err != nil {
		t.Fatalf("delete: %v, %v", ok, err)
	}
	if _, err := user.Agent(ctx, "reviewer"); err == nil || !strings.Contains(err.Error(), "reviewer") {
		t.Fatalf("get after delete: %v, want an error naming the agent", err)
	}
}

func TestInput_or_steer_naming_an_agent_carries_the_binding_and_an_unknown_agent_is_refused_naming_it(t *testing.T) {
	f := newFixture(t)
	startNATSAPI(t, f)
	decode[Agent](t, f.do("PUT", "/v1/agents/reviewer", tokAcmeAdmin, `{"instructions":"Review."}`), http.StatusOK)
	before := f.lastSeq()

	p := problemOf(t, f.do("POST", "/v1/sessions/s1/input", tokAcme, `{"text":"hi","agent":"nobody"}`), http.StatusNotFound)
	if p.Field != "agent" || !strings.Contains(p.Detail, `"nobody"`) {
		t.Fatalf("unknown agent: %+v", p)
	}
	if p := problemOf(t, f.do("POST", "/v1/sessions/s1/input", tokAcme, `{"text":"hi","agent":"a.b"}`), http.StatusBadRequest); p.Field != "agent" {
		t.Fatalf("bad agent name: %+v", p)
	}
	// A CloudEvent naming an unknown agent is refused whole, its batch too.
	batch := []map[string]any{
		{"specversion": "1.0", "id": "b1", "source": "ci", "type": "io.jetway.input", "subject": "acme/s1", "data": map[string]any{"text": "go"}},
		{"specversion": "1.0", "id": "b2", "source": "ci", "type": "io.jetway.input", "subject": "acme/s1", "jetwayagent": "nobody", "data": map[string]any{"text": "go"}},
	}
	if p := problemOf(t, f.do("POST", "/v1/events", tokAcme, batch, "Content-Type", "application/cloudevents-batch+json"), http.StatusNotFound); !strings.Contains(p.Detail, "nobody") {
		t.Fatalf("batch with an unknown agent: %+v", p)
	}
	resp := natsRequest(t, f, SubjectInput, tokAcme, `{"session":"s1","text":"hi","agent":"nobody"}`)
	if code := resp.Header.Get("Nats-Service-Error-Code"); code != "404" || !strings.Contains(string(resp.Data), "nobody") {
		t.Fatalf("NATS input with an unknown agent: %q %s", code, resp.Data)
	}
	// A steer binds as an input does, with the same refusals.
	if p := problemOf(t, f.do("POST", "/v1/sessions/s1/steer", tokAcmeAdmin, `{"note":"stop","agent":"nobody"}`), http.StatusNotFound); p.Field != "agent" || !strings.Contains(p.Detail, `"nobody"`) {
		t.Fatalf("steer with an unknown agent: %+v", p)
	}
	resp = natsRequest(t, f, SubjectSteer, tokAcmeAdmin, `{"session":"s1","note":"stop","agent":"nobody"}`)
	if code := resp.Header.Get("Nats-Service-Error-Code"); code != "404" {
		t.Fatalf("NATS steer with an unknown agent: %q %s", code, resp.Data)
	}
	if f.lastSeq() != before {
		t.Fatal("a refused event was published")
	}

	decode[Accepted](t, f.do("POST", "/v1/sessions/s1/input", tokAcme, `{"text":"hi","agent":"reviewer"}`), http.StatusAccepted)
	decode[BatchAccepted](t, f.do("POST", "/v1/events", tokAcme, batch[:1], "Content-Type", "application/cloudevents-batch+json"), http.StatusAccepted)
	decode[Accepted](t, f.do("POST", "/v1/sessions/s1/steer", tokAcmeAdmin, `{"note":"look again","agent":"reviewer"}`), http.StatusAccepted)
	evs, _ := f.eventsOn("jetway.events.acme.s1")
	if len(evs) != 3 || evs[0].Agent != "reviewer" || evs[1].Agent != "" || evs[2].Agent != "reviewer" {
		t.Fatalf("stored events bind %q, %q and %q, want reviewer, nothing and reviewer", agentOfAll(evs)...)
	}
	if _, ok := evs[2].Payload.(events.Steer); !ok {
		t.Fatalf("third stored event is %T, want the steer", evs[2].Payload)
	}
}

func agentOfAll(evs []events.HostEvent) []any {
	out := []any{}
	for _, e := range evs {
		out = append(out, e.Agent)
	}
	return out
}

func TestA_session_s_effective_recovery_policy_is_its_agent_profile_s_under_its_own_override(t *testing.T) {
	f := newFixture(t)
	a := decode[Agent](t, f.do("PUT", "/v1/agents/careful", tokAcmeAdmin, `{"instructions":"x","recovery":"manual"}`), http.StatusOK)
	// A session whose last run went by the profile.
	rec := map[string]any{"tenant": "acme", "session": "s1", "state": "idle", "since": "2026-12-03T06:00:00Z", "runs": 1,
		"attempts": map[string]any{}, "agent": "careful", "agent_version": a.Version}
	b, _ := json.Marshal(rec)
	if _, err := f.sessions().Put(context.Background(), "acme.s1", b); err != nil {
		t.Fatal(err)
	}
	st := decode[RecoveryState](t, f.do("GET", "/v1/sessions/s1/recovery", tokAcme, nil), http.StatusOK)
	if st.Effective.Policy != "manual" || st.Override != nil {
		t.Fatalf("effective %+v override %+v, want the profile's manual and no override", st.Effective, st.Override)
	}
	st = decode[RecoveryState](t, f.do("PUT", "/v1/sessions/s1/recovery", tokAcmeAdmin, `{"policy":"automatic"}`), http.StatusOK)
	if st.Effective.Policy != "automatic" {
		t.Fatalf("the session's own override does not win: %+v", st.Effective)
	}
	// An unbound session has the defaults.
	if st := decode[RecoveryState](t, f.do("GET", "/v1/sessions/s2/recovery", tokAcme, nil), http.StatusOK); st.Effective.Policy != "automatic" {
		t.Fatalf("unbound session: %+v", st.Effective)
	}
}
