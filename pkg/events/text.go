package events

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// FmtElapsed renders a duration as `45s`, `21m` or `1h05m`: coarse on
// purpose, it is read at a glance. Negative durations read as 0s.
func FmtElapsed(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case s < 0:
		return "0s"
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm", s/60)
	default:
		return fmt.Sprintf("%dh%02dm", s/3600, (s%3600)/60)
	}
}

// Headline is the one line a person reads for an event, e.g.
// `job 3 (gh) exited 0 after 21m` or `job 7 (make) still running after 10m`.
// It reports false for typed input and for a steer, which the person already
// saw as they typed it. A resume names the work picked up; an external
// event names its type and source.
//
// A job that did not exit by itself says so instead of showing an exit
// status that means nothing: `job 3 (gh) was killed after 2m`,
// `… timed out after 2m`, `… failed after 2m` (it could not be waited for),
// `… was lost after 2m` (its worker went away).
func Headline(p Payload) (string, bool) {
	switch p := p.(type) {
	case JobExited:
		return fmt.Sprintf("job %d (%s) %s after %s", p.ID, oneLine(p.Program, 80), jobEnd(p), FmtElapsed(p.RunningFor())), true
	case JobOverdue:
		return fmt.Sprintf("job %d (%s) still running after %s", p.ID, oneLine(p.Program, 80), FmtElapsed(p.RunningFor())), true
	case Resume:
		return fmt.Sprintf("picked up work set down by %s, waiting for: %s", oneLine(p.BookedBy, 80), oneLine(p.WaitingFor, 120)), true
	case External:
		return fmt.Sprintf("external event %s from %s", oneLine(p.Type, 120), oneLine(p.Source, 120)), true
	case AgentFinished:
		return agentHeadline(p), true
	case AgentProgress:
		return fmt.Sprintf("%s reports: %s", agentName(p.Number, p.Agent), oneLine(p.Text, 200)), true
	case JobNotice:
		return jobNoticeHeadline(p), true
	case ApprovalDecided:
		return approvalHeadline(p), true
	}
	return "", false
}

func jobEnd(p JobExited) string {
	switch p.Status {
	case StatusKilled:
		return "was killed"
	case StatusTimedOut:
		return "timed out"
	case StatusFailed:
		return "failed"
	case StatusLost:
		return "was lost"
	default:
		return fmt.Sprintf("exited %d", p.ExitStatus)
	}
}

// Notice is the text the model reads for an event that arrives while it is
// working (or that starts a run): what happened, the tail of the job's output
// when there is one, and what is expected of it. For a job:
//
//	[background job notice] job 3 (gh) exited 1 after 21m.
//	Last output:
//	<tail>
//	Tell the user it failed and why, from the output.
//
// Exit 0 asks to tell the result; a non-zero exit to tell that it failed and
// why; overdue to check the job with shell_job_status and kill it with
// shell_job_kill if stuck. A killed, timed-out, failed or lost job asks for
// what can honestly be said about it. A steer is marked as taking precedence
// over the original request; an external event names its type, source and
// data. Typed input reports false: it is the model's input as it stands (see
// InputNotice for input that arrives mid-run).
func Notice(p Payload) (string, bool) {
	switch p := p.(type) {
	case JobExited:
		head, _ := Headline(p)
		return jobNotice(head, p.Tail, exitedAsk(p)), true
	case JobOverdue:
		head, _ := Headline(p)
		// Overdue is a question, not a verdict: the job may be fine.
		ask := fmt.Sprintf("Check it with shell_job_status (id %d); tell the user whether it is "+
			"progressing, and kill it with shell_job_kill if it is stuck.", p.ID)
		return jobNotice(head, p.Tail, ask), true
	case Steer:
		return SteerNotice(p), true
	case Resume:
		return ResumeNotice(p), true
	case External:
		return ExternalNotice(p), true
	case AgentFinished:
		return agentNotice(p), true
	case AgentProgress:
		return agentProgressNotice(p), true
	case JobNotice:
		// A report, not a warning: no "check it, kill it if stuck".
		head := jobNoticeHeadline(p)
		return "[background job report] " + head + "\nThe task is still running; act on the report if it matters to your work.", true
	}
	return "", false
}

func exitedAsk(p JobExited) string {
	switch p.Status {
	case StatusKilled:
		return "Tell the user it was killed before it finished, and how far it got, from the output."
	case StatusTimedOut:
		return "Tell the user it ran past its time limit and was stopped, and how far it got, from the output."
	case StatusFailed:
		return "Its end could not be observed, so its result is unknown. Tell the user, with what the output shows."
	case StatusLost:
		return "Its worker went away, so whether it finished is unknown. Tell the user, and check before running it again."
	}
	if p.ExitStatus == 0 {
		return "Tell the user the result."
	}
	return "Tell the user it failed and why, from the output."
}

func jobNotice(head, tail, ask string) string {
	var b strings.Builder
	b.WriteString("[background job notice] ")
	b.WriteString(head)
	b.WriteString(".")
	if strings.TrimSpace(tail) != "" {
		b.WriteString("\nLast output:\n")
		b.WriteString(strings.TrimRight(tail, " \t\r\n\v\f"))
	}
	b.WriteString("\n")
	b.WriteString(ask)
	return b.String()
}

// InputNotice is what the model reads when a person types while a run is
// under way: the text, marked as coming from the user mid-run so the model
// takes it into account before its next step rather than mistaking it for a
// tool result.
func InputNotice(in Input) string {
	return "[message from the user while you were working]\n" + strings.TrimSpace(in.Text)
}

// SteerNotice is what the model reads for a steer: a person redirecting
// the work under way. As in the handover brief (pkg/handover), the instruction takes
// precedence over the original request where the two disagree.
func SteerNotice(s Steer) string {
	return "[steering from the user] This instruction takes precedence over the original request " +
		"where the two disagree:\n> " + strings.ReplaceAll(strings.TrimSpace(s.Note), "\n", "\n> ")
}

// ResumeNotice is what the model reads when a layover it set down fires
// while the session is busy; an idle session starts a run with the handover
// brief instead.
func ResumeNotice(r Resume) string {
	return fmt.Sprintf("[layover resumed] Work set down by %s at %s was waiting for: %s\n"+
		"This is check %d. See whether it has happened and act on it if it has; if not, set it down again rather than waiting.",
		r.BookedBy, r.BookedAt.UTC().Format(time.RFC3339), strings.TrimSpace(r.WaitingFor), uint64(r.Checks)+1)
}

// MaxExternalData is how much of an external event's data a notice shows;
// more would crowd the model's context for little gain.
const MaxExternalData = 8 << 10

// ExternalNotice is what the model reads for an event type jetway does not
// define, e.g. `[external event] com.github.push from https://github.com/x/y:`
// followed by the data. Data longer than MaxExternalData is cut at a
// character boundary with a note of its full size; data that is not text is
// described, not shown.
func ExternalNotice(x External) string {
	head := fmt.Sprintf("[external event] %s from %s", oneLine(x.Type, 200), oneLine(x.Source, 200))
	data := x.Data
	switch {
	case len(strings.TrimSpace(string(data))) == 0:
		return head + " (no data)."
	case !utf8.Valid(data):
		ct := x.DataContentType
		if ct == "" {
			ct = "unknown type"
		}
		return fmt.Sprintf("%s: %d bytes of binary data (%s), not shown.", head, len(data), ct)
	case len(data) > MaxExternalData:
		cut := MaxExternalData
		for cut > 0 && !utf8.RuneStart(data[cut]) {
			cut--
		}
		return fmt.Sprintf("%s:\n%s\n… (truncated: %d of %d bytes shown)", head, data[:cut], cut, len(data))
	}
	return head + ":\n" + strings.TrimSpace(string(data))
}

// oneLine keeps a value from breaking a one-line text: newlines become
// spaces and it is cut to n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	return shorten(s, n)
}
