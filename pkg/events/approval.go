package events

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// TypeApprovalDecided wakes a session whose run waits for a person: an
// approval or a question was decided (docs/APPROVALS.md).
const TypeApprovalDecided = "io.jetway.approval.decided"

// ApprovalDecided names an approval whose decision is recorded. It carries
// no decision on purpose: the decision is the approval's record in the
// control bucket, which only jetway writes, so a decided event published
// by anyone else wakes the session to find the approval still pending.
type ApprovalDecided struct {
	Approval string `json:"approval"`
	// Decision is approve, reject, answer or timeout, for people reading
	// the stream; the runner goes by the record.
	Decision string `json:"decision,omitempty"`
}

func (ApprovalDecided) EventType() string { return TypeApprovalDecided }

// approvalHeadline is the one-line summary of a decided approval.
func approvalHeadline(p ApprovalDecided) string {
	return fmt.Sprintf("approval %s decided: %s", oneLine(p.Approval, 80), oneLine(p.Decision, 40))
}

// TypeApprovalRequested (on jetway.out) says a run waits for a person: a
// call a tools.ask rule held, or an ask_person question.
const TypeApprovalRequested = "io.jetway.approval.requested"

// ApprovalRequested is what a person (or a tool deciding for one) needs
// to decide through the API: POST /v1/sessions/{session}/approvals/{id}.
type ApprovalRequested struct {
	Approval string `json:"approval"`
	Run      string `json:"run"`
	// Kind is "tool" or "question".
	Kind string `json:"kind"`
	// Tool and Input (redacted) are the held call's.
	Tool  string          `json:"tool,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// Question and Choices are the model's question.
	Question  string    `json:"question,omitempty"`
	Choices   []string  `json:"choices,omitempty"`
	Approvers string    `json:"approvers,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
}

func (ApprovalRequested) EventType() string { return TypeApprovalRequested }

// ApprovalRequestedHeadline is the one-liner people are told: what waits,
// and the approval to decide.
func ApprovalRequestedHeadline(a ApprovalRequested) string {
	if a.Kind == "question" {
		return fmt.Sprintf("asks a person: %s (approval %s)", oneLine(a.Question, 160), a.Approval)
	}
	return fmt.Sprintf("waits for a person's approval: %s %s (approval %s)", oneLine(a.Tool, 80), oneLine(PlainJSON(a.Input), 160), a.Approval)
}

// PlainJSON is raw as a person reads it: `>` and `&` as themselves, not
// the \u003e escapes Go's encoder writes for HTML.
func PlainJSON(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return string(raw)
	}
	return strings.TrimSpace(b.String())
}
