package events

import "fmt"

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
