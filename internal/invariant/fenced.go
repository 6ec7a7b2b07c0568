package invariant

import (
	"fmt"
	"time"

	"jetway/services/runner"
)

// NoFencedStart: no command was started on behalf of a run once that run
// was no longer its session's live run — after another run of the session
// wrote, or after the run recorded its own end. The runners' fence keeps
// the log clean at their writes; a command is an effect before any write,
// so the jobs worker checks the run's fence where the command starts
// (services/jobs/fence.go), and this proves from the records that it did.
const NoFencedStart = "no command of a fenced run"

// checkNoFencedStart fails a session one of whose jobs was started for a
// run (its record's fence) at or after the moment that run stopped being
// live, as the transcript tells it:
//
//   - the run's end: its run_ended record;
//   - its takeover: the first record of the next run, which the recovering
//     runner appends only after its compare-and-swap of the session record
//     named the new run — so any fence check that saw the old run live
//     happened before that record was stored.
//
// Times are the stream's stored stamps of the records (Evidence's
// TranscriptStamps; the runners' own Record.Time where they are absent)
// against the job's start as its worker stamped it: one clock in the chaos
// suite, which runs every process on one machine. A fenced job whose run
// the transcript never recorded fails too: a run calls tools only after
// its run_started is stored, and the jobs table is read before the
// transcripts. A job without a fence (an operator's, a benchmark's) is no
// run's and is not judged.
func checkNoFencedStart(s Session, recs []runner.Record, stamps []time.Time, jobs []Job) Result {
	res := Result{Invariant: NoFencedStart, Subject: s.String()}
	stamp := func(i int) time.Time {
		if len(stamps) == len(recs) && !stamps[i].IsZero() {
			return stamps[i]
		}
		return recs[i].Time
	}
	seen := map[string]bool{}
	over := map[string]time.Time{} // when each run stopped being live
	why := map[string]string{}
	current := ""
	for i, r := range recs {
		if r.Run == "" {
			continue
		}
		if r.Run != current {
			if current != "" {
				if _, done := over[current]; !done {
					over[current], why[current] = stamp(i), "run "+r.Run+" wrote"
				}
			}
			current = r.Run
			seen[r.Run] = true
		}
		if r.Kind == runner.RecordRunEnded {
			if _, done := over[r.Run]; !done {
				over[r.Run], why[r.Run] = stamp(i), "it recorded its end"
			}
		}
	}
	fenced, runs := 0, map[string]bool{}
	for _, j := range jobs {
		if j.Tenant != s.Tenant || j.Session != s.Session || j.Fence == "" {
			continue
		}
		fenced++
		runs[j.Fence] = true
		if !seen[j.Fence] {
			res.Detail = fmt.Sprintf("job %s (%s) was started for run %s, which the transcript never recorded", j.ID, j.Key, j.Fence)
			return res
		}
		if end, ok := over[j.Fence]; ok && !j.Started.Before(end) {
			res.Detail = fmt.Sprintf("job %s (%s) was started for run %s at %s, after that run stopped being live at %s (%s)",
				j.ID, j.Key, j.Fence, clock(j.Started), clock(end), why[j.Fence])
			return res
		}
	}
	res.OK = true
	res.Detail = fmt.Sprintf("%d commands of %d runs, each started while its run was live", fenced, len(runs))
	return res
}

// fencedSessions is every session the evidence names, and every session a
// fenced job names besides: a command started for a session whose
// transcript is missing is judged, not passed over.
func fencedSessions(ev Evidence) []Session {
	out := sessions(ev)
	known := map[Session]bool{}
	for _, s := range out {
		known[s] = true
	}
	for _, j := range ev.Jobs {
		s := Session{Tenant: j.Tenant, Session: j.Session}
		if j.Fence != "" && !known[s] {
			known[s] = true
			out = append(out, s)
		}
	}
	return out
}
