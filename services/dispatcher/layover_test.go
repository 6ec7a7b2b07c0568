package dispatcher

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"jetway/pkg/bus"
	"jetway/pkg/control/layovers"
	"jetway/pkg/events"
)

func TestResume_sends_a_steer_with_the_default_note(t *testing.T) {
	f := newFixture(t)
	resp := f.do("POST", "/v1/sessions/s1/resume", tokUser, nil)
	acc := decode[Accepted](t, resp, http.StatusAccepted)
	evs, _ := f.eventsOn("jetway.events.default.s1")
	if len(evs) != 1 || evs[0].ID != acc.ID {
		t.Fatalf("published %d events, want the resume's steer", len(evs))
	}
	st, ok := evs[0].Payload.(events.Steer)
	if !ok || st.Note != ResumeNote {
		t.Fatalf("payload = %#v, want a steer with the default note", evs[0].Payload)
	}
}

func TestLayovers_are_listed_and_cancelled_only_within_the_tenant(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	control, err := f.js.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	l := layovers.Layover{Tenant: "default", Session: "s1", ID: "l-1", Event: "ev-1", WaitingFor: "CI", BookedAt: time.Now().UTC(), At: time.Now().Add(time.Hour).UTC()}
	if err := layovers.Put(ctx, control, l); err != nil {
		t.Fatal(err)
	}
	got := decode[LayoverList](t, f.do("GET", "/v1/sessions/s1/layovers", tokUser, nil), http.StatusOK)
	if len(got.Layovers) != 1 || got.Layovers[0].WaitingFor != "CI" {
		t.Fatalf("layovers = %+v", got.Layovers)
	}
	// Another tenant's token sees none and cancels none of them.
	other := decode[LayoverList](t, f.do("GET", "/v1/sessions/s1/layovers", tokAcme, nil), http.StatusOK)
	if len(other.Layovers) != 0 {
		t.Fatalf("tenant acme sees %+v", other.Layovers)
	}
	resp := f.do("DELETE", "/v1/sessions/s1/layover", tokAcme, nil)
	var res map[string]bool
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || res["cancelled"] {
		t.Fatalf("acme cancelled default's layover: %v %v", res, err)
	}
	resp = f.do("DELETE", "/v1/sessions/s1/layover", tokUser, nil)
	res = decode[map[string]bool](t, resp, http.StatusOK)
	if !res["cancelled"] {
		t.Fatal("the owner's cancel did not cancel")
	}
	if _, ok, _ := layovers.Get(ctx, control, "default", "s1"); ok {
		t.Fatal("layover still recorded after cancel")
	}
	p := problemOf(t, f.do("GET", "/v1/sessions/a.b/layovers", tokUser, nil), http.StatusBadRequest)
	if !strings.Contains(p.Detail, "may contain only") {
		t.Fatalf("bad session detail = %q", p.Detail)
	}
}
