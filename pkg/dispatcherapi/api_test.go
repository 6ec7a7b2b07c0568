package dispatcherapi

import (
	"encoding/json"
	"testing"
	"time"
)

// TestWire_names_are_the_contract pins the JSON of the bodies other
// systems already read: a renamed or newly required field breaks them.
func TestWire_names_are_the_contract(t *testing.T) {
	at := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	pol, n := "manual", 2
	for _, c := range []struct {
		v    any
		want string
	}{
		{Accepted{ID: "e1"}, `{"id":"e1","duplicate":false}`},
		{InputRequest{Text: "hi"}, `{"text":"hi"}`},
		{InputRequest{Text: "hi", Agent: "reviewer"}, `{"text":"hi","agent":"reviewer"}`},
		{SteerRequest{Note: "n", ID: "x"}, `{"note":"n","id":"x"}`},
		{SessionInfo{Session: "s1", Revision: 3, Updated: at, Record: json.RawMessage(`{}`)},
			`{"session":"s1","revision":3,"updated":"2026-12-03T06:00:00Z","record":{}}`},
		{JobInfo{Job: "1", Updated: at, Record: json.RawMessage(`{}`)}, `{"job":"1","revision":0,"updated":"2026-12-03T06:00:00Z","record":{}}`},
		{StopState{Scope: "global"}, `{"ground_stop":false,"scope":"global"}`},
		{StopRequest{Reason: "r"}, `{"reason":"r"}`},
		{RecoveryRequest{}, `{"policy":null,"max_attempts":null}`},
		{RecoveryState{Session: "s1", Override: &RecoveryOverride{Policy: &pol, MaxAttempts: &n}, Effective: RecoverySettings{Policy: pol, MaxAttempts: n}, Revision: 7},
			`{"session":"s1","override":{"policy":"manual","max_attempts":2},"effective":{"policy":"manual","max_attempts":2},"revision":7}`},
		{LayoverCancelled{Cancelled: true}, `{"cancelled":true}`},
		{Agent{Name: "reviewer", Instructions: "Review.", Version: 3}, `{"name":"reviewer","instructions":"Review.","instruction_files":null,"version":3}`},
		{Agent{Name: "r", Instructions: "x", Tools: AgentTools{Allow: []string{}}, Limits: AgentLimits{MaxDuration: "30m"}, InstructionFiles: []string{}},
			`{"name":"r","instructions":"x","tools":{"allow":[]},"limits":{"max_duration":"30m"},"instruction_files":[],"version":0}`},
		{Problem{Type: ProblemTypePrefix + "x", Title: "T", Status: 400}, `{"type":"urn:jetway:problem:x","title":"T","status":400}`},
		{Accepted{ID: "e1", Held: []StopSwitch{{Scope: "session", Since: at, By: "acme"}}},
			`{"id":"e1","duplicate":false,"held":[{"scope":"session","since":"2026-12-03T06:00:00Z","by":"acme"}]}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("%T encodes as\n%s\nwant\n%s", c.v, b, c.want)
		}
	}
}

// TestProblem_reads_as_an_error_and_names_its_slug: the dispatcher returns
// this one type as its error on both transports, and counts refusals by
// the slug its type URI ends in.
func TestProblem_reads_as_an_error_and_names_its_slug(t *testing.T) {
	var err error = &Problem{Type: ProblemTypePrefix + "rate-limited", Title: "Too many requests", Status: 429, Detail: "later", RetryAfter: 2}
	if got, want := err.Error(), "Too many requests: later"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := (&Problem{Title: "Not found"}).Error(); got != "Not found" {
		t.Errorf("Error() without a detail = %q, want the title alone", got)
	}
	if got := err.(*Problem).Slug(); got != "rate-limited" {
		t.Errorf("Slug() = %q, want rate-limited", got)
	}
	b, _ := json.Marshal(err)
	if want := `{"type":"urn:jetway:problem:rate-limited","title":"Too many requests","status":429,"detail":"later","retry_after":2}`; string(b) != want {
		t.Errorf("encodes as\n%s\nwant\n%s", b, want)
	}
}
