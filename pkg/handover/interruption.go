package handover

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// InterruptionKind says how a run stopped without finishing.
type InterruptionKind int

// The kinds of interruption. The zero value is deliberately none of them: an
// interruption whose kind was never set is a bug, and it is neither retryable
// nor storable.
const (
	_ InterruptionKind = iota
	// RunnerRestart: the same runner identity came back — a restart, a crash, a
	// reboot — and found its own run still marked as running.
	RunnerRestart
	// LostContact: another runner found the run's heartbeat stale. Nobody
	// watched the run end; its runner simply stopped being heard from.
	LostContact
	// Timeout: the run went past its time limit and was stopped.
	Timeout
	// Crashed: the run failed and its runner saw it end.
	Crashed
	// GroundStop: a Ground Stop halted it.
	GroundStop
)

var interruptionNames = []string{
	RunnerRestart: "runner_restart",
	LostContact:   "lost_contact",
	Timeout:       "timeout",
	Crashed:       "crashed",
	GroundStop:    "ground_stop",
}

// String returns the kind's stored name, such as "lost_contact".
func (k InterruptionKind) String() string {
	return stringEnum("InterruptionKind", interruptionNames, k)
}

// MarshalText stores the kind as its lowercase name.
func (k InterruptionKind) MarshalText() ([]byte, error) {
	return marshalEnum("interruption kind", interruptionNames, k)
}

// UnmarshalText reads a stored name and refuses any other.
func (k *InterruptionKind) UnmarshalText(text []byte) error {
	v, err := parseEnum[InterruptionKind]("interruption kind", interruptionNames, string(text))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// Interruption is why a run stopped without finishing.
type Interruption struct {
	Kind InterruptionKind `json:"kind"`
	// ExitCode is the exit code of a Crashed run, when one was reported. It is
	// a pointer because "no code" (killed by a signal, say) is different from
	// code 0, and it is nil for every other kind.
	ExitCode *int `json:"exit_code,omitempty"`
}

// CrashedWithCode is a Crashed interruption that reported an exit code.
func CrashedWithCode(code int) Interruption {
	return Interruption{Kind: Crashed, ExitCode: &code}
}

// Retryable reports whether restarting the work could plausibly succeed.
//
// A Ground Stop is excluded deliberately: somebody pulled the handle, and a
// system that restarts through its own kill switch is not one anybody can
// stop. An interruption of no known kind is excluded too, because restarting
// on a misunderstanding is how work gets done twice.
func (i Interruption) Retryable() bool {
	switch i.Kind {
	case RunnerRestart, LostContact, Timeout, Crashed:
		return true
	default:
		return false
	}
}

// ChildMayStillBeRunning reports whether the old run's processes might still
// be going.
//
// This is the difference between an interruption that was observed and one
// that was merely inferred. A timeout or a crash means a runner watched the
// run end. A runner restart or a stale heartbeat means only that nobody can
// see it any more — and the jobs workers that own its commands do not stop
// because a runner did. Recovering in that state is how one interrupted
// publisher becomes two open pull requests, so these interruptions need the
// old run confirmed gone first; see [AuthorizeRecovery].
func (i Interruption) ChildMayStillBeRunning() bool {
	switch i.Kind {
	case RunnerRestart, LostContact:
		return true
	case Timeout, Crashed, GroundStop:
		return false
	default:
		return true // unknown: assume the worst
	}
}

// String says what happened in words that complete the sentence "did not
// finish: …"; the handover brief uses it that way.
func (i Interruption) String() string {
	switch i.Kind {
	case RunnerRestart:
		return "the runner restarted while it was running"
	case LostContact:
		return "contact with its runner was lost"
	case Timeout:
		return "it ran past its timeout"
	case Crashed:
		if i.ExitCode != nil {
			return "it exited with code " + strconv.Itoa(*i.ExitCode)
		}
		return "it exited abnormally"
	case GroundStop:
		return "a Ground Stop halted it"
	default:
		return "it stopped for a reason nobody recorded"
	}
}

// Validate reports whether the interruption can be stored: a known kind, and
// an exit code only on a crash.
func (i Interruption) Validate() error {
	if enumName(interruptionNames, i.Kind) == "" {
		return fmt.Errorf("handover: interruption has no known kind (%d)", int(i.Kind))
	}
	if i.ExitCode != nil && i.Kind != Crashed {
		return fmt.Errorf("handover: interruption %s carries an exit code; only %s does", i.Kind, Crashed)
	}
	return nil
}

// MarshalJSON refuses an interruption that [Interruption.Validate] refuses.
func (i Interruption) MarshalJSON() ([]byte, error) {
	if err := i.Validate(); err != nil {
		return nil, err
	}
	type plain Interruption
	return json.Marshal(plain(i))
}

// UnmarshalJSON reads an interruption and refuses one that
// [Interruption.Validate] refuses, so a corrupt record fails where it is read.
func (i *Interruption) UnmarshalJSON(data []byte) error {
	type plain Interruption
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf("handover: reading interruption: %w", err)
	}
	if err := Interruption(p).Validate(); err != nil {
		return err
	}
	*i = Interruption(p)
	return nil
}

// clone returns a copy that shares no memory with i, so that a stored record
// cannot be changed through a value handed to someone else.
func (i Interruption) clone() Interruption {
	if i.ExitCode != nil {
		code := *i.ExitCode
		i.ExitCode = &code
	}
	return i
}
