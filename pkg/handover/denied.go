package handover

import "strconv"

// DenialReason says why interrupted work was not restarted.
type DenialReason int

// The reasons for refusing a recovery. The zero value is none of them.
const (
	_ DenialReason = iota
	// NotRetryable: the interruption was not the kind you restart through.
	NotRetryable
	// ChildUnaccountedFor: the old run's processes have not been confirmed
	// gone. Not a failure so much as an unanswered question: somebody has to
	// look before the work is restarted.
	ChildUnaccountedFor
	// ChildStillRunning: a check found the old run's processes still going.
	ChildStillRunning
	// PolicyForbids: the recovery policy is Never.
	PolicyForbids
	// NeedsAHuman: the recovery policy is Manual.
	NeedsAHuman
	// OutOfAttempts: the work has been restarted as often as it may be.
	OutOfAttempts
)

var denialNames = []string{
	NotRetryable:        "not_retryable",
	ChildUnaccountedFor: "child_unaccounted_for",
	ChildStillRunning:   "child_still_running",
	PolicyForbids:       "policy_forbids",
	NeedsAHuman:         "needs_a_human",
	OutOfAttempts:       "out_of_attempts",
}

// String returns the reason's stored name, such as "needs_a_human".
func (r DenialReason) String() string { return stringEnum("DenialReason", denialNames, r) }

// MarshalText stores the reason as its lowercase name.
func (r DenialReason) MarshalText() ([]byte, error) {
	return marshalEnum("denial reason", denialNames, r)
}

// UnmarshalText reads a stored name and refuses any other.
func (r *DenialReason) UnmarshalText(text []byte) error {
	v, err := parseEnum[DenialReason]("denial reason", denialNames, string(text))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// RecoveryDenied is the error [AuthorizeRecovery] returns when it refuses. Its
// message is one sentence meant for a person, short enough to be the headline
// that tells them why a session stopped instead of carrying on.
type RecoveryDenied struct {
	Reason DenialReason `json:"reason"`
	// MaxAttempts is the limit that was reached; set only for OutOfAttempts.
	MaxAttempts int `json:"max_attempts,omitempty"`
}

// Sentinels for errors.Is. They match any refusal with the same reason,
// whatever its limit.
var (
	ErrNotRetryable        = &RecoveryDenied{Reason: NotRetryable}
	ErrChildUnaccountedFor = &RecoveryDenied{Reason: ChildUnaccountedFor}
	ErrChildStillRunning   = &RecoveryDenied{Reason: ChildStillRunning}
	ErrPolicyForbids       = &RecoveryDenied{Reason: PolicyForbids}
	ErrNeedsAHuman         = &RecoveryDenied{Reason: NeedsAHuman}
	ErrOutOfAttempts       = &RecoveryDenied{Reason: OutOfAttempts}
)

// Error returns the refusal as one sentence a person can read as a headline.
func (d *RecoveryDenied) Error() string {
	switch d.Reason {
	case NotRetryable:
		return "the interruption was not retryable"
	case ChildUnaccountedFor:
		return "the previous run's process has not been confirmed gone"
	case ChildStillRunning:
		return "the previous run's process is still running"
	case PolicyForbids:
		return "this agent's `recovery` policy is `never`"
	case NeedsAHuman:
		return "this agent's `recovery` policy is `manual`; a human decides"
	case OutOfAttempts:
		return "already restarted " + strconv.Itoa(d.MaxAttempts) + " time(s); a crash loop is not resilience"
	default:
		return "recovery was refused for a reason nobody recorded"
	}
}

// Is makes the sentinels work with errors.Is: a refusal is the sentinel with
// the same reason.
func (d *RecoveryDenied) Is(target error) bool {
	t, ok := target.(*RecoveryDenied)
	return ok && t.Reason == d.Reason
}
