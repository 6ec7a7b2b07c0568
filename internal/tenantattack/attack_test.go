package tenantattack

import "testing"

// The check refuses each kind of crossing it exists to catch, and lets the
// attacker's own writes through.
func TestCrossed_names_every_crossing_and_passes_the_attackers_own(t *testing.T) {
	tg := Target{AttackerTenant: "acme", Victim: "globex"}
	crossings := map[string]string{
		"$KV.jetway_control.groundstop":        "KV_jetway_control",
		"$KV.jetway_control.groundstop.globex": "KV_jetway_control",
		"$KV.jetway_control.signin.0a1b":       "KV_jetway_control",
		"$KV.jetway_agents.globex.default":     "KV_jetway_agents",
		"$KV.jetway_event_ids.other.s1.x":      "KV_jetway_event_ids",
		"$KV.jetway_sessions.other.s1":         "KV_jetway_sessions",
		"jetway.jobevents.globex.s1":           "JETWAY_JOBEVENTS",
		"jetway.events.other.s1":               "JETWAY_EVENTS",
		"jetway.transcript.globex.s1":          "JETWAY_TRANSCRIPTS",
	}
	for subject, stream := range crossings {
		if crossed(tg, stream, subject) == "" {
			t.Errorf("%s in %s: not seen as a crossing", subject, stream)
		}
	}
	for subject, stream := range map[string]string{
		"jetway.events.acme.s1":          "JETWAY_EVENTS",
		"$KV.jetway_sessions.acme.s1":    "KV_jetway_sessions",
		"$KV.jetway_runners.r1":          "KV_jetway_runners",
		"jetway.out.acme.s1":             "JETWAY_OUT",
		"$KV.jetway_agents.acme.default": "KV_jetway_agents",
	} {
		if why := crossed(tg, stream, subject); why != "" {
			t.Errorf("%s in %s: seen as a crossing (%s), but it is the attacker's own", subject, stream, why)
		}
	}
}

// Every service export is attacked, with every API endpoint.
func TestRequests_cover_every_service_export_and_endpoint(t *testing.T) {
	got := map[string]bool{}
	for _, s := range Requests() {
		got[s] = true
	}
	for _, want := range []string{"jetway.events.s1", "jetway.api.input", "jetway.api.agents", "jetway.api.stop"} {
		if !got[want] {
			t.Errorf("Requests() misses %s: %v", want, Requests())
		}
	}
}
