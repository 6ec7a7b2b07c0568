// Package invariant proves, after the fact, that the runners kept the
// promises docs/ARCHITECTURE.md makes ("Invariants the runner keeps"): it reads the
// evidence a run of the system leaves behind — every session's transcript,
// its session record, the run refusals on JETWAY_OUT, the jobs table and a
// /proc scan for job processes — and checks it against the list of events
// the caller knows were accepted.
//
// The evidence is the transcript, not the runners' logs or counters, because
// the transcript is what the next runner and the model will read: an event is
// delivered when a recorded message names its CloudEvents id, and nowhere
// else.
//
// Check is pure (Evidence in, Report out), so the checker itself is tested on
// hand-made transcripts that break each invariant; Collect gathers the
// Evidence from a live JetStream.
package invariant

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"jetway/pkg/events"
	"jetway/services/runner"
)

// Session names one session.
type Session struct {
	Tenant  string
	Session string
}

func (s Session) String() string { return s.Tenant + "/" + s.Session }

// Evidence is everything the checker reads.
type Evidence struct {
	// Accepted lists, per session, the CloudEvents ids the publisher had
	// acknowledged by JetStream, in publish order. These are the events
	// the system owes the model.
	Accepted map[Session][]string
	// Transcripts are the sessions' transcript records in stream order.
	Transcripts map[Session][]runner.Record
	// TranscriptStamps are, beside each transcript record, the time the
	// stream stored it (the server's clock, which orders a record after
	// the session-record claim that preceded it); nil where unknown.
	TranscriptStamps map[Session][]time.Time
	// Sessions are the session records from the sessions bucket.
	Sessions map[Session]runner.SessionRecord
	// Refusals are the reasons of the io.jetway.run.refused events each
	// session's output carried: where a refused recovery is recorded once
	// a person has moved the session on.
	Refusals map[Session][]string
	// JobsInPlay says whether background jobs ran; without it the job
	// invariants are reported as skipped rather than passed.
	JobsInPlay bool
	// Jobs are the records of the jobs table.
	Jobs []Job
	// Procs are processes that still carry the task marker.
	Procs []Proc
	// ModelCalls are, per session, the calls the model answered (nil: not
	// observed, and the check is reported as skipped); a session without
	// an entry had no call observed (the chaos suite cannot tell a
	// sub-agent's calls by session) and is not judged. Pauses are, per
	// runner, the times it was frozen.
	ModelCalls map[Session][]ModelCall
	Pauses     map[string][]Window
}

// Job is the part of a jobs-table record the checker needs.
type Job struct {
	Key     string `json:"-"`
	ID      string `json:"id"`
	Tenant  string `json:"tenant"`
	Session string `json:"session_id"`
	Status  string `json:"status"`
	Worker  string `json:"worker"`
	// Fence is the run the job was started for (empty: no run's);
	// Started is when its worker started it.
	Fence   string    `json:"fence"`
	Started time.Time `json:"started"`
}

// Proc is a live process found with the task marker in its environment.
type Proc struct {
	PID     int
	Marker  string // the JETWAY_TASK value
	Worker  string // the JETWAY_JOBS_WORKER value, if any
	Cmdline string
}

// Invariant names, as the report prints them.
const (
	ExactlyOnce = "exactly once"
	Order       = "order"
	OneLiveRun  = "one live run"
	Recovery    = "recovery"
	JobsEnded   = "jobs ended"
	NoJobProcs  = "no job process left"
	// SubagentEnds: every run a sub-agent ended is told to its parent
	// exactly once (delivered, or taken by the call that waited for it).
	SubagentEnds = "sub-agent ends"
)

// Result is one check: one invariant over one subject (a session, a job
// table, the process table).
type Result struct {
	Invariant string
	Subject   string
	OK        bool
	Detail    string
}

// Report is every check made, in a stable order.
type Report struct {
	Results []Result
	Skipped []string
}

// Passed and Failed count the checks.
func (r Report) Passed() int { return r.count(true) }
func (r Report) Failed() int { return r.count(false) }

func (r Report) count(ok bool) int {
	n := 0
	for _, x := range r.Results {
		if x.OK == ok {
			n++
		}
	}
	return n
}

// Failures returns the failed checks.
func (r Report) Failures() []Result {
	var out []Result
	for _, x := range r.Results {
		if !x.OK {
			out = append(out, x)
		}
	}
	return out
}

// Write prints what was checked — one summary line per invariant, every
// failure in full — and ends with the line `N passed, N failed` that CI
// reads.
func (r Report) Write(w io.Writer) error {
	var b strings.Builder
	type tally struct{ pass, fail int }
	tallies := map[string]*tally{}
	var names []string
	for _, x := range r.Results {
		t := tallies[x.Invariant]
		if t == nil {
			t = &tally{}
			tallies[x.Invariant] = t
			names = append(names, x.Invariant)
		}
		if x.OK {
			t.pass++
		} else {
			t.fail++
		}
	}
	for _, n := range names {
		t := tallies[n]
		fmt.Fprintf(&b, "invariant %-28s %d checked, %d failed\n", n+":", t.pass+t.fail, t.fail)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(&b, "skipped: %s\n", s)
	}
	for _, x := range r.Failures() {
		fmt.Fprintf(&b, "FAIL %s: %s: %s\n", x.Invariant, x.Subject, x.Detail)
	}
	fmt.Fprintf(&b, "%d passed, %d failed\n", r.Passed(), r.Failed())
	_, err := io.WriteString(w, b.String())
	return err
}

// Check runs every invariant over ev.
func Check(ev Evidence) Report {
	var rep Report
	for _, s := range sessions(ev) {
		recs := ev.Transcripts[s]
		rep.Results = append(rep.Results,
			checkExactlyOnce(s, ev.Accepted[s], recs),
			checkOrder(s, ev.Accepted[s], recs),
			checkOneLiveRun(s, recs),
			checkRecovery(s, recs, ev.Sessions[s], ev.Refusals[s]),
		)
		if calls, ok := ev.ModelCalls[s]; ok {
			rep.Results = append(rep.Results, checkOneAtTheModel(s, calls, ev.Pauses))
		}
	}
	if ev.ModelCalls == nil {
		rep.Skipped = append(rep.Skipped, OneAtTheModel+": the model's calls were not observed")
	}
	rep.Results = append(rep.Results, checkSubagentEnds(ev)...)
	if !ev.JobsInPlay {
		rep.Skipped = append(rep.Skipped, "jobs: no background jobs in play")
		return rep
	}
	for _, s := range fencedSessions(ev) {
		rep.Results = append(rep.Results, checkNoFencedStart(s, ev.Transcripts[s], ev.TranscriptStamps[s], ev.Jobs))
	}
	rep.Results = append(rep.Results, checkJobsEnded(ev.Jobs), checkNoJobProcs(ev.Procs))
	return rep
}

// sessions is every session any evidence names, sorted.
func sessions(ev Evidence) []Session {
	seen := map[Session]bool{}
	for s := range ev.Accepted {
		seen[s] = true
	}
	for s := range ev.Transcripts {
		seen[s] = true
	}
	for s := range ev.Sessions {
		seen[s] = true
	}
	out := make([]Session, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// checkExactlyOnce: every accepted event is named by exactly one recorded
// message's Delivers, or by one refusal that gives a reason — never both,
// never twice, never not at all.
func checkExactlyOnce(s Session, accepted []string, recs []runner.Record) Result {
	res := Result{Invariant: ExactlyOnce, Subject: s.String()}
	delivered := map[string]int{}
	refused := map[string]int{}
	var problems []string
	for i, r := range recs {
		if r.Message != nil {
			for _, id := range r.Message.Delivers {
				delivered[id]++
			}
		}
		if r.Kind == runner.RecordAnswered && r.Event != "" {
			delivered[r.Event]++ // as the result of the call that waited for it
		}
		if r.Kind == runner.RecordRefused && r.Event != "" {
			refused[r.Event]++
			if strings.TrimSpace(r.Reason) == "" {
				problems = append(problems, fmt.Sprintf("record %d refuses %s without a reason", i, r.Event))
			}
		}
	}
	var missing, twice []string
	nRefused := 0
	for _, id := range accepted {
		n := delivered[id] + refused[id]
		switch {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s (delivered %d, refused %d)", id, delivered[id], refused[id]))
		case refused[id] == 1:
			nRefused++
		}
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("%d accepted events never reached the model nor were refused: %s", len(missing), clip(missing)))
	}
	if len(twice) > 0 {
		problems = append(problems, fmt.Sprintf("%d events reached the model more than once: %s", len(twice), clip(twice)))
	}
	res.OK = len(problems) == 0
	if res.OK {
		res.Detail = fmt.Sprintf("%d accepted events, each once (%d refused with a reason)", len(accepted), nRefused)
	} else {
		res.Detail = strings.Join(problems, "; ")
	}
	return res
}

// checkOrder: the accepted events a session's messages delivered appear in
// the transcript in the order they were published.
func checkOrder(s Session, accepted []string, recs []runner.Record) Result {
	res := Result{Invariant: Order, Subject: s.String()}
	pos := make(map[string]int, len(accepted))
	for i, id := range accepted {
		pos[id] = i
	}
	last, lastID := -1, ""
	seen := map[string]bool{}
	for _, r := range recs {
		if r.Message == nil {
			continue
		}
		for _, id := range r.Message.Delivers {
			p, ok := pos[id]
			if !ok || seen[id] {
				continue // not ours, or a duplicate (exactly once reports it)
			}
			seen[id] = true
			if p < last {
				res.Detail = fmt.Sprintf("%s (published #%d) was delivered after %s (published #%d)", id, p+1, lastID, last+1)
				return res
			}
			last, lastID = p, id
		}
	}
	res.OK = true
	res.Detail = fmt.Sprintf("%d deliveries in publish order", len(seen))
	return res
}

// checkOneLiveRun: once another run has written to the transcript, an
// earlier run never writes again — two runs of a session were never live
// at once.
func checkOneLiveRun(s Session, recs []runner.Record) Result {
	res := Result{Invariant: OneLiveRun, Subject: s.String()}
	finished := map[string]bool{}
	current := ""
	runs := 0
	for i, r := range recs {
		if r.Run == "" || r.Run == current {
			continue
		}
		if finished[r.Run] {
			res.Detail = fmt.Sprintf("run %s wrote record %d (%s) after run %s had started", r.Run, i, r.Kind, current)
			return res
		}
		if current != "" {
			finished[current] = true
		}
		current = r.Run
		runs++
	}
	res.OK = true
	res.Detail = fmt.Sprintf("%d runs, never two live", runs)
	return res
}

// run is one run as the transcript tells it.
type run struct {
	id      string
	cause   string
	started bool
	ended   bool
}

// checkRecovery: every run that did not record its end was interrupted, and
// each interruption was either recovered (the next run's cause is
// "recovered") or refused with a recorded reason that names the run (the
// session record's reason, or a run refusal on its output). A session
// still running is not quiescent and fails too: its run is unaccounted for.
func checkRecovery(s Session, recs []runner.Record, rec runner.SessionRecord, refusals []string) Result {
	res := Result{Invariant: Recovery, Subject: s.String()}
	var runs []*run
	byID := map[string]*run{}
	for _, r := range recs {
		if r.Run == "" {
			continue
		}
		x := byID[r.Run]
		if x == nil {
			x = &run{id: r.Run}
			byID[r.Run] = x
			runs = append(runs, x)
		}
		switch r.Kind {
		case runner.RecordRunStarted:
			x.started, x.cause = true, r.Cause
		case runner.RecordRunEnded:
			x.ended = true
		}
	}
	if rec.State == runner.StateRunning {
		res.Detail = fmt.Sprintf("session record still says running (run %s on %s) after quiescence", rec.Run, rec.Runner)
		return res
	}
	if rec.State == runner.StateInterrupted && rec.Untold != "" {
		res.Detail = fmt.Sprintf("session record holds the refusal of run %s still untold after quiescence (%s)", rec.Run, rec.Reason)
		return res
	}
	interrupted, recovered, refused := 0, 0, 0
	for i, x := range runs {
		if x.ended {
			continue
		}
		interrupted++
		if i+1 < len(runs) && runs[i+1].cause == "recovered" {
			recovered++
			continue
		}
		if reason := refusalOf(x.id, refusals); reason != "" {
			refused++
			continue
		}
		next := "no later run"
		if i+1 < len(runs) {
			next = fmt.Sprintf("next run %s has cause %q", runs[i+1].id, runs[i+1].cause)
		}
		res.Detail = fmt.Sprintf("run %s never ended and was neither recovered nor refused with a reason (%s; session %s)", x.id, next, rec.State)
		return res
	}
	res.OK = true
	res.Detail = fmt.Sprintf("%d runs, %d interrupted: %d recovered, %d refused with a reason", len(runs), interrupted, recovered, refused)
	return res
}

// refusalOf returns the reason of the refusal told for run id (an
// io.jetway.run.refused on the output that names it), or "". A reason
// only in the session record is not enough: a person's next line
// overwrites it, and the people were never told.
func refusalOf(id string, refusals []string) string {
	for _, r := range refusals {
		if strings.Contains(r, id) {
			return r
		}
	}
	return ""
}

// checkJobsEnded: no record in the jobs table still says running.
func checkJobsEnded(jobs []Job) Result {
	res := Result{Invariant: JobsEnded, Subject: "jobs table"}
	var running []string
	for _, j := range jobs {
		if j.Status == "running" || j.Status == "" {
			running = append(running, fmt.Sprintf("%s (%s/%s job %s on %s)", j.Key, j.Tenant, j.Session, j.ID, j.Worker))
		}
	}
	if len(running) > 0 {
		res.Detail = fmt.Sprintf("%d jobs still running: %s", len(running), clip(running))
		return res
	}
	res.OK = true
	res.Detail = fmt.Sprintf("%d jobs, all ended", len(jobs))
	return res
}

// checkNoJobProcs: no process carrying a job's task marker is alive.
func checkNoJobProcs(procs []Proc) Result {
	res := Result{Invariant: NoJobProcs, Subject: "/proc"}
	if len(procs) > 0 {
		var s []string
		for _, p := range procs {
			s = append(s, fmt.Sprintf("pid %d %q (task %s, worker %s)", p.PID, p.Cmdline, p.Marker, p.Worker))
		}
		res.Detail = fmt.Sprintf("%d job processes still alive: %s", len(procs), clip(s))
		return res
	}
	res.OK = true
	res.Detail = "no process carries a task marker"
	return res
}

// clip joins at most ten items, saying how many more there were.
func clip(items []string) string {
	const max = 10
	if len(items) <= max {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:max], ", ") + fmt.Sprintf(" and %d more", len(items)-max)
}

// checkSubagentEnds: for every sub-agent session, each run whose end its
// transcript records is named exactly once in its parent's transcript —
// by a message that delivered its finished event, or by the record of the
// agent_start call that took it — never missing, never twice.
func checkSubagentEnds(ev Evidence) []Result {
	var out []Result
	for _, s := range sessions(ev) {
		rec := ev.Sessions[s]
		parent := rec.Parent()
		if parent == "" {
			continue
		}
		res := Result{Invariant: SubagentEnds, Subject: s.String()}
		counts := EndsTold(ev.Transcripts[Session{Tenant: s.Tenant, Session: parent}])
		var missing, twice []string
		n := 0
		for _, r := range ev.Transcripts[s] {
			if r.Kind != runner.RecordRunEnded {
				continue
			}
			n++
			switch id := runner.FinishedEventID(s.Session, r.Run); counts[id] {
			case 1:
			case 0:
				missing = append(missing, r.Run)
			default:
				twice = append(twice, fmt.Sprintf("%s (%d times)", r.Run, counts[id]))
			}
		}
		switch {
		case len(missing) > 0:
			res.Detail = fmt.Sprintf("%d ended runs never told to %s: %s", len(missing), parent, clip(missing))
		case len(twice) > 0:
			res.Detail = fmt.Sprintf("ended runs told to %s more than once: %s", parent, clip(twice))
		default:
			res.OK = true
			res.Detail = fmt.Sprintf("%d ended runs, each told to %s once", n, parent)
		}
		out = append(out, res)
	}
	return out
}

// EndsTold counts, per CE id, how often a parent's transcript names a
// sub-agent's finished event: delivered in a message, or recorded as taken
// by the agent_start call that waited for it (an answered record; a
// refused one in transcripts written before answered records existed).
func EndsTold(recs []runner.Record) map[string]int {
	n := map[string]int{}
	for _, r := range recs {
		if r.Message != nil {
			for _, id := range r.Message.Delivers {
				if strings.HasPrefix(id, "agent-finished.") {
					n[id]++
				}
			}
		}
		// Taken by the call that waited: recorded as answered (as
		// refused before that kind existed).
		if (r.Kind == runner.RecordAnswered || r.Kind == runner.RecordRefused) && r.Type == events.TypeAgentFinished {
			n[r.Event]++
		}
	}
	return n
}

// OwedEnds lists the sub-agent run ends not yet told to their parents, so
// a caller waiting for quiescence knows the system still owes them.
func OwedEnds(ev Evidence) []string {
	var owed []string
	for _, r := range checkSubagentEnds(ev) {
		if !r.OK {
			owed = append(owed, r.Subject+": "+r.Detail)
		}
	}
	return owed
}
