package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
)

// TestQuick_raw_figures_come_out_as_the_documented_JSON runs the harness on
// the raw group with a handful of messages and checks the shape of what it
// reports, not how fast anything was.
func TestQuick_raw_figures_come_out_as_the_documented_JSON(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var lines []string
	res, err := Run(ctx, Config{
		Quick:    true,
		Groups:   []string{GroupRaw},
		Sizes:    Sizes{RawMessages: 100, RawSamples: 20},
		WorkDir:  t.TempDir(),
		Progress: func(l string) { lines = append(lines, l); t.Log(l) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 {
		t.Error("no progress lines while running")
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, res); err != nil {
		t.Fatal(err)
	}
	var decoded []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &decoded); err != nil {
		t.Fatalf("JSON output is not an array of objects: %v\n%s", err, buf.String())
	}
	want := map[string]bool{FigRawSyncP50: false, FigRawSyncP99: false, FigRawAsync: false, FigRawConsume: false, FigRawRequestP50: false, FigRawRequestP99: false,
		FigRawFloor: false, FigRawFloorShards: false, FigRawFloorShards4: false, FigRawFloorUnsharded: false, FigRawFloorAckAll: false}
	for _, f := range decoded {
		for _, k := range []string{"name", "unit", "value", "baseline", "ratio", "goal"} {
			if _, ok := f[k]; !ok {
				t.Errorf("figure %v has no %q field", f["name"], k)
			}
		}
		name, _ := f["name"].(string)
		if _, ok := want[name]; ok {
			want[name] = true
		}
		v, ok := f["value"].(float64)
		if !ok || v <= 0 {
			t.Errorf("figure %q: value = %v, want a positive number", name, f["value"])
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("figure %q missing from the JSON", name)
		}
	}
	var table bytes.Buffer
	if err := WriteTable(&table, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), FigRawAsync) || !strings.Contains(table.String(), "BASELINE") {
		t.Fatalf("table misses its header or a figure:\n%s", table.String())
	}
}

func TestA_figure_that_cannot_be_measured_says_why_and_has_no_value(t *testing.T) {
	r := NotMeasured("runner failover", "s", "≤ 5 s", "no jetway binary")
	var buf bytes.Buffer
	if err := WriteJSON(&buf, []Result{r}); err != nil {
		t.Fatal(err)
	}
	var decoded []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	if decoded[0]["value"] != nil || decoded[0]["ratio"] != nil {
		t.Fatalf("an unmeasured figure carries numbers: %v", decoded[0])
	}
	if decoded[0]["note"] != "not measured: no jetway binary" {
		t.Fatalf("note = %v", decoded[0]["note"])
	}
	var table bytes.Buffer
	if err := WriteTable(&table, []Result{r}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "not measured: no jetway binary") {
		t.Fatalf("table hides the reason:\n%s", table.String())
	}
}

func TestRatio_is_value_over_baseline(t *testing.T) {
	r := figure("x", "ms", 3).vs("raw", 2)
	if r.Ratio == nil || *r.Ratio != 1.5 {
		t.Fatalf("ratio = %v, want 1.5", r.Ratio)
	}
	if p := (samples{1 * time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond}).pct(50); p != 2 {
		t.Fatalf("p50 of 1..4 ms = %v, want 2", p)
	}
}

// TestQuick_cold_and_felt_groups_report_their_figures_with_goals runs the
// two latency groups a person feels on a handful of probes and checks each
// figure came out measured, with its goal: the shape, not the speed. The
// felt group runs as it does in jetway-bench: a `jetway dev` process built
// from this checkout, and this test binary again as the client process.
func TestQuick_cold_and_felt_groups_report_their_figures_with_goals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{
		Quick:         true,
		Groups:        []string{GroupCold, GroupFelt},
		Sizes:         Sizes{RawMessages: 100, RawSamples: 20, Probes: 5, SessionCounts: []int{5}},
		WorkDir:       t.TempDir(),
		JetwayBinary:  testutil.JetwayBinary(t),
		ClientCommand: testClientCommand(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		FigRunnerColdStart("p99"): coldGoal,
		FigFeltAdded:              feltGoal,
		FigFeltP50:                "-",
		FigFeltP99:                "-",
		FigFeltPostedP99:          "-",
		FigFeltStartedP99:         "-",
	}
	for _, r := range res {
		goal, ok := want[r.Name]
		if !ok {
			continue
		}
		delete(want, r.Name)
		if r.Value == nil {
			t.Errorf("%s: %s", r.Name, r.Note)
			continue
		}
		if r.Goal != goal {
			t.Errorf("%s: goal %q, want %q", r.Name, r.Goal, goal)
		}
		if (r.Name == FigFeltP99 || r.Name == FigFeltPostedP99 || r.Name == FigFeltStartedP99) && (r.Baseline == nil || *r.Baseline <= 0) {
			t.Errorf("%s: no baseline beside it", r.Name)
		}
	}
	for name := range want {
		t.Errorf("figure %q missing", name)
	}
}

// TestQuick_approvals_group_reports_its_figures_beside_their_baselines
// runs the approvals group on a handful of decisions and sessions and
// checks each figure came out measured, with its goal and baseline: the
// shape, not the speed.
func TestQuick_approvals_group_reports_its_figures_beside_their_baselines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{
		Quick:   true,
		Groups:  []string{GroupApprovals},
		Sizes:   Sizes{RawMessages: 100, RawSamples: 20, Probes: 3, IdleSessions: 5},
		WorkDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{FigApprovalP50: "-", FigApprovalP99: approvalGoal, FigApprovalIdleMem: "-", FigApprovalWaitingMem: waitingGoal}
	for _, r := range res {
		goal, ok := want[r.Name]
		if !ok {
			continue
		}
		delete(want, r.Name)
		if r.Value == nil {
			t.Errorf("%s: %s", r.Name, r.Note)
			continue
		}
		if r.Goal != goal {
			t.Errorf("%s: goal %q, want %q", r.Name, r.Goal, goal)
		}
		if r.Name != FigApprovalIdleMem && (r.Baseline == nil || *r.Baseline == 0) {
			t.Errorf("%s: no baseline beside it", r.Name)
		}
	}
	for name := range want {
		t.Errorf("figure %q missing", name)
	}
}

// TestQuick_leaders_group_measures_each_single_leader runs the leaders
// group without the runner's: each leader's rate comes out beside raw
// async publish, and the events a second they carry is not measured,
// saying why (nothing said what each leader takes per event).
func TestQuick_leaders_group_measures_each_single_leader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{
		Quick:   true,
		Groups:  []string{GroupLeaders},
		Sizes:   Sizes{RawMessages: 2000, RawSamples: 20, SustainedSessions: 20},
		WorkDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{FigLeaderLog: true, FigLeaderTranscripts: true, FigLeaderOut: true, FigLeaderSessions: true, FigLeadersCeiling: false}
	for _, r := range res {
		measured, ok := want[r.Name]
		if !ok {
			continue
		}
		delete(want, r.Name)
		if !measured {
			if r.Value != nil || !strings.Contains(r.Note, "tapped run") {
				t.Errorf("%s: value %v, note %q; want not measured, saying the runner's tapped run is missing", r.Name, r.Value, r.Note)
			}
			continue
		}
		if r.Value == nil || *r.Value <= 0 {
			t.Errorf("%s: not measured: %s", r.Name, r.Note)
			continue
		}
		if r.Baseline == nil || *r.Baseline == 0 {
			t.Errorf("%s: no baseline beside it", r.Name)
		}
	}
	for name := range want {
		t.Errorf("figure %q missing", name)
	}
}

func TestLeader_loads_are_the_tapped_writes_per_event_and_their_mean_size(t *testing.T) {
	counts := map[string]int{
		"out: transcript append":                    60,
		"out: output event (io.jetway.run.text)":    40,
		"out: output event (io.jetway.run.started)": 10,
		"out: session record write":                 20,
		"in: reply to a request or publish":         80,
	}
	sizes := map[string]int{
		"out: transcript append":                    60 * 500,
		"out: output event (io.jetway.run.text)":    40 * 200,
		"out: output event (io.jetway.run.started)": 10 * 100,
		"out: session record write":                 20 * 300,
	}
	got := leaderLoadsOf(counts, sizes, 100)
	want := map[string]leaderLoad{
		bus.StreamTranscripts: {perEvent: 0.6, size: 500},
		bus.StreamOut:         {perEvent: 0.5, size: 180},
		bus.StreamSessions:    {perEvent: 0.2, size: 300},
	}
	if !maps.Equal(got, want) {
		t.Fatalf("leaderLoadsOf = %v, want %v", got, want)
	}
}
