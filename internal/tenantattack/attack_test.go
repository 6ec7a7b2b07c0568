package tenantattack

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"jetway/pkg/bus"
)

// The check refuses each kind of crossing it exists to catch, and lets the
// attacker's own writes through.
func TestCrossed_names_every_crossing_and_passes_the_attackers_own(t *testing.T) {
	l := bus.Layout{Partitions: 16, Shards: 3}
	tg := Target{AttackerTenant: "acme", Victim: "globex", layout: l}
	ap := bus.PartitionFor("acme", "s1", 16)
	crossings := map[string]string{
		// In a shard: the victim's, someone else's, and the attacker's
		// own in a partition it chose.
		fmt.Sprintf("jetway.events.%d.globex.s1", ap):      l.Stream(ap),
		fmt.Sprintf("jetway.events.%d.other.s1", ap):       l.Stream(ap),
		fmt.Sprintf("jetway.events.%d.acme.s1", (ap+3)%16): l.Stream((ap + 3) % 16),
		fmt.Sprintf("jetway.jobevents.%d.acme.s1", ap):     l.Stream(ap),
		"jetway.events.acme.s1":                            l.Stream(ap),
		"$KV.jetway_control.groundstop":                    "KV_jetway_control",
		"$KV.jetway_control.groundstop.globex":             "KV_jetway_control",
		"$KV.jetway_control.signin.0a1b":                   "KV_jetway_control",
		"$KV.jetway_agents.globex.default":                 "KV_jetway_agents",
		"$KV.jetway_event_ids.other.s1.x":                  "KV_jetway_event_ids",
		"$KV.jetway_sessions.other.s1":                     "KV_jetway_sessions",
		"jetway.jobevents.globex.s1":                       "JETWAY_JOBEVENTS",
		"jetway.events.other.s1":                           "JETWAY_EVENTS",
		"jetway.transcript.globex.s1":                      "JETWAY_TRANSCRIPTS",
	}
	for subject, stream := range crossings {
		if crossed(tg, stream, subject) == "" {
			t.Errorf("%s in %s: not seen as a crossing", subject, stream)
		}
	}
	for subject, stream := range map[string]string{
		fmt.Sprintf("jetway.events.%d.acme.s1", ap): l.Stream(ap),
		"jetway.events.acme.s1":                     "JETWAY_EVENTS",
		"$KV.jetway_sessions.acme.s1":               "KV_jetway_sessions",
		"$KV.jetway_runners.r1":                     "KV_jetway_runners",
		"jetway.out.acme.s1":                        "JETWAY_OUT",
		"$KV.jetway_agents.acme.default":            "KV_jetway_agents",
	} {
		if why := crossed(tg, stream, subject); why != "" {
			t.Errorf("%s in %s: seen as a crossing (%s), but it is the attacker's own", subject, stream, why)
		}
	}
}

// Every service export is attacked, with every API endpoint, and the
// events export in a session of every shard.
func TestRequests_cover_every_service_export_endpoint_and_shard(t *testing.T) {
	l := bus.Layout{Partitions: 16, Shards: 3}
	got := map[string]bool{}
	shards := map[string]bool{}
	for _, s := range Requests("acme", l) {
		got[s] = true
		if session, ok := strings.CutPrefix(s, "jetway.events."); ok {
			shards[l.Stream(bus.PartitionFor("acme", session, l.Partitions))] = true
		}
	}
	for _, want := range []string{"jetway.events.s1", "jetway.api.input", "jetway.api.agents", "jetway.api.stop"} {
		if !got[want] {
			t.Errorf("Requests misses %s: %v", want, Requests("acme", l))
		}
	}
	if len(shards) != l.Shards {
		t.Errorf("the events requests reach shards %v, want all %d", shards, l.Shards)
	}
}

// The tenant-written streams are the layout's shards, and the sensitive
// subjects name each with the JetStream API, and the victim's session in
// its partition and in another.
func TestSensitiveReplies_name_every_shard_and_partitioned_subject(t *testing.T) {
	l := bus.Layout{Partitions: 16, Shards: 3}
	if got := TenantWritten(l); !slices.Equal(got, []string{"JETWAY_WORK_0", "JETWAY_WORK_1", "JETWAY_WORK_2"}) {
		t.Errorf("TenantWritten = %v", got)
	}
	got := SensitiveReplies("globex", l)
	vp := bus.PartitionFor("globex", "s1", 16)
	for _, want := range []string{
		"$JS.API.STREAM.PURGE.JETWAY_WORK_2", "$JS.API.STREAM.MSG.DELETE.JETWAY_WORK_0", "$JS.API.STREAM.PURGE.JETWAY_EVENTS",
		fmt.Sprintf("jetway.events.%d.globex.s1", vp), fmt.Sprintf("jetway.events.%d.globex.s1", (vp+1)%16),
		fmt.Sprintf("jetway.fired.%d.globex.s1", vp), "jetway.events.globex.s1",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("SensitiveReplies misses %s", want)
		}
	}
}
