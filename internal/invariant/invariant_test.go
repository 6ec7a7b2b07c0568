package invariant

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"jetway/pkg/llm"
	"jetway/services/runner"
)

var s1 = Session{Tenant: "t1", Session: "s1"}

// transcript builds records from a compact script: "start r1 dispatch",
// "msg r1 e1 e2", "end r1", "refuse e3 reason…".
func transcript(lines ...string) []runner.Record {
	var recs []runner.Record
	for _, l := range lines {
		f := strings.Fields(l)
		switch f[0] {
		case "start":
			recs = append(recs, runner.Record{Kind: runner.RecordRunStarted, Run: f[1], Cause: f[2]})
		case "msg":
			m := llm.UserText("hello")
			m.Delivers = f[2:]
			recs = append(recs, runner.Record{Kind: runner.RecordMessage, Run: f[1], Message: &m})
		case "end":
			recs = append(recs, runner.Record{Kind: runner.RecordRunEnded, Run: f[1], Reason: "completed"})
		case "refuse":
			recs = append(recs, runner.Record{Kind: runner.RecordRefused, Event: f[1], Reason: strings.Join(f[2:], " ")})
		}
	}
	return recs
}

func evidence(accepted []string, recs []runner.Record, state string) Evidence {
	return Evidence{
		Accepted:    map[Session][]string{s1: accepted},
		Transcripts: map[Session][]runner.Record{s1: recs},
		Sessions:    map[Session]runner.SessionRecord{s1: {Tenant: "t1", Session: "s1", State: state}},
	}
}

// failed returns the failed checks of one invariant.
func failed(t *testing.T, rep Report, inv string) []Result {
	t.Helper()
	var out []Result
	for _, r := range rep.Failures() {
		if r.Invariant == inv {
			out = append(out, r)
		}
	}
	return out
}

func TestCheck_passes_a_clean_history_with_a_recovered_interruption(t *testing.T) {
	ev := evidence([]string{"e1", "e2", "e3", "e4"}, transcript(
		"start r1 dispatch", "msg r1 e1", "msg r1 e2", "end r1",
		"start r2 dispatch", "msg r2 e3", // r2's runner died here
		"start r3 recovered", "msg r3 e4", "end r3",
	), runner.StateIdle)
	rep := Check(ev)
	if rep.Failed() != 0 || rep.Passed() != 4 {
		t.Fatalf("want 4 passed, 0 failed; got %+v", rep.Results)
	}
}

func TestCheck_fails_an_event_that_never_reached_the_model(t *testing.T) {
	ev := evidence([]string{"e1", "e2"}, transcript("start r1 dispatch", "msg r1 e1", "end r1"), runner.StateIdle)
	f := failed(t, Check(ev), ExactlyOnce)
	if len(f) != 1 || !strings.Contains(f[0].Detail, "e2") {
		t.Fatalf("want exactly-once failure naming e2, got %+v", f)
	}
}

func TestCheck_fails_an_event_delivered_twice(t *testing.T) {
	ev := evidence([]string{"e1"}, transcript("start r1 dispatch", "msg r1 e1", "msg r1 e1", "end r1"), runner.StateIdle)
	f := failed(t, Check(ev), ExactlyOnce)
	if len(f) != 1 || !strings.Contains(f[0].Detail, "more than once") {
		t.Fatalf("want a duplicate delivery failure, got %+v", f)
	}
}

func TestCheck_fails_an_event_both_delivered_and_refused(t *testing.T) {
	ev := evidence([]string{"e1"}, transcript("refuse e1 forged job event", "start r1 dispatch", "msg r1 e1", "end r1"), runner.StateIdle)
	if f := failed(t, Check(ev), ExactlyOnce); len(f) != 1 {
		t.Fatalf("want one exactly-once failure, got %+v", f)
	}
}

func TestCheck_accepts_a_refusal_with_a_reason_and_fails_one_without(t *testing.T) {
	ok := evidence([]string{"e1"}, transcript("refuse e1 fuel rail: session spent its tokens"), runner.StateIdle)
	if rep := Check(ok); rep.Failed() != 0 {
		t.Fatalf("refusal with a reason failed: %+v", rep.Failures())
	}
	bad := evidence([]string{"e1"}, transcript("refuse e1"), runner.StateIdle)
	f := failed(t, Check(bad), ExactlyOnce)
	if len(f) != 1 || !strings.Contains(f[0].Detail, "without a reason") {
		t.Fatalf("want a failure for a refusal without reason, got %+v", f)
	}
}

func TestCheck_fails_events_delivered_out_of_publish_order(t *testing.T) {
	ev := evidence([]string{"e1", "e2", "e3"}, transcript(
		"start r1 dispatch", "msg r1 e1", "msg r1 e3", "msg r1 e2", "end r1",
	), runner.StateIdle)
	f := failed(t, Check(ev), Order)
	if len(f) != 1 || !strings.Contains(f[0].Detail, "e2") {
		t.Fatalf("want an order failure naming e2, got %+v", f)
	}
}

func TestCheck_order_ignores_events_it_does_not_owe(t *testing.T) {
	// Job events and layover resumes are not in the publisher's list.
	ev := evidence([]string{"e1", "e2"}, transcript(
		"start r1 dispatch", "msg r1 e1 job-7", "msg r1 e2", "end r1",
	), runner.StateIdle)
	if rep := Check(ev); rep.Failed() != 0 {
		t.Fatalf("got failures: %+v", rep.Failures())
	}
}

func TestCheck_fails_a_run_that_writes_after_another_run_began(t *testing.T) {
	ev := evidence([]string{"e1", "e2"}, transcript(
		"start r1 dispatch", "msg r1 e1",
		"start r2 recovered", "msg r2 e2",
		"end r1", // the old run was still live
		"end r2",
	), runner.StateIdle)
	f := failed(t, Check(ev), OneLiveRun)
	if len(f) != 1 || !strings.Contains(f[0].Detail, "run r1") {
		t.Fatalf("want a one-live-run failure naming r1, got %+v", f)
	}
}

func TestCheck_fails_an_interrupted_run_nobody_recovered(t *testing.T) {
	ev := evidence([]string{"e1", "e2"}, transcript(
		"start r1 dispatch", "msg r1 e1", // died, never ended
		"start r2 dispatch", "msg r2 e2", "end r2",
	), runner.StateIdle)
	f := failed(t, Check(ev), Recovery)
	if len(f) != 1 || !strings.Contains(f[0].Detail, "run r1") {
		t.Fatalf("want a recovery failure naming r1, got %+v", f)
	}
}

func TestCheck_fails_a_last_run_left_unended_on_an_idle_session(t *testing.T) {
	ev := evidence([]string{"e1"}, transcript("start r1 dispatch", "msg r1 e1"), runner.StateIdle)
	if f := failed(t, Check(ev), Recovery); len(f) != 1 {
		t.Fatalf("want one recovery failure, got %+v", f)
	}
}

func TestCheck_fails_a_session_still_running(t *testing.T) {
	ev := evidence([]string{"e1"}, transcript("start r1 dispatch", "msg r1 e1"), runner.StateRunning)
	f := failed(t, Check(ev), Recovery)
	if len(f) != 1 || !strings.Contains(f[0].Detail, "still says running") {
		t.Fatalf("want a still-running failure, got %+v", f)
	}
}

func TestCheck_accepts_a_refused_recovery_with_its_reason(t *testing.T) {
	recs := transcript("start r1 dispatch", "msg r1 e1")
	// Left interrupted: the session record holds the reason, and the
	// output the refusal told.
	reason := "run r1 was interrupted (lost contact) and not recovered: crash loop"
	ev := evidence([]string{"e1"}, recs, runner.StateInterrupted)
	rec := ev.Sessions[s1]
	rec.Run, rec.Reason = "r1", reason
	ev.Sessions[s1] = rec
	ev.Refusals = map[Session][]string{s1: {reason}}
	if rep := Check(ev); rep.Failed() != 0 {
		t.Fatalf("interrupted with a reason failed: %+v", rep.Failures())
	}
	// Recorded and never told: the people do not know.
	ev.Refusals = nil
	if f := failed(t, Check(ev), Recovery); len(f) != 1 || !strings.Contains(f[0].Detail, "run r1") {
		t.Fatalf("want a recovery failure for a refusal only in the record, got %+v", f)
	}
	// Recorded untold after quiescence: its telling never happened.
	rec.Untold = "jetway.refused/r1/x1"
	ev.Sessions[s1] = rec
	ev.Refusals = map[Session][]string{s1: {reason}}
	if f := failed(t, Check(ev), Recovery); len(f) != 1 || !strings.Contains(f[0].Detail, "untold") {
		t.Fatalf("want a recovery failure for a refusal left untold, got %+v", f)
	}
	// A person moved it on since: the refusal on the output is the record.
	later := evidence([]string{"e1", "e2"}, append(recs, transcript("start r2 steered", "msg r2 e2", "end r2")...), runner.StateIdle)
	later.Refusals = map[Session][]string{s1: {"run r1 was interrupted (lost contact) and not recovered: crash loop"}}
	if rep := Check(later); rep.Failed() != 0 {
		t.Fatalf("refusal on the output failed: %+v", rep.Failures())
	}
	// Without any recorded reason it is a violation.
	later.Refusals = nil
	if f := failed(t, Check(later), Recovery); len(f) != 1 {
		t.Fatalf("want a recovery failure without a reason, got %+v", f)
	}
}

func TestCheck_fails_a_running_job_and_a_surviving_job_process(t *testing.T) {
	ev := evidence(nil, nil, runner.StateIdle)
	ev.JobsInPlay = true
	ev.Jobs = []Job{{Key: "t1.s1.1", ID: "1", Status: "exited"}, {Key: "t1.s1.2", ID: "2", Status: "running"}}
	ev.Procs = []Proc{{PID: 4242, Marker: "task-2", Cmdline: "sleep 600"}}
	rep := Check(ev)
	if f := failed(t, rep, JobsEnded); len(f) != 1 || !strings.Contains(f[0].Detail, "t1.s1.2") {
		t.Fatalf("want a jobs-ended failure naming t1.s1.2, got %+v", f)
	}
	if f := failed(t, rep, NoJobProcs); len(f) != 1 || !strings.Contains(f[0].Detail, "4242") {
		t.Fatalf("want a process failure naming pid 4242, got %+v", f)
	}
}

func TestCheck_skips_jobs_when_none_were_in_play(t *testing.T) {
	rep := Check(evidence(nil, nil, runner.StateIdle))
	if !strings.Contains(strings.Join(rep.Skipped, "\n"), "jobs: no background jobs in play") {
		t.Fatalf("want the jobs invariants reported skipped, got %v", rep.Skipped)
	}
	for _, r := range rep.Results {
		if r.Invariant == JobsEnded || r.Invariant == NoJobProcs {
			t.Fatalf("jobs invariant counted without jobs: %+v", r)
		}
	}
}

func TestReport_ends_with_the_passed_failed_line(t *testing.T) {
	ev := evidence([]string{"e1", "e2"}, transcript("start r1 dispatch", "msg r1 e2", "msg r1 e1", "end r1"), runner.StateIdle)
	var b bytes.Buffer
	if err := Check(ev).Write(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if last := lines[len(lines)-1]; last != "3 passed, 1 failed" {
		t.Fatalf("last line %q, want %q\n%s", last, "3 passed, 1 failed", b.String())
	}
	if !regexp.MustCompile(`(?m)^FAIL order: t1/s1: `).MatchString(b.String()) {
		t.Fatalf("the failure is not printed in full:\n%s", b.String())
	}
}

// withChild adds sub-agent s1-a1 of s1 with the given transcript.
func withChild(ev Evidence, recs []runner.Record) Evidence {
	c := Session{Tenant: "t1", Session: "s1-a1"}
	ev.Transcripts[c] = recs
	ev.Sessions[c] = runner.SessionRecord{Tenant: "t1", Session: "s1-a1", State: runner.StateIdle, Lineage: []string{"s1"}, Number: 1}
	return ev
}

func TestCheck_holds_each_sub_agent_end_told_to_its_parent_exactly_once(t *testing.T) {
	f1, f2 := runner.FinishedEventID("s1-a1", "c1"), runner.FinishedEventID("s1-a1", "c2")
	child := transcript("start c1 dispatch", "end c1", "start c2 dispatch", "end c2")
	taken := runner.Record{Kind: runner.RecordAnswered, Event: f1, Type: "io.jetway.agent.finished", Reason: runner.ReasonAnsweredInWait}
	parent := append(append(transcript("start r1 dispatch", "msg r1 e1"), taken),
		transcript("end r1", "start r2 dispatch", "msg r2 "+f2, "end r2")...)
	ok := withChild(evidence([]string{"e1"}, parent, runner.StateIdle), child)
	if rep := Check(ok); rep.Failed() != 0 {
		t.Fatalf("want no failures, got %+v", rep.Failures())
	}
	older := taken
	older.Kind = runner.RecordRefused
	oldParent := append(append(transcript("start r1 dispatch", "msg r1 e1"), older),
		transcript("end r1", "start r2 dispatch", "msg r2 "+f2, "end r2")...)
	if rep := Check(withChild(evidence([]string{"e1"}, oldParent, runner.StateIdle), child)); rep.Failed() != 0 {
		t.Fatalf("an older transcript's refused-as-taken end: want no failures, got %+v", rep.Failures())
	}
	missing := withChild(evidence([]string{"e1"}, transcript("start r1 dispatch", "msg r1 e1", "end r1"), runner.StateIdle), child)
	if f := failed(t, Check(missing), SubagentEnds); len(f) != 1 || !strings.Contains(f[0].Detail, "2 ended runs never told") {
		t.Fatalf("want the two untold ends reported, got %+v", f)
	}
	if owed := OwedEnds(missing); len(owed) != 1 {
		t.Fatalf("owed = %v", owed)
	}
	told := append(append(transcript("start r1 dispatch", "msg r1 e1 "+f1+" "+f2), taken), transcript("end r1")...)
	twice := withChild(evidence([]string{"e1"}, told, runner.StateIdle), child)
	if f := failed(t, Check(twice), SubagentEnds); len(f) != 1 || !strings.Contains(f[0].Detail, "c1 (2 times)") {
		t.Fatalf("want the end told twice reported, got %+v", f)
	}
}
