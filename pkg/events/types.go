package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Event types of the public contract.
const (
	TypeInput      = "io.jetway.input"
	TypeJobExited  = "io.jetway.job.exited"
	TypeJobOverdue = "io.jetway.job.overdue"
	TypeSteer      = "io.jetway.steer"
	TypeResume     = "io.jetway.resume"

	// JobTypePrefix starts every job event type. Events of these types are
	// trusted only from jetway.jobevents.…, see ErrForgedJobEvent.
	JobTypePrefix = "io.jetway.job."
)

// ContentTypeJSON is the datacontenttype of every jetway-defined event.
const ContentTypeJSON = "application/json"

// IsJobType reports whether typ is a job event type (io.jetway.job.*),
// known to this version or not.
func IsJobType(typ string) bool { return strings.HasPrefix(typ, JobTypePrefix) }

// Payload is the typed data of a host event: one of Input, JobExited,
// JobOverdue, Steer, Resume or External.
type Payload interface {
	// EventType is the CloudEvents type the payload travels as.
	EventType() string
}

// Input is a line a person typed into the session.
type Input struct {
	Text string `json:"text"`
}

// JobStatus is how a background job ended.
type JobStatus string

// Job end statuses. Only StatusExited carries a meaningful exit status.
const (
	StatusExited   JobStatus = "exited"    // the command ended by itself (any exit code)
	StatusKilled   JobStatus = "killed"    // killed on request or when its session closed
	StatusTimedOut JobStatus = "timed_out" // it ran past its time limit and was killed
	StatusFailed   JobStatus = "failed"    // it could not be waited for; its end is unknown
	StatusLost     JobStatus = "lost"      // its worker went away; whether it finished is unknown
)

func (s JobStatus) valid() bool {
	switch s {
	case StatusExited, StatusKilled, StatusTimedOut, StatusFailed, StatusLost:
		return true
	}
	return false
}

// TaskRef ties a job notice to a function task of the jobs service (a watch
// loop, a hook) that may report more than once. Task is a session-scoped task
// id and Seq grows with each notice the task leaves, so a newer notice of the
// same task supersedes an older one that has not reached the model yet: a
// runner holding both delivers only the newer. Both are omitted for plain command jobs, whose
// one notice supersedes nothing.
type TaskRef struct {
	Task string `json:"task,omitempty"`
	Seq  uint64 `json:"seq,omitempty"`
}

// Supersedes reports whether r replaces older: same task, higher seq.
func (r TaskRef) Supersedes(older TaskRef) bool {
	return r.Task != "" && r.Task == older.Task && r.Seq > older.Seq
}

// JobExited says a background job ended. Status tells how; a publisher that
// leaves it out means StatusExited.
type JobExited struct {
	ID           uint64    `json:"id"`
	Program      string    `json:"program"`
	ExitStatus   int       `json:"exit_status"`
	RunningForMS int64     `json:"running_for_ms"`
	Tail         string    `json:"tail"`
	Status       JobStatus `json:"status"`
	TaskRef
}

// RunningFor is how long the job ran.
func (j JobExited) RunningFor() time.Duration { return msDuration(j.RunningForMS) }

// JobOverdue says a background job is still running past the time it was
// expected to take.
type JobOverdue struct {
	ID           uint64 `json:"id"`
	Program      string `json:"program"`
	RunningForMS int64  `json:"running_for_ms"`
	Tail         string `json:"tail"`
	TaskRef
}

// RunningFor is how long the job has been running.
func (j JobOverdue) RunningFor() time.Duration { return msDuration(j.RunningForMS) }

// Steer is a person redirecting work already under way.
type Steer struct {
	Note string `json:"note"`
}

// Resume picks up work an earlier run set down on purpose (a layover); a
// JetStream message schedule fires it onto the session's events subject.
type Resume struct {
	BookedBy   string    `json:"booked_by"`
	WaitingFor string    `json:"waiting_for"`
	BookedAt   time.Time `json:"booked_at"`
	// Checks is how many times the work was picked up and found nothing yet.
	Checks uint32 `json:"checks"`
}

// External is any event type jetway does not define. It is never dropped:
// the model reads it as a notice naming its type, source and data.
type External struct {
	Type            string
	Source          string
	DataContentType string // empty when the event had none
	Data            []byte
}

func (Input) EventType() string      { return TypeInput }
func (JobExited) EventType() string  { return TypeJobExited }
func (JobOverdue) EventType() string { return TypeJobOverdue }
func (Steer) EventType() string      { return TypeSteer }
func (Resume) EventType() string     { return TypeResume }
func (e External) EventType() string { return e.Type }

func msDuration(ms int64) time.Duration {
	const maxMS = int64(1<<63-1) / int64(time.Millisecond)
	if ms > maxMS {
		ms = maxMS
	}
	return time.Duration(ms) * time.Millisecond
}

// isJSONMedia reports whether a datacontenttype denotes JSON data; an empty
// one does too (CloudEvents' JSON format default).
func isJSONMedia(ct string) bool {
	if strings.TrimSpace(ct) == "" {
		return true
	}
	mt, _, err := parseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// decodePayload turns data of a jetway-defined type into its payload and
// checks it against the contract; other types become External.
func decodePayload(typ, source, contentType string, data []byte) (Payload, error) {
	switch typ {
	case TypeInput, TypeJobExited, TypeJobOverdue, TypeSteer, TypeResume,
		TypeAgentInput, TypeAgentFinished, TypeAgentProgress, TypeAgentStop, TypeJobNotice, TypeApprovalDecided:
	default:
		return External{Type: typ, Source: source, DataContentType: contentType, Data: bytes.Clone(data)}, nil
	}
	if !isJSONMedia(contentType) {
		return nil, &DataError{Type: typ, Reason: fmt.Sprintf("datacontenttype %q is not JSON", shorten(contentType, 60))}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &DataError{Type: typ, Reason: "no data"}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, dataJSONError(typ, "not a JSON object", err)
	}
	if fields == nil {
		return nil, &DataError{Type: typ, Reason: "not a JSON object (null)"}
	}
	var p Payload
	var err error
	switch typ {
	case TypeInput:
		var v Input
		if text, ok := onlyString(fields, "text"); ok {
			v.Text = text // the common case, without a second parse of data
		} else {
			err = decodeFields(typ, data, &v, fields, "text")
		}
		if err == nil {
			err = checkInputText(typ, v.Text)
		}
		p = v
	case TypeSteer:
		var v Steer
		err = decodeFields(typ, data, &v, fields, "note")
		if err == nil && strings.TrimSpace(v.Note) == "" {
			err = &DataError{Type: typ, Reason: "note is empty"}
		}
		p = v
	case TypeJobExited:
		var v JobExited
		err = decodeFields(typ, data, &v, fields, "id", "program")
		if err == nil {
			if v.Status == "" {
				v.Status = StatusExited
			}
			err = checkJob(typ, v.Program, v.RunningForMS, v.TaskRef)
		}
		if err == nil && !v.Status.valid() {
			err = &DataError{Type: typ, Reason: fmt.Sprintf("status %q is not one of exited, killed, timed_out, failed, lost", shorten(string(v.Status), 40))}
		}
		p = v
	case TypeJobOverdue:
		var v JobOverdue
		err = decodeFields(typ, data, &v, fields, "id", "program")
		if err == nil {
			err = checkJob(typ, v.Program, v.RunningForMS, v.TaskRef)
		}
		p = v
	case TypeResume:
		var v Resume
		err = decodeFields(typ, data, &v, fields, "booked_by", "booked_at")
		switch {
		case err != nil:
		case strings.TrimSpace(v.BookedBy) == "":
			err = &DataError{Type: typ, Reason: "booked_by is empty"}
		case v.BookedAt.IsZero():
			err = &DataError{Type: typ, Reason: "booked_at is the zero time"}
		}
		p = v
	case TypeAgentInput:
		var v AgentInput
		err = decodeFields(typ, data, &v, fields, "text", "parent")
		if err == nil && strings.TrimSpace(v.Text) == "" {
			err = &DataError{Type: typ, Reason: "text is empty"}
		}
		p = v
	case TypeAgentFinished:
		var v AgentFinished
		err = decodeFields(typ, data, &v, fields, "child", "run")
		if err == nil && v.RunningForMS < 0 {
			err = &DataError{Type: typ, Reason: "running_for_ms is negative"}
		}
		p = v
	case TypeAgentProgress:
		var v AgentProgress
		err = decodeFields(typ, data, &v, fields, "child", "text")
		p = v
	case TypeAgentStop:
		var v AgentStop
		err = decodeFields(typ, data, &v, fields, "parent")
		p = v
	case TypeApprovalDecided:
		var v ApprovalDecided
		err = decodeFields(typ, data, &v, fields, "approval")
		if err == nil && v.Approval == "" {
			err = &DataError{Type: typ, Reason: "approval is empty"}
		}
		p = v
	case TypeJobNotice:
		var v JobNotice
		err = decodeFields(typ, data, &v, fields, "id", "program", "text")
		if err == nil {
			err = checkJob(typ, v.Program, v.RunningForMS, v.TaskRef)
		}
		p = v
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// decodeFields unmarshals data into v after checking that every required
// field is present and not null; extra fields are ignored (the contract
// grows by adding).
func decodeFields(typ string, data []byte, v any, fields map[string]json.RawMessage, required ...string) error {
	for _, name := range required {
		raw, ok := fields[name]
		if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return &DataError{Type: typ, Reason: "missing " + name}
		}
	}
	if err := json.Unmarshal(data, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return &DataError{Type: typ, Reason: fmt.Sprintf("%s: want %s, have JSON %s", te.Field, te.Type, te.Value)}
		}
		return dataJSONError(typ, "does not fit the type", err)
	}
	return nil
}

// onlyString is the string field name of an object whose fields are
// fields, read from its own value alone, when that is sure to be what
// decodeFields would read from the whole object: the field is a JSON string
// and no other key of the object matches name case-insensitively (as
// encoding/json matches struct fields). ok is false for anything else, which
// decodeFields then reads, and refuses, as it always has.
func onlyString(fields map[string]json.RawMessage, name string) (string, bool) {
	raw, ok := fields[name]
	if !ok {
		return "", false
	}
	for k := range fields {
		if k != name && strings.EqualFold(k, name) {
			return "", false
		}
	}
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		// Nothing to unescape or replace: the string is its bytes (fields
		// came from a successful decode, so raw is a well-formed string).
		return string(inner), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// checkInputText is the rule an input's text keeps, decoded or encoded.
func checkInputText(typ, text string) error {
	if strings.TrimSpace(text) == "" {
		return &DataError{Type: typ, Reason: "text is empty"}
	}
	return nil
}

func checkJob(typ, program string, runningForMS int64, ref TaskRef) error {
	switch {
	case strings.TrimSpace(program) == "":
		return &DataError{Type: typ, Reason: "program is empty"}
	case runningForMS < 0:
		return &DataError{Type: typ, Reason: "running_for_ms is negative"}
	case ref.Seq != 0 && ref.Task == "":
		return &DataError{Type: typ, Reason: "seq without task"}
	}
	return nil
}

func dataJSONError(typ, reason string, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &DataError{Type: typ, Reason: "malformed JSON: " + se.Error(), Err: ErrMalformed}
	}
	return &DataError{Type: typ, Reason: reason, Err: err}
}

// encodePayload renders a payload as an event's data, refusing what
// decodePayload would refuse so jetway never publishes an event it would
// not accept.
func encodePayload(p Payload) (contentType string, data []byte, err error) {
	if ext, ok := p.(External); ok {
		return ext.DataContentType, bytes.Clone(ext.Data), nil
	}
	if p == nil {
		return "", nil, errors.New("nil payload")
	}
	data, err = json.Marshal(p)
	if err != nil {
		return "", nil, fmt.Errorf("encode %s data: %w", p.EventType(), err)
	}
	if in, ok := p.(Input); ok {
		// {"text":…} decodes back to its text: only the text's own rule
		// can refuse it, and the text is at hand (the publisher's hot path).
		if err := checkInputText(in.EventType(), in.Text); err != nil {
			return "", nil, err
		}
		return ContentTypeJSON, data, nil
	}
	if _, err := decodePayload(p.EventType(), "", ContentTypeJSON, data); err != nil {
		return "", nil, err
	}
	return ContentTypeJSON, data, nil
}
