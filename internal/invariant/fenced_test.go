package invariant

import (
	"strings"
	"testing"
	"time"

	"jetway/services/runner"
)

// stamped gives the records stored stamps one second apart from t0.
func stamped(recs []runner.Record) []time.Time {
	out := make([]time.Time, len(recs))
	for i := range recs {
		out[i] = t0.Add(time.Duration(i) * time.Second)
	}
	return out
}

func fencedJob(id, run string, at time.Duration) Job {
	return Job{Key: "t1.s1." + id, ID: id, Tenant: "t1", Session: "s1", Status: "exited", Fence: run, Started: t0.Add(at)}
}

// jobsEvidence is r1 taken over by r2: r1 wrote at 0 s and 1 s, r2's
// recovery wrote from 2 s, and ended at 3 s.
func jobsEvidence(jobs ...Job) Evidence {
	recs := transcript("start r1 dispatch", "msg r1 e1", "start r2 recovered", "end r2")
	ev := evidence([]string{"e1"}, recs, "idle")
	ev.TranscriptStamps = map[Session][]time.Time{s1: stamped(recs)}
	ev.JobsInPlay, ev.Jobs = true, jobs
	return ev
}

func TestCheck_passes_commands_started_while_their_run_was_live(t *testing.T) {
	ev := jobsEvidence(fencedJob("1", "r1", 1500*time.Millisecond), fencedJob("2", "r2", 2500*time.Millisecond),
		Job{Key: "t1.s1.3", ID: "3", Tenant: "t1", Session: "s1", Status: "exited", Started: t0.Add(time.Hour)})
	rep := Check(ev)
	if f := failed(t, rep, NoFencedStart); len(f) != 0 {
		t.Fatalf("commands of live runs failed: %+v", f)
	}
	for _, r := range rep.Results {
		if r.Invariant == NoFencedStart && !strings.Contains(r.Detail, "2 commands of 2 runs") {
			t.Fatalf("detail %q does not count the fenced commands", r.Detail)
		}
	}
}

func TestCheck_fails_a_command_started_for_a_run_after_another_run_took_over(t *testing.T) {
	f := failed(t, Check(jobsEvidence(fencedJob("1", "r1", 2500*time.Millisecond))), NoFencedStart)
	if len(f) != 1 || !strings.Contains(f[0].Detail, "run r1") || !strings.Contains(f[0].Detail, "run r2 wrote") {
		t.Fatalf("want job 1 of r1 after r2's takeover, got %+v", f)
	}
}

func TestCheck_fails_a_command_started_for_a_run_after_its_own_end(t *testing.T) {
	f := failed(t, Check(jobsEvidence(fencedJob("1", "r2", 3500*time.Millisecond))), NoFencedStart)
	if len(f) != 1 || !strings.Contains(f[0].Detail, "recorded its end") {
		t.Fatalf("want job 1 of r2 after r2's end, got %+v", f)
	}
}

func TestCheck_fails_a_command_of_a_run_the_transcript_never_recorded(t *testing.T) {
	f := failed(t, Check(jobsEvidence(fencedJob("1", "r9", 0))), NoFencedStart)
	if len(f) != 1 || !strings.Contains(f[0].Detail, "never recorded") {
		t.Fatalf("want job 1 of an unknown run, got %+v", f)
	}
}

// Without stored stamps (older evidence) the runners' record times order
// the run sequence.
func TestCheck_orders_runs_by_record_time_without_stamps(t *testing.T) {
	ev := jobsEvidence(fencedJob("1", "r1", 2500*time.Millisecond))
	for i := range ev.Transcripts[s1] {
		ev.Transcripts[s1][i].Time = ev.TranscriptStamps[s1][i]
	}
	ev.TranscriptStamps = nil
	if f := failed(t, Check(ev), NoFencedStart); len(f) != 1 {
		t.Fatalf("want the late command failed by record times, got %+v", f)
	}
}
