package chat

import (
	"encoding/json"
	"strings"

	"jetway/pkg/client"
	"jetway/pkg/events"
)

// Renderer turns a session's stream into lines for a person. Headlines
// become one line each; streamed assistant text is shown a whole line at a
// time (a partial line is held until its newline, or until anything else
// needs the screen), so text never tears around the prompt. A run's start
// and end are shown from the run's own output, which is in order with its
// text, not from the notifier's headlines about them, which take a hop
// more and so arrive after the run's first text.
type Renderer struct {
	partial strings.Builder
}

// Lines is what ev adds to the screen, in order.
func (r *Renderer) Lines(ev client.Event) []string {
	switch ev.Type {
	case events.TypeRunText:
		var t events.RunText
		if json.Unmarshal(ev.Data, &t) != nil {
			return nil
		}
		r.partial.WriteString(t.Text)
		s := r.partial.String()
		cut := strings.LastIndexByte(s, '\n')
		if cut < 0 {
			return nil
		}
		r.partial.Reset()
		r.partial.WriteString(s[cut+1:])
		return strings.Split(s[:cut], "\n")
	case events.TypeHeadline:
		var h events.HeadlineNote
		if json.Unmarshal(ev.Data, &h) != nil || h.Text == "" || h.About == events.TypeRunStarted || h.About == events.TypeRunEnded ||
			h.About == events.TypeApprovalRequested {
			return nil
		}
		return append(r.Flush(), "» "+h.Text)
	case events.TypeRunStarted:
		var s events.RunStarted
		if json.Unmarshal(ev.Data, &s) != nil {
			return nil
		}
		return append(r.Flush(), "» "+events.RunStartedHeadline(s))
	case events.TypeToolUse:
		var u events.ToolUse
		if json.Unmarshal(ev.Data, &u) != nil {
			return nil
		}
		return append(r.Flush(), "  ↳ "+u.Name+toolArgs(u.Input))
	case events.TypeToolResult:
		var res events.ToolResult
		if json.Unmarshal(ev.Data, &res) != nil || !res.IsError {
			return nil
		}
		return append(r.Flush(), "  ↳ "+res.Summary) // name(args) → error: …
	case events.TypeApprovalRequested:
		var a events.ApprovalRequested
		if json.Unmarshal(ev.Data, &a) != nil {
			return nil
		}
		return append(r.Flush(), approvalPrompt(a)...)
	case events.TypeRunEnded:
		var e events.RunEnded
		if json.Unmarshal(ev.Data, &e) != nil {
			return r.Flush()
		}
		return append(r.Flush(), "» "+events.RunEndedHeadline(e))
	}
	return nil
}

// Flush returns the held partial line, if any.
func (r *Renderer) Flush() []string {
	if r.partial.Len() == 0 {
		return nil
	}
	s := r.partial.String()
	r.partial.Reset()
	return []string{s}
}

// approvalPrompt shows what waits for the person and how to decide it in
// place (the /approve, /reject and /answer commands).
func approvalPrompt(a events.ApprovalRequested) []string {
	if a.Kind == "question" {
		q := "? the agent asks: " + a.Question
		if len(a.Choices) > 0 {
			q += " [" + strings.Join(a.Choices, " | ") + "]"
		}
		return []string{q, "  answer with: /answer " + a.Approval + " <answer>"}
	}
	return []string{"? " + a.Tool + " " + events.PlainJSON(a.Input) + " waits for your approval",
		"  decide with: /approve " + a.Approval + " [edited input as JSON] or /reject " + a.Approval + " <reason>"}
}

// toolArgWidth bounds what a tool call line shows of its arguments, so the
// line stays one line of a terminal.
const toolArgWidth = 100

// toolArgs is what a tool call line shows after the tool's name: the
// command a shell call runs (what a person watching wants to know), else
// the arguments as compact JSON; on one line, cut to toolArgWidth.
func toolArgs(input json.RawMessage) string {
	if len(input) == 0 {
		return ""
	}
	var shell struct {
		Command string `json:"command"`
	}
	if json.Unmarshal(input, &shell) == nil && strings.TrimSpace(shell.Command) != "" {
		return ": " + clip(shell.Command, toolArgWidth)
	}
	s := events.PlainJSON(input)
	if s == "" || s == "{}" || s == "null" {
		return ""
	}
	return " " + clip(s, toolArgWidth)
}
