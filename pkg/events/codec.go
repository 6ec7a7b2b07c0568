package events

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// SpecVersion is the only CloudEvents version accepted.
const SpecVersion = event.CloudEventsVersionV1

// DefaultMaxSize is the decoder's size limit when its MaxSize is 0: 1 MiB,
// NATS's default max_payload.
const DefaultMaxSize = 1 << 20

// Header names of the NATS binding.
const (
	// HeaderPrefix starts the header of each attribute and extension in
	// binary mode (`ce-id`, `ce-traceparent`, …).
	HeaderPrefix = "ce-"
	// HeaderContentType carries datacontenttype in binary mode, and
	// application/cloudevents+json in structured mode.
	HeaderContentType = "Content-Type"
	// HeaderMsgID is JetStream's dedupe header; Encode sets it to the CE id.
	HeaderMsgID = "Nats-Msg-Id"
	// ContentTypeStructured marks a structured-mode (whole event as JSON) message.
	ContentTypeStructured = "application/cloudevents+json"
)

// Distributed-tracing extension names (W3C trace context).
const (
	ExtTraceParent = "traceparent"
	ExtTraceState  = "tracestate"
)

// ExtAgent is the extension that binds a session to an agent profile by
// name (docs/PROFILES.md): what the input body's "agent" field sets, for
// publishers that send CloudEvents themselves (NATS, CE over HTTP).
const ExtAgent = "jetwayagent"

// HostEvent is an accepted event for one session: the CloudEvent as
// received plus what the runner and notifier need from it, already checked
// against the contract.
type HostEvent struct {
	ID      string
	Type    string
	Source  string
	Time    time.Time // zero when the publisher sent none
	Tenant  string
	Session string
	// FromJobs is true when the event arrived on jetway.jobevents.…, the
	// subject only jobs workers may publish on.
	FromJobs bool
	// FromRunner is true when the event arrived on jetway.agentevents.…,
	// the subject only runners may publish on (sub-agent events).
	FromRunner bool
	// Payload is Input, JobExited, JobOverdue, Steer, Resume or External.
	Payload Payload
	// Agent is the agent profile the event binds its session to (the
	// jetwayagent extension); "" keeps the session's binding.
	Agent string
	// Event is the CloudEvent itself, extensions (traceparent …) included.
	Event event.Event
}

// Headline is the one line for a person, see Headline.
func (h HostEvent) Headline() (string, bool) { return Headline(h.Payload) }

// Notice is the text for the model, see Notice.
func (h HostEvent) Notice() (string, bool) { return Notice(h.Payload) }

// TraceContext returns ctx carrying the remote span context of the event's
// traceparent/tracestate extensions, so the next hop's span joins the trace.
func (h HostEvent) TraceContext(ctx context.Context) context.Context {
	return ExtractTrace(ctx, h.Event)
}

// New builds the CloudEvent that carries p into tenant/session: specversion
// 1.0, a fresh id, the current time, datacontenttype application/json (an
// External keeps its own), subject `<tenant>/<session>`. source names the
// publisher (e.g. `jetway/dispatcher`). The payload is checked as a decoder
// would check it, so nothing jetway publishes is refused on the way in.
func New(tenant, session, source string, p Payload) (event.Event, error) {
	if err := ValidateToken("tenant", tenant); err != nil {
		return event.Event{}, err
	}
	if err := ValidateToken("session", session); err != nil {
		return event.Event{}, err
	}
	if p == nil {
		return event.Event{}, fmt.Errorf("new event: %w", &DataError{Type: "event", Reason: "nil payload"})
	}
	typ := p.EventType()
	if strings.TrimSpace(typ) == "" {
		return event.Event{}, &AttributeError{Attribute: "type", Err: ErrMissingAttribute}
	}
	if strings.TrimSpace(source) == "" {
		return event.Event{}, &AttributeError{Attribute: "source", Err: ErrMissingAttribute}
	}
	ct, data, err := encodePayload(p)
	if err != nil {
		return event.Event{}, fmt.Errorf("new %s event: %w", typ, err)
	}
	e := event.New(SpecVersion)
	e.SetID(NewID())
	if err := e.Context.SetSource(source); err != nil {
		return event.Event{}, &AttributeError{Attribute: "source", Value: source, Reason: err.Error(), Err: ErrInvalidAttribute}
	}
	e.SetType(typ)
	e.SetTime(time.Now().UTC())
	e.SetSubject(tenant + "/" + session)
	if ct != "" {
		e.SetDataContentType(ct)
	}
	if len(data) > 0 {
		e.DataEncoded = data
	}
	if err := e.Validate(); err != nil {
		return event.Event{}, validationError(err)
	}
	return e, nil
}

// NewID returns a random (version 4) UUID, the form CE ids take here.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// InjectTrace sets e's traceparent (and tracestate) extensions from the span
// context in ctx. Without a valid span context in ctx it leaves e as it is,
// so an event relayed without a trace keeps the one it came with.
func InjectTrace(ctx context.Context, e *event.Event) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	for _, k := range []string{ExtTraceParent, ExtTraceState} {
		if v := c.Get(k); v != "" {
			e.SetExtension(k, v)
		} else {
			delete(e.Extensions(), k)
		}
	}
}

// ExtractTrace returns ctx with the remote span context carried in e's
// traceparent/tracestate extensions; ctx unchanged when there is none.
func ExtractTrace(ctx context.Context, e event.Event) context.Context {
	c := propagation.MapCarrier{}
	for _, k := range []string{ExtTraceParent, ExtTraceState} {
		var v string
		if err := e.ExtensionAs(k, &v); err == nil && v != "" {
			c.Set(k, v)
		}
	}
	if c.Get(ExtTraceParent) == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, c)
}

// Encode renders e as a NATS message on subject in binary content mode: a
// `ce-` header per attribute and extension (values percent-encoded as the
// CloudEvents HTTP and NATS bindings describe), datacontenttype as
// Content-Type, the data as the body, and Nats-Msg-Id set to the CE id so
// JetStream drops a republished duplicate. The trace context of ctx, if any,
// is carried as the traceparent/tracestate extensions; e itself is not
// changed.
func Encode(ctx context.Context, subject string, e event.Event) (*nats.Msg, error) {
	if subject == "" {
		return nil, fmt.Errorf("encode event: %w", &SubjectError{Subject: subject, Reason: "empty subject", Err: ErrInvalidSubject})
	}
	if e.Context == nil {
		return nil, fmt.Errorf("encode event: %w", &AttributeError{Attribute: "specversion", Err: ErrMissingAttribute})
	}
	if v := e.SpecVersion(); v != SpecVersion {
		return nil, fmt.Errorf("encode event: %w", &AttributeError{Attribute: "specversion", Value: v, Reason: "only 1.0 is supported", Err: ErrSpecVersion})
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("encode event: %w", validationError(err))
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		// Injecting writes the extensions, which e shares with the
		// caller's event: the copy is made only when there is a trace to
		// inject (every output event of a run went through a clone).
		e = e.Clone()
		InjectTrace(ctx, &e)
	}

	h := nats.Header{}
	set := func(name, value string) { h.Set(HeaderPrefix+name, percentEncode(value)) }
	set("specversion", SpecVersion)
	set("id", e.ID())
	set("source", e.Source())
	set("type", e.Type())
	if s := e.Subject(); s != "" {
		set("subject", s)
	}
	if t := e.Time(); !t.IsZero() {
		set("time", types.FormatTime(t))
	}
	if s := e.DataSchema(); s != "" {
		set("dataschema", s)
	}
	if ct := e.DataContentType(); ct != "" {
		h.Set(HeaderContentType, ct)
	}
	for name, v := range e.Extensions() {
		s, err := types.Format(v)
		if err != nil {
			return nil, fmt.Errorf("encode event: %w", &AttributeError{Attribute: name, Reason: err.Error(), Err: ErrInvalidAttribute})
		}
		set(name, s)
	}
	h.Set(HeaderMsgID, e.ID())
	return &nats.Msg{Subject: subject, Header: h, Data: e.Data()}, nil
}

// Decoder reads host events from NATS messages. The zero value is ready to
// use with the default limit.
type Decoder struct {
	// MaxSize limits a message's size (headers and body) in bytes; 0 means
	// DefaultMaxSize, a negative value means no limit.
	MaxSize int
}

// Decode reads and checks one message with the default limit, see
// Decoder.Decode.
func Decode(subject string, h nats.Header, data []byte) (HostEvent, error) {
	return Decoder{}.Decode(subject, h, data)
}

// DecodeMsg is Decode for a *nats.Msg.
func DecodeMsg(m *nats.Msg) (HostEvent, error) { return Decoder{}.DecodeMsg(m) }

// DecodeMsg is Decode for a *nats.Msg.
func (d Decoder) DecodeMsg(m *nats.Msg) (HostEvent, error) {
	return d.Decode(m.Subject, m.Header, m.Data)
}

// Decode reads the event in a message that arrived on subject (a
// jetway.events.… or jetway.jobevents.… subject, partition prefix allowed)
// and checks it against the contract, see FromEvent. Binary mode is a message
// with a ce-specversion header; anything else is structured mode, the whole
// event as JSON in the body — with Content-Type application/cloudevents+json,
// or with no Content-Type at all, as sdk-go's NATS sender sends it.
func (d Decoder) Decode(subject string, h nats.Header, data []byte) (HostEvent, error) {
	limit := d.MaxSize
	if limit == 0 {
		limit = DefaultMaxSize
	}
	if size := messageSize(h, data); limit > 0 && size > limit {
		return HostEvent{}, &SizeError{Size: size, Limit: limit}
	}
	sub, err := eventSubject(subject)
	if err != nil {
		return HostEvent{}, err
	}
	e, err := ReadEvent(h, data)
	if err != nil {
		return HostEvent{}, err
	}
	return fromEvent(sub, e, true)
}

// ReadEvent reads the CloudEvent in a NATS message (binary or structured
// mode) without checking it against jetway's contract, for relays and tools.
func ReadEvent(h nats.Header, data []byte) (event.Event, error) {
	if _, ok := headerValues(h, HeaderPrefix+"specversion"); ok {
		return readBinary(h, data)
	}
	ct, _ := headerValues(h, HeaderContentType)
	switch {
	case len(ct) == 0:
		return readStructured(data)
	case len(ct) > 1:
		return event.Event{}, &AttributeError{Attribute: "datacontenttype", Value: strings.Join(ct, ", "), Reason: "Content-Type given more than once", Err: ErrInvalidAttribute}
	}
	mt, _, err := mime.ParseMediaType(ct[0])
	switch {
	case err == nil && mt == ContentTypeStructured:
		return readStructured(data)
	case err == nil && mt == "application/cloudevents-batch+json":
		return event.Event{}, fmt.Errorf("%w: batched CloudEvents are not accepted, send one event per message", ErrMalformed)
	}
	return event.Event{}, &AttributeError{Attribute: "specversion", Err: ErrMissingAttribute}
}

// FromEvent checks a CloudEvent that arrived on (or is about to be
// published to) subject against the contract and returns the host event:
// specversion 1.0; id, source and type present; a subject attribute, when
// present, equal to the NATS subject's `<tenant>/<session>` (when absent it is
// filled in); io.jetway.job.* only on jetway.jobevents.…; data that fits the
// type. Any type jetway does not define is accepted as External.
func FromEvent(subject string, e event.Event) (HostEvent, error) {
	sub, err := eventSubject(subject)
	if err != nil {
		return HostEvent{}, err
	}
	return fromEvent(sub, e, false)
}

func eventSubject(subject string) (Subject, error) {
	sub, err := ParseSubject(subject)
	if err != nil {
		return Subject{}, err
	}
	if sub.Kind != KindEvents && sub.Kind != KindJobEvents && sub.Kind != KindAgentEvents {
		return Subject{}, &SubjectError{Subject: subject,
			Reason: "host events travel only on jetway.events.…, jetway.jobevents.… and jetway.agentevents.…", Err: ErrInvalidSubject}
	}
	return sub, nil
}

// fromEvent is FromEvent on a parsed subject. read says e is what
// ReadEvent returned, which validated it as it built it: it is not
// validated twice.
func fromEvent(sub Subject, e event.Event, read bool) (HostEvent, error) {
	if e.Context == nil {
		return HostEvent{}, &AttributeError{Attribute: "specversion", Err: ErrMissingAttribute}
	}
	if v := e.SpecVersion(); v != SpecVersion {
		return HostEvent{}, &AttributeError{Attribute: "specversion", Value: v, Reason: "only 1.0 is supported", Err: ErrSpecVersion}
	}
	for _, a := range [...]struct{ name, value string }{{"id", e.ID()}, {"source", e.Source()}, {"type", e.Type()}} {
		if strings.TrimSpace(a.value) == "" {
			return HostEvent{}, &AttributeError{Attribute: a.name, Err: ErrMissingAttribute}
		}
	}
	if !read {
		if err := e.Validate(); err != nil {
			return HostEvent{}, validationError(err)
		}
	}
	want := sub.EventSubject()
	switch s := e.Subject(); s {
	case want:
	case "":
		e = e.Clone()
		e.SetSubject(want)
	default:
		return HostEvent{}, &AttributeError{Attribute: "subject", Value: s,
			Reason: fmt.Sprintf("the NATS subject %s is for %s", sub, want), Err: ErrSubjectMismatch}
	}
	fromJobs := sub.Kind == KindJobEvents
	if IsJobType(e.Type()) && !fromJobs {
		return HostEvent{}, fmt.Errorf("%w: %s on %s (only jobs workers publish job events, on %s)",
			ErrForgedJobEvent, e.Type(), sub, Subject{Kind: KindJobEvents, Tenant: sub.Tenant, Session: sub.Session})
	}
	fromRunner := sub.Kind == KindAgentEvents
	if IsAgentType(e.Type()) && !fromRunner {
		return HostEvent{}, fmt.Errorf("%w: %s on %s (only runners publish sub-agent events, on %s)",
			ErrForgedAgentEvent, e.Type(), sub, Subject{Kind: KindAgentEvents, Tenant: sub.Tenant, Session: sub.Session})
	}
	p, err := decodePayload(e.Type(), e.Source(), e.DataContentType(), e.Data())
	if err != nil {
		return HostEvent{}, err
	}
	agent, err := agentOf(e)
	if err != nil {
		return HostEvent{}, err
	}
	return HostEvent{
		Agent:      agent,
		ID:         e.ID(),
		Type:       e.Type(),
		Source:     e.Source(),
		Time:       e.Time(),
		Tenant:     sub.Tenant,
		Session:    sub.Session,
		FromJobs:   fromJobs,
		FromRunner: fromRunner,
		Payload:    p,
		Event:      e,
	}, nil
}

// validationError turns sdk-go's per-attribute validation map into an
// AttributeError naming the first attribute (in name order) at fault.
func validationError(err error) error {
	ve, ok := err.(event.ValidationError)
	if !ok || len(ve) == 0 {
		return &AttributeError{Attribute: "event", Reason: err.Error(), Err: ErrInvalidAttribute}
	}
	names := make([]string, 0, len(ve))
	for n := range ve {
		names = append(names, n)
	}
	slices.Sort(names)
	return &AttributeError{Attribute: names[0], Reason: ve[names[0]].Error(), Err: ErrInvalidAttribute}
}

func messageSize(h nats.Header, data []byte) int {
	n := len(data)
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // "k: v\r\n"
		}
	}
	return n
}

// headerValues finds a header regardless of case: nats.Header keys are case
// sensitive, but the bindings define header names case-insensitively. All
// values of all spellings are returned.
func headerValues(h nats.Header, name string) ([]string, bool) {
	var out []string
	found := false
	for k, vs := range h {
		if strings.EqualFold(k, name) {
			found = true
			out = append(out, vs...)
		}
	}
	return out, found
}

// readBinary reads a binary-mode message: ce- headers and the body as data.
func readBinary(h nats.Header, data []byte) (event.Event, error) {
	attrs := map[string]string{}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var contentType []string
	for _, k := range keys {
		if strings.EqualFold(k, HeaderContentType) {
			contentType = append(contentType, h[k]...)
			continue
		}
		if len(k) < len(HeaderPrefix) || !strings.EqualFold(k[:len(HeaderPrefix)], HeaderPrefix) {
			continue
		}
		name := strings.ToLower(k[len(HeaderPrefix):])
		vs := h[k]
		if _, dup := attrs[name]; dup || len(vs) != 1 {
			return event.Event{}, &AttributeError{Attribute: name, Value: strings.Join(vs, ", "), Reason: "given more than once", Err: ErrInvalidAttribute}
		}
		v := percentDecode(vs[0])
		if !utf8.ValidString(v) {
			return event.Event{}, &AttributeError{Attribute: name, Value: v, Reason: "not UTF-8 after percent-decoding", Err: ErrInvalidAttribute}
		}
		attrs[name] = v
	}
	if len(contentType) > 1 {
		return event.Event{}, &AttributeError{Attribute: "datacontenttype", Value: strings.Join(contentType, ", "), Reason: "Content-Type given more than once", Err: ErrInvalidAttribute}
	}
	if len(contentType) == 1 {
		// Content-Type is the binding's place for datacontenttype; a
		// ce-datacontenttype header is only a fallback.
		attrs["datacontenttype"] = contentType[0]
	}
	var body []byte
	if len(data) > 0 {
		body = bytes.Clone(data)
	}
	return buildEvent(attrs, nil, body, false)
}

// readStructured reads a structured-mode body: the whole event as a JSON
// object, data as "data" (or "data_base64" for bytes).
func readStructured(body []byte) (event.Event, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return event.Event{}, fmt.Errorf("%w: structured event is not a JSON object: %v", ErrMalformed, err)
	}
	if fields == nil {
		return event.Event{}, fmt.Errorf("%w: structured event is JSON null", ErrMalformed)
	}
	attrs := map[string]string{}
	exts := map[string]any{}
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		raw := bytes.TrimSpace(fields[name])
		if name == "data" || name == "data_base64" || bytes.Equal(raw, []byte("null")) {
			continue
		}
		switch name {
		case "specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema":
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return event.Event{}, &AttributeError{Attribute: name, Value: string(raw), Reason: "not a JSON string", Err: ErrInvalidAttribute}
			}
			attrs[name] = s
			continue
		}
		v, err := extensionValue(raw)
		if err != nil {
			return event.Event{}, &AttributeError{Attribute: name, Value: string(raw), Reason: err.Error(), Err: ErrInvalidAttribute}
		}
		exts[name] = v
	}
	if _, ok := attrs["specversion"]; !ok {
		return event.Event{}, &AttributeError{Attribute: "specversion", Err: ErrMissingAttribute}
	}
	rawData, hasData := fields["data"]
	rawB64, hasB64 := fields["data_base64"]
	rawData, rawB64 = bytes.TrimSpace(rawData), bytes.TrimSpace(rawB64)
	hasData = hasData && !bytes.Equal(rawData, []byte("null"))
	hasB64 = hasB64 && !bytes.Equal(rawB64, []byte("null"))
	var data []byte
	switch {
	case hasData && hasB64:
		return event.Event{}, &AttributeError{Attribute: "data_base64", Reason: "given together with data", Err: ErrInvalidAttribute}
	case hasB64:
		var s string
		if err := json.Unmarshal(rawB64, &s); err != nil {
			return event.Event{}, &AttributeError{Attribute: "data_base64", Value: string(rawB64), Reason: "not a JSON string", Err: ErrInvalidAttribute}
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return event.Event{}, &AttributeError{Attribute: "data_base64", Value: s, Reason: "not base64: " + err.Error(), Err: ErrInvalidAttribute}
		}
		data = b
	case hasData:
		var s string
		if !isJSONMedia(attrs["datacontenttype"]) && json.Unmarshal(rawData, &s) == nil {
			data = []byte(s) // non-JSON data travels as a JSON string
		} else {
			data = bytes.Clone(rawData)
		}
	}
	if len(data) == 0 {
		data = nil
	}
	return buildEvent(attrs, exts, data, hasB64)
}

// extensionValue maps a JSON extension value to a CloudEvents type: string,
// boolean, or integer in int32 range.
func extensionValue(raw json.RawMessage) (any, error) {
	switch {
	case len(raw) == 0:
		return nil, fmt.Errorf("empty value")
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return s, nil
	case string(raw) == "true":
		return true, nil
	case string(raw) == "false":
		return false, nil
	}
	n, err := strconv.ParseInt(string(raw), 10, 32)
	if err != nil {
		return nil, fmt.Errorf("extension values must be strings, booleans or 32-bit integers")
	}
	return int32(n), nil
}

// buildEvent makes the event.Event from decoded attribute strings, naming
// the attribute that is missing or unusable.
func buildEvent(attrs map[string]string, exts map[string]any, data []byte, base64Data bool) (event.Event, error) {
	sv, ok := attrs["specversion"]
	if !ok {
		return event.Event{}, &AttributeError{Attribute: "specversion", Err: ErrMissingAttribute}
	}
	if sv != SpecVersion {
		return event.Event{}, &AttributeError{Attribute: "specversion", Value: sv, Reason: "only 1.0 is supported", Err: ErrSpecVersion}
	}
	for _, name := range [...]string{"id", "source", "type"} {
		if strings.TrimSpace(attrs[name]) == "" {
			return event.Event{}, &AttributeError{Attribute: name, Err: ErrMissingAttribute}
		}
	}
	invalid := func(name, reason string) error {
		return &AttributeError{Attribute: name, Value: attrs[name], Reason: reason, Err: ErrInvalidAttribute}
	}
	e := event.New(SpecVersion)
	e.SetID(attrs["id"])
	if err := e.Context.SetSource(attrs["source"]); err != nil {
		return event.Event{}, invalid("source", "not a URI-reference")
	}
	e.SetType(attrs["type"])
	if s, ok := attrs["subject"]; ok {
		if strings.TrimSpace(s) == "" {
			return event.Event{}, invalid("subject", "empty")
		}
		e.SetSubject(s)
	}
	if s, ok := attrs["time"]; ok {
		t, err := types.ParseTime(s)
		if err != nil {
			return event.Event{}, invalid("time", "not an RFC 3339 timestamp")
		}
		e.SetTime(t)
	}
	if s, ok := attrs["datacontenttype"]; ok {
		if _, _, err := parseMediaType(s); err != nil {
			return event.Event{}, invalid("datacontenttype", "not a media type: "+err.Error())
		}
		e.SetDataContentType(s)
	}
	if s, ok := attrs["dataschema"]; ok {
		u, err := url.Parse(s)
		if err != nil || !u.IsAbs() {
			return event.Event{}, invalid("dataschema", "not an absolute URI")
		}
		e.SetDataSchema(s)
	}
	names := make([]string, 0, len(attrs)+len(exts))
	for n := range attrs {
		if !coreAttribute(n) {
			names = append(names, n)
		}
	}
	for n := range exts {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if !validExtensionName(n) {
			return event.Event{}, &AttributeError{Attribute: n, Reason: "attribute names may contain only a-z 0-9", Err: ErrInvalidAttribute}
		}
		var v any = attrs[n]
		if ev, ok := exts[n]; ok {
			v = ev
		}
		e.SetExtension(n, v)
		if err := e.FieldErrors["extension:"+n]; err != nil {
			return event.Event{}, &AttributeError{Attribute: n, Reason: err.Error(), Err: ErrInvalidAttribute}
		}
	}
	e.DataEncoded = data
	e.DataBase64 = base64Data
	if err := e.Validate(); err != nil {
		return event.Event{}, validationError(err)
	}
	return e, nil
}

// parseMediaType is mime.ParseMediaType, without parsing the type nearly
// every event has.
func parseMediaType(s string) (string, map[string]string, error) {
	if s == ContentTypeJSON {
		return s, nil, nil
	}
	return mime.ParseMediaType(s)
}

func coreAttribute(name string) bool {
	switch name {
	case "specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema":
		return true
	}
	return false
}

func validExtensionName(n string) bool {
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// percentEncode encodes a header value as the CloudEvents HTTP binding
// (§3.1.3.2) asks: the UTF-8 bytes of space, '"', '%' and everything outside
// printable ASCII become %XX. It also keeps CR/LF out of NATS headers.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	i := 0
	for i < len(s) && !needsPercent(s[i]) {
		i++
	}
	if i == len(s) {
		return s // nearly every value (ids, types, times): nothing to encode
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		c := s[i]
		if needsPercent(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xF])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// needsPercent reports whether percentEncode encodes the byte c.
func needsPercent(c byte) bool { return c <= 0x20 || c >= 0x7F || c == '"' || c == '%' }

// percentDecode undoes percentEncode. A '%' not followed by two hex digits
// is kept as it is: a hand-written `nats pub -H` header with a stray '%'
// still reads the way its author meant.
func percentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// agentOf reads the jetwayagent extension: absent is "", present it must
// name a profile the way a session is named.
func agentOf(e event.Event) (string, error) {
	v, ok := e.Extensions()[ExtAgent]
	if !ok {
		return "", nil
	}
	name, err := types.ToString(v)
	if err == nil {
		err = ValidateToken("agent", name)
	}
	if err != nil {
		return "", &AttributeError{Attribute: ExtAgent, Value: fmt.Sprint(v), Reason: "an agent profile name: 1–64 of A-Z a-z 0-9 _ -", Err: ErrInvalidAttribute}
	}
	return name, nil
}

// SetAgent binds e's session to the agent profile name (the jetwayagent
// extension).
func SetAgent(e *event.Event, name string) { e.SetExtension(ExtAgent, name) }
