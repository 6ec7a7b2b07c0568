package handover

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// roundTrip marshals v, checks the JSON is exactly want, reads it back into a
// fresh T and checks nothing was lost.
func roundTrip[T any](t *testing.T, v T, want string) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %+v: %v", v, err)
	}
	if string(data) != want {
		t.Errorf("marshal %+v:\n got %s\nwant %s", v, data, want)
	}
	var back T
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("unmarshal %s: %v", data, err)
	}
	if !reflect.DeepEqual(back, v) {
		t.Errorf("round trip of %s:\n got %+v\nwant %+v", data, back, v)
	}
}

func TestJSON_interruptions_round_trip_with_lowercase_kinds(t *testing.T) {
	roundTrip(t, Interruption{Kind: RunnerRestart}, `{"kind":"runner_restart"}`)
	roundTrip(t, Interruption{Kind: LostContact}, `{"kind":"lost_contact"}`)
	roundTrip(t, Interruption{Kind: Timeout}, `{"kind":"timeout"}`)
	roundTrip(t, CrashedWithCode(1), `{"kind":"crashed","exit_code":1}`)
	roundTrip(t, CrashedWithCode(0), `{"kind":"crashed","exit_code":0}`)
	roundTrip(t, Interruption{Kind: Crashed}, `{"kind":"crashed"}`)
	roundTrip(t, Interruption{Kind: GroundStop}, `{"kind":"ground_stop"}`)
}

func TestJSON_recovery_policies_round_trip_as_lowercase_names(t *testing.T) {
	roundTrip(t, Automatic, `"automatic"`)
	roundTrip(t, Manual, `"manual"`)
	roundTrip(t, Never, `"never"`)
	for _, s := range []string{"automatic", "manual", "never"} {
		p, err := ParseRecoveryPolicy(s)
		if err != nil || p.String() != s {
			t.Errorf("ParseRecoveryPolicy(%q) = %v, %v", s, p, err)
		}
	}
}

func TestJSON_recovery_settings_and_overrides_round_trip(t *testing.T) {
	roundTrip(t, DefaultRecoverySettings(), `{"policy":"automatic","max_attempts":3}`)
	roundTrip(t, RecoverySettings{Policy: Never}, `{"policy":"never","max_attempts":0}`)
	manual, zero := Manual, 0
	roundTrip(t, RecoveryOverride{}, `{}`)
	roundTrip(t, RecoveryOverride{Policy: &manual, MaxAttempts: &zero}, `{"policy":"manual","max_attempts":0}`)
}

func TestJSON_causes_round_trip_for_every_kind(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 15, 0, 0, time.UTC)
	r := Recovery{Previous: "run_1", Interruption: CrashedWithCode(137), Attempt: 2}
	s := Steer{Previous: "run_2", Note: "use the helper", At: at}
	res := Resumption{BookedBy: "itn_3", WaitingFor: "CI", BookedAt: at, Checks: 4}

	roundTrip(t, Cause{Kind: CauseDispatch}, `{"kind":"dispatch"}`)
	roundTrip(t, Cause{Kind: CauseRecovered, Recovery: &r},
		`{"kind":"recovered","recovery":{"previous":"run_1","interruption":{"kind":"crashed","exit_code":137},"attempt":2}}`)
	roundTrip(t, Cause{Kind: CauseSteered, Steer: &s},
		`{"kind":"steered","steer":{"previous":"run_2","note":"use the helper","at":"2026-11-30T09:15:00Z"}}`)
	roundTrip(t, Cause{Kind: CauseResumed, Resumption: &res},
		`{"kind":"resumed","resumption":{"booked_by":"itn_3","waiting_for":"CI","booked_at":"2026-11-30T09:15:00Z","checks":4}}`)
}

func TestJSON_resumption_reads_the_data_of_an_io_jetway_resume_event(t *testing.T) {
	// The public contract's resume data must decode straight into a Resumption.
	var r Resumption
	data := `{"booked_by": "itn_9", "waiting_for": "a reply", "booked_at": "2026-11-30T10:00:00Z", "checks": 0}`
	if err := json.Unmarshal([]byte(data), &r); err != nil {
		t.Fatal(err)
	}
	if r.BookedBy != "itn_9" || r.WaitingFor != "a reply" || r.Checks != 0 ||
		!r.BookedAt.Equal(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("decoded %+v", r)
	}
}

func TestJSON_attempts_round_trip(t *testing.T) {
	roundTrip(t, Attempts{}, `{"restarts":0}`)
	_, a := Attempts{Restarts: 1}.Restart("run_2", Interruption{Kind: LostContact})
	roundTrip(t, a, `{"restarts":2,"last":{"kind":"lost_contact"}}`)
}

func TestJSON_child_states_and_refusals_round_trip(t *testing.T) {
	roundTrip(t, ChildUnknown, `"unknown"`)
	roundTrip(t, ChildGone, `"gone"`)
	roundTrip(t, ChildAlive, `"alive"`)
	roundTrip(t, RecoveryDenied{Reason: NeedsAHuman}, `{"reason":"needs_a_human"}`)
	roundTrip(t, RecoveryDenied{Reason: OutOfAttempts, MaxAttempts: 3}, `{"reason":"out_of_attempts","max_attempts":3}`)
	for _, r := range []DenialReason{NotRetryable, ChildUnaccountedFor, ChildStillRunning, PolicyForbids, NeedsAHuman, OutOfAttempts} {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("%d: %v", r, err)
		}
		var back DenialReason
		if err := json.Unmarshal(data, &back); err != nil || back != r {
			t.Errorf("%s: round trip gave %v, %v", data, back, err)
		}
		if name := strings.Trim(string(data), `"`); name != strings.ToLower(name) || strings.ContainsAny(name, " -") {
			t.Errorf("reason stored as %s, want lowercase snake_case", data)
		}
	}
}

func TestJSON_handovers_and_tool_calls_round_trip(t *testing.T) {
	roundTrip(t, Dispatch("hello"), `{"cause":{"kind":"dispatch"},"inputs":["hello"]}`)
	roundTrip(t, Recovered(Recovery{Previous: "run_1", Interruption: Interruption{Kind: Timeout}, Attempt: 2}, "do it").
		WithProgress("read it"),
		`{"cause":{"kind":"recovered","recovery":{"previous":"run_1","interruption":{"kind":"timeout"},"attempt":2}},`+
			`"inputs":["do it"],"progress":["read it"]}`)
	roundTrip(t, ToolCall{Name: "bash", Input: "ls", Result: "a", IsError: true, Finished: true},
		`{"name":"bash","input":"ls","result":"a","is_error":true,"finished":true}`)
	roundTrip(t, ToolCall{Name: "bash"}, `{"name":"bash","finished":false}`)
}

func TestJSON_refuses_names_it_does_not_know(t *testing.T) {
	cases := []struct {
		into any
		data string
	}{
		{new(Interruption), `{"kind":"tower_restart"}`},
		{new(Interruption), `{"kind":"Timeout"}`},
		{new(Interruption), `{}`},
		{new(RecoveryPolicy), `"sometimes"`},
		{new(RecoveryPolicy), `""`},
		{new(RecoveryPolicy), `0`},
		{new(Cause), `{"kind":"resurrected"}`},
		{new(ChildState), `"probably"`},
		{new(DenialReason), `"because"`},
	}
	for _, c := range cases {
		if err := json.Unmarshal([]byte(c.data), c.into); err == nil {
			t.Errorf("%T accepted %s", c.into, c.data)
		}
	}
}

func TestJSON_error_for_an_unknown_name_lists_the_names_it_knows(t *testing.T) {
	var p RecoveryPolicy
	err := json.Unmarshal([]byte(`"sometimes"`), &p)
	if err == nil {
		t.Fatal("accepted an unknown policy")
	}
	for _, want := range []string{`"sometimes"`, `"automatic"`, `"manual"`, `"never"`} {
		mustContain(t, err.Error(), want, "")
	}
}

func TestJSON_refuses_a_malformed_cause_or_interruption(t *testing.T) {
	cases := []struct {
		into any
		data string
	}{
		{new(Interruption), `{"kind":"timeout","exit_code":1}`},
		{new(Cause), `{"kind":"recovered"}`},
		{new(Cause), `{"kind":"dispatch","steer":{"previous":"r","note":"n","at":"2026-11-30T09:15:00Z"}}`},
		{new(Cause), `{"kind":"recovered","recovery":{"previous":"r","interruption":{"kind":"nope"},"attempt":2}}`},
		{new(Handover), `{"cause":{"kind":"steered"}}`},
	}
	for _, c := range cases {
		if err := json.Unmarshal([]byte(c.data), c.into); err == nil {
			t.Errorf("%T accepted %s", c.into, c.data)
		}
	}
}

func TestJSON_refuses_to_store_what_it_could_not_read_back(t *testing.T) {
	code := 1
	for _, v := range []any{
		Interruption{},
		Interruption{Kind: Timeout, ExitCode: &code},
		Cause{Kind: CauseSteered},
		RecoveryPolicy(9),
		Attempts{Last: &Interruption{}},
	} {
		if data, err := json.Marshal(v); err == nil {
			t.Errorf("%#v stored as %s", v, data)
		}
	}
}
