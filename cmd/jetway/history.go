package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"jetway/pkg/client"
)

func init() { addCommand(newHistoryCmd) }

func newHistoryCmd(*globals) *cobra.Command {
	var cf clientFlags
	var after uint64
	cmd := &cobra.Command{
		Use:   "history SESSION",
		Short: "Print a session's whole history: who said what, tool calls, notices, runs",
		Long: `history reads SESSION's transcript from the dispatcher, a page at a time,
and prints all of it in the order it was recorded: what the person typed,
what the assistant said, each tool call as name(args) → result, notices the
model was given, and where runs started and ended. Secrets are redacted by
the dispatcher, with the rules the runner uses.

--json prints each entry as one line of JSON (the dispatcher's transcript
entries), for programs; --after ID starts after the entry with that id.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cf.json {
				enc := json.NewEncoder(out)
				return c.EachTranscriptEntry(cmd.Context(), args[0], after, func(e client.TranscriptEntry) error {
					return enc.Encode(e)
				})
			}
			h := &historyPrinter{w: out, calls: map[string]string{}}
			if err := c.EachTranscriptEntry(cmd.Context(), args[0], after, h.entry); err != nil {
				return err
			}
			return h.flush()
		},
	}
	cf.register(cmd, false)
	cmd.Flags().BoolVar(&cf.json, "json", false, "print each entry as one line of JSON")
	cmd.Flags().Uint64Var(&after, "after", 0, "start after the entry with this id")
	return cmd
}

// Widths a history line keeps: a tool call's arguments and the first line
// of its result are cut there, so one call stays one line.
const (
	historyArgsWidth   = 120
	historyResultWidth = 160
)

// historyPrinter prints transcript entries for a person. It remembers
// each tool call until its result comes (the result is in the next turn,
// maybe on the next page), so a call and its outcome print as one line.
type historyPrinter struct {
	w     io.Writer
	calls map[string]string // tool_use id → "name(args)"
	order []string          // tool_use ids without a result yet, in order
	err   error
}

func (h *historyPrinter) printf(format string, a ...any) {
	if h.err == nil {
		_, h.err = fmt.Fprintf(h.w, format, a...)
	}
}

func (h *historyPrinter) entry(e client.TranscriptEntry) error {
	when := e.Time.Local().Format("2006-01-02 15:04:05")
	switch e.Kind {
	case "run_started":
		h.printf("── run %s started (%s)%s %s\n", e.Run, e.Cause, agentOf(e), when)
	case "run_ended":
		h.flushCalls()
		why := orDash(e.Reason)
		if e.Error != "" {
			why += " — " + e.Error
		}
		h.printf("── run %s ended: %s %s\n", e.Run, why, when)
		for _, s := range e.MCP {
			h.printf("   MCP server %s (%s) %s: %s\n", s.Server, s.Transport, s.State, orDash(s.Error))
		}
		return h.err
	case "boundary":
		h.printf("── the history was compacted here %s\n", when)
		return h.err
	case "refused":
		what := e.Event
		if e.Type != "" {
			what += " (" + e.Type + ")"
		}
		h.printf("refused: event %s: %s\n", what, e.Reason)
		return h.err
	case "answered":
		h.printf("── event %s (%s) %s\n", e.Event, e.Type, e.Reason)
		return h.err
	case "unreadable":
		h.printf("(entry %d unreadable: %s)\n", e.ID, e.Reason)
		return h.err
	}
	h.turn(e)
	return h.err
}

// turn prints a turn's blocks under the name of who wrote it.
func (h *historyPrinter) turn(e client.TranscriptEntry) {
	who := speaker(e)
	for _, b := range e.Content {
		switch b.Type {
		case "text":
			if strings.TrimSpace(b.Text) != "" {
				h.printf("%s: %s\n", who, indent(b.Text))
			}
		case "image":
			h.printf("%s: [image]\n", who)
		case "tool_use":
			h.calls[b.ID] = b.Name + "(" + cut(toolArgs(b.Input), historyArgsWidth) + ")"
			h.order = append(h.order, b.ID)
		case "tool_result":
			h.result(b)
		}
	}
}

func (h *historyPrinter) result(b client.TranscriptBlock) {
	call, ok := h.calls[b.ToolUseID]
	if !ok {
		call = "tool " + b.ToolUseID
	}
	delete(h.calls, b.ToolUseID)
	res := firstLine(b.Content)
	if b.Images > 0 {
		res += fmt.Sprintf(" [%d image(s)]", b.Images)
	}
	mark := "→"
	if b.IsError {
		mark = "→ error:"
	}
	h.printf("  %s %s %s\n", call, mark, res)
}

// flushCalls prints the tool calls that never got a result (a run that
// was interrupted, or one still going).
func (h *historyPrinter) flushCalls() {
	for _, id := range h.order {
		if call, ok := h.calls[id]; ok {
			h.printf("  %s → (no result)\n", call)
			delete(h.calls, id)
		}
	}
	h.order = h.order[:0]
}

func (h *historyPrinter) flush() error {
	h.flushCalls()
	return h.err
}

// speaker names who wrote a turn: the person, the assistant, or the host
// (a notice, a reminder, a summary of folded history).
func speaker(e client.TranscriptEntry) string {
	switch {
	case e.Role == "assistant":
		return "assistant"
	case e.MessageKind == "":
		return client.Whose(e)
	case e.MessageKind == "compact_summary":
		return "summary"
	}
	return e.MessageKind
}

// toolArgs shows a tool call's arguments: the value alone when there is
// one string argument (bash's command), else the compact JSON.
func toolArgs(raw json.RawMessage) string {
	var obj map[string]any
	if json.Unmarshal(raw, &obj) == nil && len(obj) == 1 {
		for _, v := range obj {
			if s, ok := v.(string); ok {
				return s
			}
		}
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// firstLine is a result's first non-empty line, cut to width, with how
// many lines were left out.
func firstLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	first, rest := "", 0
	for i, l := range lines {
		if strings.TrimSpace(l) != "" {
			first, rest = l, len(lines)-i-1
			break
		}
	}
	out := cut(first, historyResultWidth)
	if rest > 0 {
		out += fmt.Sprintf(" (+%d lines)", rest)
	}
	if out == "" {
		return "(empty)"
	}
	return out
}

// indent keeps a multi-line text under its speaker.
func indent(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

func cut(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", "⏎")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// agentOf names the profile a run went by, " as reviewer v3"; nothing for
// a run recorded without one.
func agentOf(e client.TranscriptEntry) string {
	switch {
	case e.Agent == "":
		return ""
	case e.AgentVersion == 0:
		return " as " + e.Agent
	}
	return fmt.Sprintf(" as %s v%d", e.Agent, e.AgentVersion)
}
