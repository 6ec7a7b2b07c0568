package handover

import "fmt"

// RecoveryPolicy says whether interrupted work may be restarted without
// asking.
//
// The question it answers is not "can we?" but "is it safe to do the work
// twice?". An agent that reads and reports is harmless to re-run. One that
// opened a pull request is not, and re-running it would open a second.
type RecoveryPolicy int

// The recovery policies. Automatic is the zero value because it is the
// default: most work is safe to retry, and the attempt limit bounds the rest.
const (
	// Automatic restarts on its own, up to the attempt limit.
	Automatic RecoveryPolicy = iota
	// Manual records the interruption and waits for a person to ask.
	Manual
	// Never restarts: the work is interrupted and stays that way.
	Never
)

var policyNames = []string{
	Automatic: "automatic",
	Manual:    "manual",
	Never:     "never",
}

// IsAutomatic reports whether a runner may restart the work on its own.
func (p RecoveryPolicy) IsAutomatic() bool { return p == Automatic }

// String returns the policy's stored name, such as "manual".
func (p RecoveryPolicy) String() string { return stringEnum("RecoveryPolicy", policyNames, p) }

// MarshalText stores the policy as its lowercase name.
func (p RecoveryPolicy) MarshalText() ([]byte, error) {
	return marshalEnum("recovery policy", policyNames, p)
}

// UnmarshalText reads a stored name and refuses any other.
func (p *RecoveryPolicy) UnmarshalText(text []byte) error {
	v, err := ParseRecoveryPolicy(string(text))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// ParseRecoveryPolicy reads "automatic", "manual" or "never", as given in a
// config file or on a command line.
func ParseRecoveryPolicy(s string) (RecoveryPolicy, error) {
	return parseEnum[RecoveryPolicy]("recovery policy", policyNames, s)
}

// DefaultMaxAttempts is how many times interrupted work is restarted before a
// person has to look: enough to ride out a rolling deploy or a flaky machine,
// few enough that a crash loop stops on its own.
const DefaultMaxAttempts = 3

// RecoverySettings is the recovery rule that applies to a session.
type RecoverySettings struct {
	Policy RecoveryPolicy `json:"policy"`
	// MaxAttempts is how many restarts are allowed. Zero disables automatic
	// restarts entirely, which is why the default comes from
	// [DefaultRecoverySettings] rather than from the zero value.
	MaxAttempts int `json:"max_attempts"`
}

// DefaultRecoverySettings is automatic recovery with [DefaultMaxAttempts].
func DefaultRecoverySettings() RecoverySettings {
	return RecoverySettings{Policy: Automatic, MaxAttempts: DefaultMaxAttempts}
}

// Validate reports whether the settings make sense.
func (s RecoverySettings) Validate() error {
	if enumName(policyNames, s.Policy) == "" {
		return fmt.Errorf("handover: recovery settings: unknown policy %d", int(s.Policy))
	}
	if s.MaxAttempts < 0 {
		return fmt.Errorf("handover: recovery settings: max_attempts is %d; it cannot be negative", s.MaxAttempts)
	}
	return nil
}

// RecoveryOverride changes the recovery settings for one session. Fields left
// nil keep what the session would otherwise get; pointers are used because a
// zero limit is a real setting ("never restart on your own"), not an absence.
type RecoveryOverride struct {
	Policy      *RecoveryPolicy `json:"policy,omitempty"`
	MaxAttempts *int            `json:"max_attempts,omitempty"`
}

// With returns s with the fields o sets replaced.
func (s RecoverySettings) With(o RecoveryOverride) RecoverySettings {
	if o.Policy != nil {
		s.Policy = *o.Policy
	}
	if o.MaxAttempts != nil {
		s.MaxAttempts = *o.MaxAttempts
	}
	return s
}

// Authorize is [AuthorizeRecovery] with these settings and the attempts
// recorded so far.
func (s RecoverySettings) Authorize(i Interruption, child ChildState, a Attempts) error {
	return AuthorizeRecovery(s.Policy, i, child, a.Restarts, s.MaxAttempts)
}

// Attempts counts the restarts of one piece of work. It lives in the session
// record, not in a runner, so the limit holds when a different runner takes
// over a crash loop: the loop's count must survive the crashes it counts.
//
// A run that ends normally resets it to the zero value.
type Attempts struct {
	// Restarts is how many times the work has been restarted so far.
	Restarts int `json:"restarts"`
	// Last is the interruption behind the most recent restart, kept so a
	// person looking at a stuck session can see what kept happening.
	Last *Interruption `json:"last,omitempty"`
}

// Restart returns the [Recovery] to hand the new run and the Attempts to store
// in its place. The original run is attempt 1, so the first restart is
// attempt 2.
func (a Attempts) Restart(previous string, i Interruption) (Recovery, Attempts) {
	last := i.clone()
	r := Recovery{Previous: previous, Interruption: i.clone(), Attempt: a.Restarts + 2}
	return r, Attempts{Restarts: a.Restarts + 1, Last: &last}
}

// ChildState is what is known about the processes of the interrupted run —
// for jetway, whether the jobs service confirms its foreground commands are
// gone.
//
// A separate type rather than a bool because the values are not
// interchangeable at a call site: passing the wrong one silently authorises a
// duplicate run, which is the exact failure recovery is meant to avoid. The
// zero value is ChildUnknown for the same reason.
type ChildState int

// The child states.
const (
	// ChildUnknown: nobody has checked, or the check was inconclusive.
	ChildUnknown ChildState = iota
	// ChildGone: the processes are known to be gone — watched exiting, or
	// looked for and not found.
	ChildGone
	// ChildAlive: a check found them still running.
	ChildAlive
)

var childNames = []string{
	ChildUnknown: "unknown",
	ChildGone:    "gone",
	ChildAlive:   "alive",
}

// String returns the state's stored name, such as "gone".
func (c ChildState) String() string { return stringEnum("ChildState", childNames, c) }

// MarshalText stores the state as its lowercase name.
func (c ChildState) MarshalText() ([]byte, error) {
	return marshalEnum("child state", childNames, c)
}

// UnmarshalText reads a stored name and refuses any other.
func (c *ChildState) UnmarshalText(text []byte) error {
	v, err := parseEnum[ChildState]("child state", childNames, string(text))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// AuthorizeRecovery decides whether interrupted work may be restarted, and
// returns nil when it may.
//
// child is what is currently known about the old run's processes. For an
// interruption that was only inferred — a runner restart, a stale heartbeat —
// somebody must have looked before a new run is authorised, because
// recovering alongside work that is still going duplicates it. Processes found
// still running refuse recovery whatever the interruption, since a restart
// beside them duplicates their work just the same.
//
// attemptsSoFar is how many restarts have already been made; maxAttempts is
// the limit, and zero disables automatic restarts entirely.
//
// A refusal is a [*RecoveryDenied]; match it with errors.As, or with errors.Is
// against ErrNotRetryable and its siblings.
func AuthorizeRecovery(policy RecoveryPolicy, i Interruption, child ChildState, attemptsSoFar, maxAttempts int) error {
	if !i.Retryable() {
		return &RecoveryDenied{Reason: NotRetryable}
	}
	if child == ChildAlive {
		return &RecoveryDenied{Reason: ChildStillRunning}
	}
	if i.ChildMayStillBeRunning() && child != ChildGone {
		return &RecoveryDenied{Reason: ChildUnaccountedFor}
	}
	switch policy {
	case Automatic:
	case Never:
		return &RecoveryDenied{Reason: PolicyForbids}
	case Manual:
		return &RecoveryDenied{Reason: NeedsAHuman}
	default:
		return fmt.Errorf("handover: authorizing recovery: unknown recovery policy %d", int(policy))
	}
	if attemptsSoFar >= maxAttempts {
		return &RecoveryDenied{Reason: OutOfAttempts, MaxAttempts: maxAttempts}
	}
	return nil
}
