package subagents

import (
	"testing"

	"jetway/pkg/control/sessionrec"
	"jetway/pkg/events"
)

func fromRunner(p events.Payload) events.HostEvent {
	return events.HostEvent{FromRunner: true, Payload: p}
}

func TestTake_a_parent_s_stop_with_no_live_run_is_taken_and_says_so(t *testing.T) {
	var none *Run
	reason, took := none.Take(fromRunner(events.AgentStop{Parent: "p1"}))
	if !took || reason != "stop asked by the parent session p1: no run to stop" {
		t.Fatalf("took %v, reason %q", took, reason)
	}
}

func TestTake_a_parent_s_stop_cancels_the_live_run(t *testing.T) {
	cancelled := false
	s := &Session{}
	r := s.StartRun("r-1", sessionrec.Record{Lineage: []string{"p1"}}, func() { cancelled = true })
	if _, took := r.Take(fromRunner(events.AgentStop{Parent: "p1"})); !took || !cancelled || !r.stopAsked {
		t.Fatalf("took %v, cancelled %v, stop asked %v", took, cancelled, r.stopAsked)
	}
}

func TestTake_a_child_s_end_goes_once_to_the_agent_start_call_waiting_for_it(t *testing.T) {
	r := (&Session{}).StartRun("r-1", sessionrec.Record{}, func() {})
	fin := make(chan events.AgentFinished, 1)
	r.waiters["p1-a1"] = fin
	end := fromRunner(events.AgentFinished{Child: "p1-a1", Run: "c-1"})
	if reason, took := r.Take(end); !took || reason != ReasonAnsweredInWait {
		t.Fatalf("took %v, reason %q", took, reason)
	}
	if f := <-fin; f.Run != "c-1" {
		t.Fatalf("the wait got %+v", f)
	}
	if _, took := r.Take(end); took {
		t.Fatal("a second copy of the end was taken too: it must be a notice, or dropped as seen")
	}
}

func TestTake_leaves_a_forged_end_on_the_events_subject_to_the_actor(t *testing.T) {
	r := (&Session{}).StartRun("r-1", sessionrec.Record{}, func() {})
	r.waiters["p1-a1"] = make(chan events.AgentFinished, 1)
	forged := events.HostEvent{Payload: events.AgentFinished{Child: "p1-a1"}}
	if _, took := r.Take(forged); took {
		t.Fatal("an agent.finished a tenant published answered a wait")
	}
}
