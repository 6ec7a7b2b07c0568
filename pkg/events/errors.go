package events

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error this package returns for a refused event or
// subject matches exactly one of these with errors.Is, so a caller can count
// and answer refusals by kind without parsing messages; the typed errors below
// carry the detail.
var (
	// ErrInvalidToken: a tenant, session or schedule id breaks the token rule.
	ErrInvalidToken = errors.New("invalid subject token")
	// ErrInvalidSubject: a NATS subject is not one of jetway's subjects.
	ErrInvalidSubject = errors.New("invalid subject")
	// ErrTooLarge: the message is over the decoder's size limit.
	ErrTooLarge = errors.New("event too large")
	// ErrMalformed: the message cannot be read as a CloudEvent at all
	// (broken JSON, an unsupported content mode).
	ErrMalformed = errors.New("malformed event")
	// ErrMissingAttribute: a required CloudEvents attribute is absent or empty.
	ErrMissingAttribute = errors.New("missing attribute")
	// ErrInvalidAttribute: an attribute is present but its value is unusable.
	ErrInvalidAttribute = errors.New("invalid attribute")
	// ErrSpecVersion: the event is not CloudEvents 1.0.
	ErrSpecVersion = errors.New("unsupported specversion")
	// ErrSubjectMismatch: the event's subject attribute names another
	// tenant/session than the NATS subject it arrived on.
	ErrSubjectMismatch = errors.New("subject attribute does not match the NATS subject")
	// ErrInvalidData: the data does not fit the event's type.
	ErrInvalidData = errors.New("invalid data")
	// ErrForgedJobEvent: an io.jetway.job.* event arrived on
	// jetway.events.… instead of jetway.jobevents.…; only jobs workers may
	// publish job events, so this one is refused (and should be recorded).
	ErrForgedJobEvent = errors.New("job event outside the jobevents subject")
	// ErrForgedAgentEvent: an io.jetway.agent.* event arrived outside
	// jetway.agentevents.…; only runners publish sub-agent events.
	ErrForgedAgentEvent = errors.New("sub-agent event outside the agentevents subject")
)

// TokenError says which token rule a tenant, session or schedule id broke.
// Its message reads like `session "a.b": may contain only A-Z a-z 0-9 _ -`.
type TokenError struct {
	Field string // "tenant", "session", "schedule id", …
	Value string
	Rule  string
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("%s %q: %s", e.Field, shorten(e.Value, 80), e.Rule)
}

// Unwrap makes errors.Is(err, ErrInvalidToken) hold.
func (e *TokenError) Unwrap() error { return ErrInvalidToken }

// SubjectError says why a NATS subject is not a jetway subject. Err is
// ErrInvalidSubject, or a *TokenError when only a token is at fault.
type SubjectError struct {
	Subject string
	Reason  string
	Err     error
}

func (e *SubjectError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("subject %q: %v", shorten(e.Subject, 120), e.Err)
	}
	return fmt.Sprintf("subject %q: %s", shorten(e.Subject, 120), e.Reason)
}

// Unwrap returns the cause, and ErrInvalidSubject in every case.
func (e *SubjectError) Unwrap() []error {
	if e.Err == nil || e.Err == ErrInvalidSubject {
		return []error{ErrInvalidSubject}
	}
	return []error{ErrInvalidSubject, e.Err}
}

// AttributeError names the CloudEvents attribute that made an event
// unusable. Err is one of ErrMissingAttribute, ErrInvalidAttribute,
// ErrSpecVersion or ErrSubjectMismatch.
type AttributeError struct {
	Attribute string
	Value     string // as received; empty when missing
	Reason    string
	Err       error
}

func (e *AttributeError) Error() string {
	switch {
	case e.Err == ErrMissingAttribute:
		return fmt.Sprintf("cloudevent attribute %s: missing", e.Attribute)
	case e.Reason == "":
		return fmt.Sprintf("cloudevent attribute %s %q: %v", e.Attribute, shorten(e.Value, 80), e.Err)
	default:
		return fmt.Sprintf("cloudevent attribute %s %q: %s", e.Attribute, shorten(e.Value, 80), e.Reason)
	}
}

func (e *AttributeError) Unwrap() error { return e.Err }

// DataError says why an event's data does not fit its type, e.g. an
// io.jetway.input without text. It matches ErrInvalidData, and also the
// underlying cause (a *json.SyntaxError, ErrMalformed for broken JSON).
type DataError struct {
	Type   string
	Reason string
	Err    error // the cause, may be nil
}

func (e *DataError) Error() string {
	if e.Err != nil && e.Err != ErrMalformed {
		return fmt.Sprintf("%s data: %s: %v", e.Type, e.Reason, e.Err)
	}
	return fmt.Sprintf("%s data: %s", e.Type, e.Reason)
}

func (e *DataError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalidData}
	}
	return []error{ErrInvalidData, e.Err}
}

// SizeError reports a message over the decoder's limit.
type SizeError struct {
	Size, Limit int
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("event of %d bytes is over the %d byte limit", e.Size, e.Limit)
}

func (e *SizeError) Unwrap() error { return ErrTooLarge }

// shorten keeps error messages one readable line even for hostile input.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
