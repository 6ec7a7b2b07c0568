package events

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxTokenLen is the longest tenant, session or schedule id accepted.
const MaxTokenLen = 64

// SubjectRoot is the first token of every jetway subject.
const SubjectRoot = "jetway"

// Kind is the second token of a jetway subject: what flows on it.
type Kind string

const (
	// KindEvents: host events into a session from people and other systems.
	KindEvents Kind = "events"
	// KindJobEvents: job exited/overdue from jobs workers only.
	KindJobEvents Kind = "jobevents"
	// KindOut: run output (text deltas, tool use/results, run started/ended).
	KindOut Kind = "out"
	// KindNotify: headlines for people.
	KindNotify Kind = "notify"
	// KindTranscript: a session's recorded turns.
	KindTranscript Kind = "transcript"
	// KindSchedules: a layover's JetStream message schedule; it has a third
	// token, the schedule id, after tenant and session.
	KindSchedules Kind = "schedules"
	// KindAgentEvents: sub-agent events (a child's work, a child's end)
	// from runners only.
	KindAgentEvents Kind = "agentevents"
)

// partitioned reports whether the server's mapping partitions subjects of
// kind k: what runners consume.
func (k Kind) partitioned() bool {
	return k == KindEvents || k == KindJobEvents || k == KindAgentEvents
}

func (k Kind) valid() bool {
	switch k {
	case KindEvents, KindJobEvents, KindOut, KindNotify, KindTranscript, KindSchedules, KindAgentEvents:
		return true
	}
	return false
}

// ValidateToken checks one tenant, session or schedule id against the token
// rule: 1–64 of A-Z a-z 0-9 _ -. The rule keeps a token a single NATS subject
// token (no dots, no wildcards, no spaces) and safe in file names and URLs.
// field names what is checked, so the error can say e.g.
// `session "a.b": may contain only A-Z a-z 0-9 _ -`.
func ValidateToken(field, value string) error {
	switch {
	case value == "":
		return &TokenError{Field: field, Value: value, Rule: "must not be empty"}
	case len(value) > MaxTokenLen:
		return &TokenError{Field: field, Value: value,
			Rule: fmt.Sprintf("must be at most %d characters, is %d", MaxTokenLen, len(value))}
	}
	for i := 0; i < len(value); i++ {
		if !tokenByte(value[i]) {
			return &TokenError{Field: field, Value: value, Rule: "may contain only A-Z a-z 0-9 _ -"}
		}
	}
	return nil
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// Subject is a parsed jetway subject.
type Subject struct {
	Kind    Kind
	Tenant  string
	Session string
	// ID is the schedule id; set only for KindSchedules.
	ID string
	// Partition is the partition number the server's mapping put after
	// the kind (`jetway.<kind>.<n>.<tenant>.<session>`, as a work shard
	// holds it), or -1 when the subject has none.
	Partition int
}

// String renders the subject without any partition prefix, which is the
// subject the message was published on.
func (s Subject) String() string {
	if s.Kind == KindSchedules {
		return SubjectRoot + "." + string(s.Kind) + "." + s.Tenant + "." + s.Session + "." + s.ID
	}
	return SubjectRoot + "." + string(s.Kind) + "." + s.Tenant + "." + s.Session
}

// EventSubject is the `<tenant>/<session>` value of the CloudEvents subject
// attribute of events for this subject's session.
func (s Subject) EventSubject() string { return s.Tenant + "/" + s.Session }

// build validates the tokens and renders the subject.
func build(kind Kind, tenant, session string) (string, error) {
	if err := ValidateToken("tenant", tenant); err != nil {
		return "", err
	}
	if err := ValidateToken("session", session); err != nil {
		return "", err
	}
	return Subject{Kind: kind, Tenant: tenant, Session: session}.String(), nil
}

// EventsSubject is `jetway.events.<tenant>.<session>`.
func EventsSubject(tenant, session string) (string, error) {
	return build(KindEvents, tenant, session)
}

// JobEventsSubject is `jetway.jobevents.<tenant>.<session>`.
func JobEventsSubject(tenant, session string) (string, error) {
	return build(KindJobEvents, tenant, session)
}

// AgentEventsSubject is `jetway.agentevents.<tenant>.<session>`.
func AgentEventsSubject(tenant, session string) (string, error) {
	return build(KindAgentEvents, tenant, session)
}

// OutSubject is `jetway.out.<tenant>.<session>`.
func OutSubject(tenant, session string) (string, error) {
	return build(KindOut, tenant, session)
}

// NotifySubject is `jetway.notify.<tenant>.<session>`.
func NotifySubject(tenant, session string) (string, error) {
	return build(KindNotify, tenant, session)
}

// TranscriptSubject is `jetway.transcript.<tenant>.<session>`.
func TranscriptSubject(tenant, session string) (string, error) {
	return build(KindTranscript, tenant, session)
}

// ScheduleSubject is `jetway.schedules.<tenant>.<session>.<id>`; id follows
// the same token rule as tenant and session.
func ScheduleSubject(tenant, session, id string) (string, error) {
	if _, err := build(KindSchedules, tenant, session); err != nil {
		return "", err
	}
	if err := ValidateToken("schedule id", id); err != nil {
		return "", err
	}
	return Subject{Kind: KindSchedules, Tenant: tenant, Session: session, ID: id}.String(), nil
}

// FiredSubject is `jetway.fired.<partition>.<tenant>.<session>`: where a
// layover's schedule stores the resume it fires (a schedule's target must
// be in the schedule's own stream, JETWAY_SCHEDULES). The session's work
// shard sources it as the session's events subject, so consumers never
// see this subject. The partition is in it because nothing maps what a
// schedule fires: the runner setting the layover puts it there.
func FiredSubject(partition int, tenant, session string) (string, error) {
	if _, err := build(KindEvents, tenant, session); err != nil {
		return "", err
	}
	if partition < 0 {
		return "", fmt.Errorf("fired subject: partition %d: must not be negative", partition)
	}
	return SubjectRoot + ".fired." + strconv.Itoa(partition) + "." + tenant + "." + session, nil
}

// Filter is the wildcard subject that matches every subject of kind, e.g.
// `jetway.events.*.*` or `jetway.schedules.*.*.*`, for stream and consumer
// configuration.
func Filter(kind Kind) string {
	if kind == KindSchedules {
		return SubjectRoot + "." + string(kind) + ".*.*.*"
	}
	return SubjectRoot + "." + string(kind) + ".*.*"
}

// ParseSubject reads a jetway subject. It also accepts the partitioned
// form of the kinds the servers' mapping partitions,
// `jetway.<kind>.<n>.<tenant>.<session>` (as a work shard holds it), and
// reports n as Partition.
func ParseSubject(subject string) (Subject, error) {
	toks := strings.Split(subject, ".")
	s := Subject{Partition: -1}
	if len(toks) < 2 || toks[0] != SubjectRoot {
		return Subject{}, &SubjectError{Subject: subject, Reason: "does not start with " + SubjectRoot + ".<kind>", Err: ErrInvalidSubject}
	}
	s.Kind = Kind(toks[1])
	if !s.Kind.valid() {
		return Subject{}, &SubjectError{Subject: subject, Reason: fmt.Sprintf("unknown kind %q", shorten(toks[1], 40)), Err: ErrInvalidSubject}
	}
	if len(toks) == 5 && s.Kind.partitioned() && allDigits(toks[2]) {
		n, err := strconv.Atoi(toks[2])
		if err != nil {
			return Subject{}, &SubjectError{Subject: subject, Reason: "partition is out of range", Err: ErrInvalidSubject}
		}
		s.Partition = n
		toks = append(toks[:2], toks[3:]...)
	}
	want := 4
	if s.Kind == KindSchedules {
		want = 5
	}
	if len(toks) != want {
		return Subject{}, &SubjectError{Subject: subject,
			Reason: fmt.Sprintf("want %d tokens for %s, have %d", want, s.Kind, len(toks)), Err: ErrInvalidSubject}
	}
	s.Tenant, s.Session = toks[2], toks[3]
	if err := ValidateToken("tenant", s.Tenant); err != nil {
		return Subject{}, &SubjectError{Subject: subject, Err: err}
	}
	if err := ValidateToken("session", s.Session); err != nil {
		return Subject{}, &SubjectError{Subject: subject, Err: err}
	}
	if s.Kind == KindSchedules {
		s.ID = toks[4]
		if err := ValidateToken("schedule id", s.ID); err != nil {
			return Subject{}, &SubjectError{Subject: subject, Err: err}
		}
	}
	return s, nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
