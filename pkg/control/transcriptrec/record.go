// Package transcriptrec is the record a session's transcript is made of:
// one JetStream message per entry on jetway.transcript.<tenant>.<session>,
// written by the runner that holds the session (fenced by the subject's
// last sequence) and read by the dispatcher for history and by the
// invariant checker. One type for both sides, so a field the runner adds
// is one the readers see.
package transcriptrec

import (
	"time"

	"jetway/pkg/control/agents"
	"jetway/pkg/llm"
)

// Record kinds.
const (
	KindMessage    = "message"     // one llm.Message, in birth order
	KindBoundary   = "boundary"    // a compaction boundary (observability)
	KindRunStarted = "run_started" // a run began (cause), with its first turn (Message)
	KindRunEnded   = "run_ended"   // a run ended (reason)
	KindRefused    = "refused"     // an event refused and why; never sent to the model
	// KindAnswered: an event taken as the result of a call that waited for
	// it (a sub-agent's end, by its agent_start) and so not a notice of its
	// own: delivered, not refused.
	KindAnswered = "answered"
)

// Record is one entry of jetway.transcript.<tenant>.<session>. The
// transcript is the session's memory and the chaos suite's evidence: every
// event that reached the model is named in exactly one record's
// Message.Delivers (a message record, or the run_started record that
// carries a run's first turn).
type Record struct {
	Kind     string            `json:"kind"`
	Run      string            `json:"run,omitempty"`
	Runner   string            `json:"runner,omitempty"`
	Time     time.Time         `json:"time"`
	Message  *llm.Message      `json:"message,omitempty"`
	Usage    *llm.Usage        `json:"usage,omitempty"`
	Boundary *llm.BoundaryMeta `json:"boundary,omitempty"`
	// Cause is the run's cause (run_started); Reason why it ended
	// (run_ended) or why an event was refused (refused).
	Cause  string `json:"cause,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Error is what the model's provider said when a run ended on its
	// error (run_ended, reason model_error), redacted: without it the
	// history said "model_error" and the cause was only in the logs and
	// the live stream.
	Error string `json:"error,omitempty"`
	// Event and Type name a refused event.
	Event string `json:"event,omitempty"`
	Type  string `json:"type,omitempty"`
	// From says who or what each event the run's first turn delivers came
	// from (run_started; events.From: person, job, sub-agent, parent,
	// steer, timer, event), in Message.Delivers order, so a notice never
	// reads as a person's words.
	From []string `json:"from,omitempty"`
	// Agent and AgentVersion name the profile a run went by (run_started).
	Agent        string `json:"agent,omitempty"`
	AgentVersion uint64 `json:"agent_version,omitempty"`
	// MCP are the MCP servers that were not running as the run ended, and
	// why (run_ended): why a run lacked a server's tools stays readable
	// after the servers' states have moved on.
	MCP []agents.MCPServerState `json:"mcp,omitempty"`
}
