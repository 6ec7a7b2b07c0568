package events

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Sub-agent and report event types. io.jetway.agent.* events are trusted
// only from jetway.agentevents.… (runners only), see ErrForgedAgentEvent;
// io.jetway.job.notice, like every job event, only from jetway.jobevents.….
const (
	// TypeAgentInput gives a child session work from its parent's run.
	TypeAgentInput = "io.jetway.agent.input"
	// TypeAgentFinished tells a parent that a child's run ended.
	TypeAgentFinished = "io.jetway.agent.finished"
	// TypeAgentProgress is a child's progress report to its parent.
	TypeAgentProgress = "io.jetway.agent.progress"
	// TypeAgentStop asks a child to stop its run.
	TypeAgentStop = "io.jetway.agent.stop"
	// TypeJobNotice is a running function task's report (Reporter.Notify).
	TypeJobNotice = "io.jetway.job.notice"

	// AgentTypePrefix starts every sub-agent event type.
	AgentTypePrefix = "io.jetway.agent."
)

// IsAgentType reports whether typ is a sub-agent event type
// (io.jetway.agent.*), known to this version or not.
func IsAgentType(typ string) bool { return strings.HasPrefix(typ, AgentTypePrefix) }

// AgentInput is work a parent's run gives its child: the prompt that
// starts it, or more input later.
type AgentInput struct {
	Text string `json:"text"`
	// Parent is the session that sent it.
	Parent string `json:"parent"`
}

// AgentFinished says a child's run ended. Reason is the run's end
// ("completed" when it answered); Answer is its last text, capped at
// MaxAgentAnswer (Truncated then says so).
type AgentFinished struct {
	Child        string `json:"child"`
	Agent        string `json:"agent"`
	Number       int    `json:"number"`
	Run          string `json:"run"`
	Reason       string `json:"reason"`
	Answer       string `json:"answer"`
	Truncated    bool   `json:"truncated,omitempty"`
	RunningForMS int64  `json:"running_for_ms"`
}

// RunningFor is how long the child has been at it.
func (a AgentFinished) RunningFor() time.Duration { return msDuration(a.RunningForMS) }

// AgentProgress is a child's report while it works.
type AgentProgress struct {
	Child  string `json:"child"`
	Agent  string `json:"agent"`
	Number int    `json:"number"`
	Text   string `json:"text"`
}

// AgentStop asks a child to stop: its live run is cancelled.
type AgentStop struct {
	Parent string `json:"parent"`
	Reason string `json:"reason,omitempty"`
}

// JobNotice is a report a running function task left (a watch whose
// result changed, a sub-task's step): news, not a warning.
type JobNotice struct {
	ID           uint64 `json:"id"`
	Program      string `json:"program"`
	Text         string `json:"text"`
	RunningForMS int64  `json:"running_for_ms"`
	TaskRef
}

// RunningFor is how long the task has been running.
func (j JobNotice) RunningFor() time.Duration { return msDuration(j.RunningForMS) }

func (AgentInput) EventType() string    { return TypeAgentInput }
func (AgentFinished) EventType() string { return TypeAgentFinished }
func (AgentProgress) EventType() string { return TypeAgentProgress }
func (AgentStop) EventType() string     { return TypeAgentStop }
func (JobNotice) EventType() string     { return TypeJobNotice }

// MaxAgentAnswer is how much of a child's answer a finished notice carries;
// the rest is read with the agent_status tool (or the child's transcript).
const MaxAgentAnswer = 4 << 10

// CapAnswer cuts an answer to MaxAgentAnswer at a character boundary and
// reports whether it cut.
func CapAnswer(s string) (string, bool) {
	if len(s) <= MaxAgentAnswer {
		return s, false
	}
	cut := MaxAgentAnswer
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut], true
}

// agentName is "agent 2 (reviewer)".
func agentName(number int, agent string) string {
	if agent == "" {
		agent = "default"
	}
	return fmt.Sprintf("agent %d (%s)", number, oneLine(agent, 64))
}

// agentHeadline is the one line for a child's end, e.g.
// `agent 2 (reviewer) finished after 3m`.
func agentHeadline(p AgentFinished) string {
	verb := "finished"
	switch {
	case p.Reason == "stopped":
		verb = "was stopped"
	case p.Reason != "" && p.Reason != "completed":
		verb = "ended (" + oneLine(p.Reason, 40) + ")"
	}
	return fmt.Sprintf("%s %s after %s", agentName(p.Number, p.Agent), verb, FmtElapsed(p.RunningFor()))
}

// agentNotice is what the model reads when a child's run ends: the
// headline, the answer (capped) and how to read the rest.
func agentNotice(p AgentFinished) string {
	var b strings.Builder
	b.WriteString("[sub-agent notice] ")
	b.WriteString(agentHeadline(p))
	fmt.Fprintf(&b, " (session %s).", p.Child)
	if strings.TrimSpace(p.Answer) == "" {
		b.WriteString("\nIt gave no answer.")
	} else {
		b.WriteString("\nIts answer:\n")
		b.WriteString(strings.TrimSpace(p.Answer))
	}
	if p.Truncated {
		fmt.Fprintf(&b, "\n… (answer cut at %d bytes: read all of it with agent_status {\"agent\": %d})", MaxAgentAnswer, p.Number)
	}
	b.WriteString("\nUse the answer in your work, or tell the user what it found.")
	return b.String()
}

// agentProgressNotice is a child's progress report for the model.
func agentProgressNotice(p AgentProgress) string {
	return fmt.Sprintf("[sub-agent progress] %s reports: %s\nIt is still working; its answer arrives as a notice.",
		agentName(p.Number, p.Agent), strings.TrimSpace(p.Text))
}

// jobNoticeHeadline is `job 4 (watch) reports: ci is green`.
func jobNoticeHeadline(p JobNotice) string {
	return fmt.Sprintf("job %d (%s) reports: %s", p.ID, oneLine(p.Program, 80), oneLine(p.Text, 200))
}

// AgentInputNotice is what a child's model reads for more input from its
// parent while it works.
func AgentInputNotice(in AgentInput) string {
	return fmt.Sprintf("[message from your parent agent (session %s) while you were working]\n%s", in.Parent, strings.TrimSpace(in.Text))
}
