package chat

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"jetway/pkg/client"
	"jetway/pkg/dispatcherapi"
)

// recentLines is how many lines of the session's recent history the chat
// shows when it opens.
const recentLines = 6

// opening is what the chat shows before anything new arrives: the last few
// things that happened in the session, its state, the Ground Stop switches
// that hold it with how to lift each, its running jobs and the events
// waiting for it — so a session that looks dead says why.
func (c *chat) opening(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if recent, err := c.recent(ctx); err != nil && !isNotFound(err) {
		c.println("! history: " + err.Error())
	} else if len(recent) > 0 {
		c.println("recently:")
		for _, l := range recent {
			c.println("  " + l)
		}
	}
	d, err := c.cfg.Client.SessionDetail(ctx, c.cfg.Session)
	if isNotFound(err) {
		c.println("session " + c.cfg.Session + ": new (no run yet)")
		return
	}
	if err != nil {
		c.println("! session: " + err.Error())
		return
	}
	for _, l := range c.stateLines(d) {
		c.println(l)
	}
}

// isNotFound reports the dispatcher's answer for a session it has no
// record of yet: a new session, not a failure.
func isNotFound(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// stateLines describe d for a person.
func (c *chat) stateLines(d client.SessionDetail) []string {
	var out []string
	state := d.State
	if state == "" {
		state = "new (no run yet)"
	}
	if d.Run != "" {
		state += " (run " + d.Run + ")"
	}
	out = append(out, "session "+c.cfg.Session+": "+state)
	for _, sw := range d.GroundStop {
		out = append(out, "! Ground Stop on ("+switchText(sw)+"): nothing runs until it is lifted — "+c.liftCommand(sw.Scope))
	}
	for _, j := range d.Jobs {
		if j.Status == "running" {
			out = append(out, "  running: job "+j.ID+" — "+j.Line)
		}
	}
	if d.JobsError != "" {
		out = append(out, "! jobs: "+d.JobsError)
	}
	for _, ch := range d.Children {
		if ch.State == "running" || (ch.Runs == 0 && ch.Reason == "") {
			out = append(out, fmt.Sprintf("  sub-agent %d (%s): session %s, %s", ch.Number, ch.Agent, ch.Session, ch.State))
		}
	}
	if d.PendingEvents > 0 {
		out = append(out, fmt.Sprintf("  %d event(s) wait for the session", d.PendingEvents))
	}
	return out
}

// switchText names a switch: its scope, since when, by whom and why.
func switchText(sw client.StopSwitch) string {
	parts := []string{sw.Scope}
	if !sw.Since.IsZero() {
		parts = append(parts, "since "+sw.Since.Local().Format(time.DateTime))
	}
	if sw.By != "" {
		parts = append(parts, "set by "+sw.By)
	}
	if sw.Reason != "" {
		parts = append(parts, "reason: "+sw.Reason)
	}
	return strings.Join(parts, ", ")
}

// liftCommand is the command line that lifts the switch of scope.
func (c *chat) liftCommand(scope string) string {
	return "lift it with: " + client.LiftCommand(c.cfg.CLI, c.cfg.CLIFlags, scope, c.cfg.Session)
}

// command is a jetway command line the person can paste: the program as
// they ran it (bin/jetway from the repository root) and the flags that
// reach this dispatcher.
func (c *chat) command(args string) string {
	cli := c.cfg.CLI
	if cli == "" {
		cli = "jetway"
	}
	s := cli + " " + args
	if c.cfg.CLIFlags != "" {
		s += " " + c.cfg.CLIFlags
	}
	return s
}

// recent is the last few things the session's history holds, a line each.
func (c *chat) recent(ctx context.Context) ([]string, error) {
	var ring []string
	err := c.cfg.Client.EachTranscriptEntry(ctx, c.cfg.Session, 0, func(e client.TranscriptEntry) error {
		c.cursor.Store(e.ID)
		ring = append(ring, entryLines(e)...)
		if len(ring) > recentLines {
			ring = ring[len(ring)-recentLines:]
		}
		return nil
	})
	return ring, err
}

// entryLines are one transcript entry as the chat shows history: runs
// starting and ending, what a person or a notice said, the agent's text.
func entryLines(e client.TranscriptEntry) []string {
	switch e.Kind {
	case "run_started":
		// It carries the run's first turn: what started it.
		return append([]string{"» run " + e.Run + " started (" + e.Cause + ")"}, turnLines(e)...)
	case "run_ended":
		return []string{"» run " + e.Run + " ended: " + e.Reason}
	case "refused":
		return []string{"» refused " + e.Type + ": " + e.Reason}
	case "answered":
		return []string{"» " + e.Type + " " + e.Reason}
	case "message":
		return turnLines(e)
	}
	return nil
}

// turnLines is a turn's first text: a notice, what a person typed, or the
// agent's answer.
func turnLines(e client.TranscriptEntry) []string {
	text := firstText(e.Content)
	switch {
	case text == "":
		return nil
	case e.MessageKind == "notice" || e.Role == "user" && strings.HasPrefix(text, "["):
		return []string{"» " + clip(text, 160)}
	case e.Role == "user" && e.MessageKind == "" && client.Whose(e) != "person":
		return []string{"» " + client.Whose(e) + ": " + clip(text, 160)}
	case e.Role == "user" && e.MessageKind == "":
		return []string{"you: " + clip(text, 160)}
	case e.Role == "assistant":
		return []string{"agent: " + clip(text, 160)}
	}
	return nil
}

func firstText(blocks []dispatcherapi.TranscriptBlock) string {
	for _, b := range blocks {
		if b.Type == "text" && strings.TrimSpace(b.Text) != "" {
			return b.Text
		}
	}
	return ""
}

// clip is s on one line, at most n bytes.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
