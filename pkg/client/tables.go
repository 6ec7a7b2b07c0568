package client

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"jetway/pkg/control/sessionrec"
	"jetway/pkg/dispatcherapi"
)

// JobRecord is the part of a job record a person reads: the jobs service's
// one-line description and the state columns.
type JobRecord struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	ExitCode int    `json:"exit_code"`
	Program  string `json:"program"`
	// Line is the job's readable line (tasks.Describe), e.g.
	// "t3 exited (exit 0) after 4m12s · 1.2 MB / 3400 lines · go test ./... · out:sess:ab12".
	Line string `json:"line"`
}

// DecodeJob reads the person-facing fields of j's record; fields the record
// lacks stay zero.
func DecodeJob(j Job) JobRecord {
	var r JobRecord
	_ = json.Unmarshal(j.Record, &r)
	if r.ID == "" {
		r.ID = j.Job
	}
	return r
}

// Running reports whether the job is still running.
func (r JobRecord) Running() bool { return r.Status == "running" }

// DecodeSession reads s's record (sessionrec.Record, written by the
// runners); a record that does not decode reads as the zero one.
func DecodeSession(s Session) sessionrec.Record {
	var r sessionrec.Record
	_ = json.Unmarshal(s.Record, &r) // the zero record: no state to show
	return r
}

// SortJobs orders jobs by number, the order they were started in (the
// listing comes in key order: 1, 10, 2, …).
func SortJobs(jobs []Job) {
	slices.SortStableFunc(jobs, func(a, b Job) int {
		na, ea := strconv.ParseUint(a.Job, 10, 64)
		nb, eb := strconv.ParseUint(b.Job, 10, 64)
		if ea == nil && eb == nil {
			return cmp.Compare(na, nb)
		}
		return strings.Compare(a.Job, b.Job)
	})
}

// WriteJobs prints jobs as a table sorted by number: state, exit status and
// the job's readable line.
func WriteJobs(w io.Writer, jobs []Job) error {
	SortJobs(jobs)
	// tw keeps the table until Flush, which returns a failed write.
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "JOB\tSTATE\tEXIT\tJOB LINE")
	for _, j := range jobs {
		r := DecodeJob(j)
		exit := "-"
		if !r.Running() && r.Status != "" {
			exit = strconv.Itoa(r.ExitCode)
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", j.Job, orDash(r.Status), exit, orDash(r.Line))
	}
	return tw.Flush()
}

// GroundStopOf says which Ground Stop switches cover session in a tenant's
// stop state: "global", "tenant", "session" (the narrowest first is the
// one to lift last), joined by ", "; "off" when none.
func GroundStopOf(st StopState, session string) string {
	var on []string
	if st.GlobalStop != nil && *st.GlobalStop || st.Scope == "global" && st.GroundStop {
		on = append(on, "global")
	}
	if strings.HasSuffix(st.Scope, "/*") && st.GroundStop {
		on = append(on, "tenant")
	}
	for _, s := range st.Sessions {
		if s.GroundStop && strings.HasSuffix(s.Scope, "/"+session) {
			on = append(on, "session")
		}
	}
	if len(on) == 0 {
		return "off"
	}
	return "on (" + strings.Join(on, ", ") + ")"
}

// WriteSessions prints sessions as a table sorted by name: state, the
// Ground Stop switches covering each (stop is the tenant's stop state; nil
// when it could not be read) and when it last changed.
func WriteSessions(w io.Writer, ss []Session, stop *StopState, now time.Time) error {
	slices.SortStableFunc(ss, func(a, b Session) int { return strings.Compare(a.Session, b.Session) })
	// tw keeps the table until Flush, which returns a failed write.
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "SESSION\tSTATE\tGROUND STOP\tLAST ACTIVITY")
	for _, s := range ss {
		gs := "?"
		if stop != nil {
			gs = GroundStopOf(*stop, s.Session)
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Session, orDash(DecodeSession(s).State), gs, Ago(s.Updated, now))
	}
	return tw.Flush()
}

// Ago is a coarse "how long ago" for listings.
func Ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", max(0, int(d.Seconds())))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Local().Format("2006-01-02")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// LiftCommand is the command line a person can paste to lift the Ground
// Stop switch of scope that holds session: cli is the program as they ran
// it ("jetway" when empty) and flags those that reach the same dispatcher.
// The chat's opening and send's answer both say it, so they say it alike.
func LiftCommand(cli, flags, scope, session string) string {
	if cli == "" {
		cli = "jetway"
	}
	s := cli + " stop --off"
	switch scope {
	case "session":
		s += " --session " + session
	case "global":
		s += " --global"
	}
	if flags != "" {
		s += " " + flags
	}
	return s
}

// WriteChildren prints a session's sub-agents as a table by number: their
// session, agent profile, state (with the live run, or why one never
// started) and runs.
func WriteChildren(w io.Writer, children []dispatcherapi.ChildSummary) error {
	// tw keeps the table until Flush, which returns a failed write.
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "AGENT\tSESSION\tPROFILE\tSTATE\tRUNS")
	for _, c := range children {
		state := c.State
		if c.Run != "" {
			state += " (run " + c.Run + ")"
		} else if c.Runs == 0 && c.State == "idle" && c.Reason == "" {
			state = "starting"
		} else if c.Runs == 0 && c.State == "idle" {
			// Refused its first run, or its prompt never reached it.
			state = "not started (" + c.Reason + ")"
		}
		_, _ = fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\n", c.Number, c.Session, orDash(c.Agent), state, c.Runs)
	}
	return tw.Flush()
}

// Whose says who or what a user turn of the transcript came from: "person"
// for a person's own line (and for a turn recorded before entries said),
// otherwise the sources of the events it delivered ("job", "event",
// "person+job", …; see dispatcherapi.TranscriptEntry.From), so a notice
// is never shown as the person's words.
func Whose(e TranscriptEntry) string {
	var out []string
	for _, f := range e.From {
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return "person"
	}
	return strings.Join(out, "+")
}
