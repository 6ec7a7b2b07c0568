package events

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestDecode_accepts_sub_agent_events_only_from_the_agentevents_subject(t *testing.T) {
	fin := AgentFinished{Child: "p1-a2", Agent: "reviewer", Number: 2, Run: "r-1", Reason: "completed", Answer: "two nits", RunningForMS: 180_000}
	for _, p := range []Payload{fin, AgentInput{Text: "review it", Parent: "p1"}, AgentStop{Parent: "p1"}, AgentProgress{Child: "p1-a2", Number: 2, Text: "half way"}} {
		ev, err := New("t1", "p1", "jetway/runner", p)
		if err != nil {
			t.Fatalf("%T: %v", p, err)
		}
		for subj, want := range map[string]error{
			"jetway.agentevents.t1.p1": nil,
			"jetway.events.t1.p1":      ErrForgedAgentEvent,
			"jetway.jobevents.t1.p1":   ErrForgedAgentEvent,
		} {
			msg, err := Encode(context.Background(), subj, ev)
			if err != nil {
				t.Fatal(err)
			}
			h, err := Decode(subj, msg.Header, msg.Data)
			if !errors.Is(err, want) && !(want == nil && err == nil) {
				t.Errorf("%s on %s: %v, want %v", p.EventType(), subj, err, want)
			}
			if want == nil && (!h.FromRunner || h.Payload.EventType() != p.EventType()) {
				t.Errorf("%s on %s decoded as %+v", p.EventType(), subj, h)
			}
		}
	}
	// A sub-agent type this version does not know is refused off the
	// runners' subject too.
	ev, _ := New("t1", "p1", "x", External{Type: "io.jetway.agent.later", Source: "x", DataContentType: ContentTypeJSON, Data: []byte(`{}`)})
	msg, _ := Encode(context.Background(), "jetway.events.t1.p1", ev)
	if _, err := Decode("jetway.events.t1.p1", msg.Header, msg.Data); !errors.Is(err, ErrForgedAgentEvent) {
		t.Errorf("unknown agent type on the events subject: %v", err)
	}
}

func TestSub_agent_texts_name_the_agent_its_end_and_how_to_read_a_cut_answer(t *testing.T) {
	fin := AgentFinished{Child: "p1-a2", Agent: "reviewer", Number: 2, Run: "r-1", Reason: "completed", Answer: "two nits", RunningForMS: 180_000}
	if h, ok := Headline(fin); !ok || h != "agent 2 (reviewer) finished after 3m" {
		t.Errorf("headline %q", h)
	}
	n, _ := Notice(fin)
	want := "[sub-agent notice] agent 2 (reviewer) finished after 3m (session p1-a2).\nIts answer:\ntwo nits\nUse the answer in your work, or tell the user what it found."
	if n != want {
		t.Errorf("notice:\n%s\nwant:\n%s", n, want)
	}
	stopped := fin
	stopped.Reason = "stopped"
	if h, _ := Headline(stopped); h != "agent 2 (reviewer) was stopped after 3m" {
		t.Errorf("stopped headline %q", h)
	}
	turns := fin
	turns.Reason, turns.Agent = "max_turns", ""
	if h, _ := Headline(turns); h != "agent 2 (default) ended (max_turns) after 3m" {
		t.Errorf("max_turns headline %q", h)
	}
	long, cut := CapAnswer(strings.Repeat("é", MaxAgentAnswer))
	if !cut || len(long) > MaxAgentAnswer || !strings.HasSuffix(long, "é") {
		t.Errorf("cap: %d bytes, cut %v", len(long), cut)
	}
	fin.Answer, fin.Truncated = long, true
	if n, _ := Notice(fin); !strings.Contains(n, `read all of it with agent_status {"agent": 2}`) {
		t.Errorf("a cut answer does not say how to read the rest:\n%s", n[len(n)-200:])
	}
}

func TestA_function_task_report_is_news_never_overdue(t *testing.T) {
	rep := JobNotice{ID: 4, Program: "watch", Text: "ci is green", RunningForMS: 180_000, TaskRef: TaskRef{Task: "4", Seq: 2}}
	if h, _ := Headline(rep); h != "job 4 (watch) reports: ci is green" {
		t.Errorf("headline %q", h)
	}
	n, _ := Notice(rep)
	if n != "[background job report] job 4 (watch) reports: ci is green\nThe task is still running; act on the report if it matters to your work." {
		t.Errorf("notice %q", n)
	}
	if strings.Contains(n, "overdue") || strings.Contains(n, "stuck") || strings.Contains(n, "shell_job_kill") {
		t.Errorf("a report reads like an overdue warning: %q", n)
	}
	ev, err := New("t1", "s1", "jetway/jobs", rep)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := Encode(context.Background(), "jetway.jobevents.t1.s1", ev)
	h, err := Decode("jetway.jobevents.t1.s1", msg.Header, msg.Data)
	if err != nil || h.Payload.(JobNotice).Text != "ci is green" {
		t.Errorf("decoded %+v, %v", h, err)
	}
	if _, err := Decode("jetway.events.t1.s1", msg.Header, msg.Data); !errors.Is(err, ErrForgedJobEvent) {
		t.Errorf("a task report on the events subject: %v, want ErrForgedJobEvent", err)
	}
}
