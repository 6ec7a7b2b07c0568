package events

import (
	"encoding/json"
	"fmt"
	"time"
)

// Run output and headline types. Runners publish the run.* events on
// jetway.out.<tenant>.<session>; the notifier publishes headlines on
// jetway.notify.<tenant>.<session>. Both are CloudEvents like every other
// event, so one decoder and one SSE stream serve them all.
const (
	TypeRunStarted = "io.jetway.run.started"
	TypeRunEnded   = "io.jetway.run.ended"
	TypeRunText    = "io.jetway.run.text"
	TypeToolUse    = "io.jetway.run.tool_use"
	TypeToolResult = "io.jetway.run.tool_result"
	// TypeRunRefused says an event was refused by a runner (a forged job
	// event, a rail, a recovery refused) and why; the refusal is recorded.
	TypeRunRefused = "io.jetway.run.refused"
	TypeHeadline   = "io.jetway.headline"
	// TypeRunDelivered says events reached the live run's model: a turn
	// handing them over (notices of a busy session) is in the transcript.
	TypeRunDelivered = "io.jetway.run.delivered"
)

// RunStarted says a run began for a session.
type RunStarted struct {
	Run string `json:"run"`
	// Cause is dispatch, recovered, steered or resumed (pkg/handover).
	Cause  string `json:"cause"`
	Model  string `json:"model"`
	Runner string `json:"runner"`
	// Events are the CE ids the run's first turn delivered.
	Events []string `json:"events,omitempty"`
	// Agent and AgentVersion name the agent profile the run goes by
	// ("default", version 0: the runner as configured).
	Agent        string `json:"agent,omitempty"`
	AgentVersion uint64 `json:"agent_version,omitempty"`
}

// RunUsage is a run's token use.
type RunUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// RunEnded says a run finished, and why.
type RunEnded struct {
	Run       string   `json:"run"`
	Reason    string   `json:"reason"`
	Turns     int      `json:"turns"`
	ElapsedMS int64    `json:"elapsed_ms"`
	Usage     RunUsage `json:"usage"`
	Error     string   `json:"error,omitempty"`
}

// RunText is a delta of the assistant's text, streamed as it arrives.
type RunText struct {
	Run  string `json:"run"`
	Text string `json:"text"`
}

// ToolUse says the model called a tool.
type ToolUse struct {
	Run   string          `json:"run"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
}

// ToolResult is a tool call's outcome in one line (the full result is in the
// transcript).
type ToolResult struct {
	Run     string `json:"run"`
	ID      string `json:"id"`
	Name    string `json:"name"`
	Summary string `json:"summary"`
	IsError bool   `json:"is_error,omitempty"`
}

// RunRefused says a runner refused to act on an event or to start a run.
type RunRefused struct {
	// Event is the CE id of the refused event, if one was.
	Event  string `json:"event,omitempty"`
	Type   string `json:"type,omitempty"`
	Reason string `json:"reason"`
}

// HeadlineNote is one line for people, as the notifier sends it.
type HeadlineNote struct {
	Text string `json:"text"`
	// About is the CE type the headline is about (e.g. io.jetway.job.exited).
	About string `json:"about"`
	// Event is the CE id of what it is about.
	Event string `json:"event,omitempty"`
	// Approval names the approval a person is asked to decide (About
	// io.jetway.approval.requested): POST /v1/sessions/{session}/approvals/{approval}.
	Approval string `json:"approval,omitempty"`
}

func (RunStarted) EventType() string   { return TypeRunStarted }
func (RunDelivered) EventType() string { return TypeRunDelivered }
func (RunEnded) EventType() string     { return TypeRunEnded }
func (RunText) EventType() string      { return TypeRunText }
func (ToolUse) EventType() string      { return TypeToolUse }
func (ToolResult) EventType() string   { return TypeToolResult }
func (RunRefused) EventType() string   { return TypeRunRefused }
func (HeadlineNote) EventType() string { return TypeHeadline }

// RunDelivered names the events a live run's recorded turn handed to the
// model (the first turn's are in RunStarted.Events).
type RunDelivered struct {
	Run    string   `json:"run"`
	Events []string `json:"events"`
}

// RunStartedHeadline is the one-liner for a run that began:
// `run r-1a2b started (dispatch) · script demo.json (deterministic, no model)`,
// and with an agent other than the implicit default
// `run r-1a2b started (dispatch) · agent reviewer v12 · anthropic claude-sonnet-4-5`.
func RunStartedHeadline(r RunStarted) string {
	agent := ""
	switch {
	case r.Agent != "" && r.AgentVersion > 0:
		agent = fmt.Sprintf(" · agent %s v%d", r.Agent, r.AgentVersion)
	case r.Agent != "" && r.Agent != "default":
		agent = " · agent " + r.Agent
	}
	return fmt.Sprintf("run %s started (%s)%s · %s", r.Run, r.Cause, agent, r.Model)
}

// RunEndedHeadline is the one-liner for a run that finished:
// `run r-1a2b completed after 3 turns in 12s`, with the error when there was one.
func RunEndedHeadline(r RunEnded) string {
	turns := "turns"
	if r.Turns == 1 {
		turns = "turn"
	}
	s := fmt.Sprintf("run %s %s after %d %s in %s", r.Run, r.Reason, r.Turns, turns,
		FmtElapsed(msDuration(r.ElapsedMS)))
	if r.Error != "" {
		s += ": " + r.Error
	}
	return s
}

// RunRefusedHeadline is the one-liner for a refusal.
func RunRefusedHeadline(r RunRefused) string {
	if r.Type != "" {
		return fmt.Sprintf("refused %s: %s", r.Type, r.Reason)
	}
	return "refused: " + r.Reason
}

// ElapsedMS is d in whole milliseconds, as the run events carry it.
func ElapsedMS(d time.Duration) int64 { return d.Milliseconds() }
