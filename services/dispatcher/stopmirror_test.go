package dispatcher

import (
	"context"
	"net/http"
	"testing"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/control/groundstop"
)

func (f *fixture) mirrorReady() bool {
	f.d.groundStop.stopsOnce.Do(f.d.groundStop.startStopMirror)
	return f.d.groundStop.stops != nil && f.d.groundStop.stops.IsReady()
}

func scopes(acc Accepted) []string {
	var out []string
	for _, h := range acc.Held {
		out = append(out, h.Scope)
	}
	return out
}

func TestInput_answer_says_which_Ground_Stop_switches_hold_the_session_as_they_change(t *testing.T) {
	f := newFixture(t)
	input := func() Accepted {
		return decode[Accepted](t, f.do("POST", "/v1/sessions/s1/input", tokUser, `{"text":"hi"}`), http.StatusAccepted)
	}
	if acc := input(); len(acc.Held) != 0 {
		t.Fatalf("held = %+v with no switch on", acc.Held)
	}
	testutil.Eventually(t, waitFor, "the switch mirror to be ready", f.mirrorReady)

	// A switch set by someone else (another dispatcher) shows once the
	// watch brings it.
	control, err := f.js.KeyValue(context.Background(), bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := groundstop.Set(context.Background(), control, "default", "s1", groundstop.Record{By: "default", Reason: "look first"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitFor, "the session switch in the answer", func() bool {
		acc := input()
		return len(acc.Held) == 1 && acc.Held[0].Scope == "session" && acc.Held[0].Reason == "look first"
	})

	// One this dispatcher flips shows in its very next answer.
	decode[StopState](t, f.do("POST", "/v1/stop?scope=global", tokOperator, `{"reason":"incident"}`), http.StatusOK)
	acc := input()
	if got := scopes(acc); len(got) != 2 || got[0] != "global" || got[1] != "session" {
		t.Fatalf("held scopes = %v, want global and session", got)
	}
	if acc.Held[0].Reason != "" || acc.Held[0].Since.IsZero() {
		t.Errorf("a tenant token reads the global switch as %+v, want its time only", acc.Held[0])
	}
	decode[StopState](t, f.do("DELETE", "/v1/stop?scope=global", tokOperator, nil), http.StatusOK)
	decode[StopState](t, f.do("DELETE", "/v1/stop?session=s1", tokAdmin, nil), http.StatusOK)
	if acc := input(); len(acc.Held) != 0 {
		t.Fatalf("held = %+v after both switches were lifted", acc.Held)
	}

	// Steer answers the same way.
	decode[StopState](t, f.do("POST", "/v1/stop", tokAdmin, nil), http.StatusOK)
	st := decode[Accepted](t, f.do("POST", "/v1/sessions/s1/steer", tokUser, `{"note":"tests first"}`), http.StatusAccepted)
	if got := scopes(st); len(got) != 1 || got[0] != "tenant" {
		t.Fatalf("steer held scopes = %v, want tenant", got)
	}

	// So do CloudEvents from other systems, one by one and in a batch.
	ce := map[string]any{"specversion": "1.0", "id": "ci-1", "source": "ci", "type": "io.jetway.input", "subject": "default/s1", "data": map[string]any{"text": "ci is green"}}
	one := decode[Accepted](t, f.do("POST", "/v1/events", tokUser, ce, "Content-Type", "application/cloudevents+json"), http.StatusAccepted)
	if got := scopes(one); len(got) != 1 || got[0] != "tenant" {
		t.Fatalf("cloudevent held scopes = %v, want tenant", got)
	}
	ce["id"] = "ci-2"
	batch := decode[BatchAccepted](t, f.do("POST", "/v1/events", tokUser, []map[string]any{ce}, "Content-Type", "application/cloudevents-batch+json"), http.StatusAccepted)
	if len(batch.Events) != 1 || len(batch.Events[0].Held) != 1 || batch.Events[0].Held[0].Scope != "tenant" {
		t.Fatalf("batch answer = %+v, want its event held by the tenant switch", batch)
	}
}
