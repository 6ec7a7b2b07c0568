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
// needs the screen), so text never tears around the prompt. Run lifecycle
// events are left to their headlines, which the notifier sends.
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
		if json.Unmarshal(ev.Data, &h) != nil || h.Text == "" {
			return nil
		}
		return append(r.Flush(), "» "+h.Text)
	case events.TypeToolUse:
		var u events.ToolUse
		if json.Unmarshal(ev.Data, &u) != nil {
			return nil
		}
		return append(r.Flush(), "  ↳ "+u.Name)
	case events.TypeToolResult:
		var res events.ToolResult
		if json.Unmarshal(ev.Data, &res) != nil || !res.IsError {
			return nil
		}
		return append(r.Flush(), "  ↳ "+res.Summary) // name(args) → error: …
	case events.TypeRunEnded:
		return r.Flush()
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
