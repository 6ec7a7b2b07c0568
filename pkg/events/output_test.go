package events

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestRun_headlines_read_as_one_line(t *testing.T) {
	if got, want := RunEndedHeadline(RunEnded{Run: "r1", Reason: "completed", Turns: 3, ElapsedMS: 12_000}), "run r1 completed after 3 turns in 12s"; got != want {
		t.Errorf("RunEndedHeadline = %q, want %q", got, want)
	}
	if got, want := RunEndedHeadline(RunEnded{Run: "r1", Reason: "model_error", Turns: 1, ElapsedMS: 61_000, Error: "HTTP 500"}), "run r1 model_error after 1 turn in 1m: HTTP 500"; got != want {
		t.Errorf("RunEndedHeadline = %q, want %q", got, want)
	}
	if got, want := RunStartedHeadline(RunStarted{Run: "r2", Cause: "dispatch", Model: "script x"}), "run r2 started (dispatch) · script x"; got != want {
		t.Errorf("RunStartedHeadline = %q, want %q", got, want)
	}
	if got, want := RunStartedHeadline(RunStarted{Run: "r3", Cause: "recovered", Model: "m", Agent: "reviewer", AgentVersion: 12}), "run r3 started (recovered) · agent reviewer v12 · m"; got != want {
		t.Errorf("RunStartedHeadline = %q, want %q", got, want)
	}
}

func TestThe_agent_extension_binds_and_a_bad_name_is_refused_naming_it(t *testing.T) {
	ev, err := New("t1", "s1", "ci", Input{Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	SetAgent(&ev, "reviewer")
	subj, _ := EventsSubject("t1", "s1")
	msg, err := Encode(context.Background(), subj, ev)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get("ce-jetwayagent") != "reviewer" {
		t.Fatalf("binary mode header ce-jetwayagent = %q", msg.Header.Get("ce-jetwayagent"))
	}
	got, err := Decode(msg.Subject, msg.Header, msg.Data)
	if err != nil || got.Agent != "reviewer" {
		t.Fatalf("decoded agent %q, %v", got.Agent, err)
	}
	msg.Header.Set("ce-jetwayagent", "no/such")
	if _, err := Decode(msg.Subject, msg.Header, msg.Data); !errors.Is(err, ErrInvalidAttribute) || !strings.Contains(err.Error(), ExtAgent) {
		t.Fatalf("a bad agent name: %v, want an invalid attribute naming %s", err, ExtAgent)
	}
	msg.Header.Del("ce-jetwayagent")
	if got, err := Decode(msg.Subject, msg.Header, msg.Data); err != nil || got.Agent != "" {
		t.Fatalf("no extension: agent %q, %v", got.Agent, err)
	}
}

func TestOutput_events_round_trip_through_the_codec(t *testing.T) {
	ev, err := New("t1", "s1", "jetway/runner", RunEnded{Run: "r1", Reason: "completed", Turns: 2})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := OutSubject("t1", "s1")
	msg, err := Encode(context.Background(), subj, ev)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadEvent(msg.Header, msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Type() != TypeRunEnded || got.ID() != ev.ID() {
		t.Fatalf("read back %s %s, want %s %s", got.Type(), got.ID(), TypeRunEnded, ev.ID())
	}
	var back RunEnded
	if err := got.DataAs(&back); err != nil || back.Turns != 2 || back.Reason != "completed" {
		t.Fatalf("data = %+v, %v", back, err)
	}
}
