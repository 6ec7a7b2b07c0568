package events

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

const (
	subjEvents = "jetway.events.acme.s1"
	subjJobs   = "jetway.jobevents.acme.s1"
)

func mustNew(t *testing.T, p Payload) event.Event {
	t.Helper()
	e, err := New("acme", "s1", "jetway/test", p)
	if err != nil {
		t.Fatalf("New(%T): %v", p, err)
	}
	return e
}

// binaryHeader is what `nats pub -H 'ce-specversion:1.0' -H 'ce-type:…' …`
// sends: lower-case ce- headers with the values as typed.
func binaryHeader(kv ...string) nats.Header {
	h := nats.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func inputHeader() nats.Header {
	return binaryHeader("ce-specversion", "1.0", "ce-type", TypeInput, "ce-source", "cli", "ce-id", "e1",
		"ce-subject", "acme/s1", "Content-Type", "application/json")
}

func TestNew_sets_the_contract_attributes(t *testing.T) {
	e := mustNew(t, Input{Text: "hello"})
	if e.SpecVersion() != "1.0" || e.Type() != TypeInput || e.Source() != "jetway/test" ||
		e.Subject() != "acme/s1" || e.DataContentType() != "application/json" || e.Time().IsZero() {
		t.Errorf("attributes: %s", e)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(e.ID()) {
		t.Errorf("id %q is not a v4 UUID", e.ID())
	}
	if string(e.Data()) != `{"text":"hello"}` {
		t.Errorf("data %s", e.Data())
	}
	if e2 := mustNew(t, Input{Text: "hello"}); e2.ID() == e.ID() {
		t.Error("two events share an id")
	}
}

func TestNew_writes_the_payloads_of_the_contract(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		p    Payload
		want string
	}{
		{JobExited{ID: 3, Program: "gh", ExitStatus: 0, RunningForMS: 1265000, Tail: "ok", Status: StatusExited},
			`{"id":3,"program":"gh","exit_status":0,"running_for_ms":1265000,"tail":"ok","status":"exited"}`},
		{JobExited{ID: 4, Program: "watch", Status: StatusKilled, TaskRef: TaskRef{Task: "t4", Seq: 2}},
			`{"id":4,"program":"watch","exit_status":0,"running_for_ms":0,"tail":"","status":"killed","task":"t4","seq":2}`},
		{JobOverdue{ID: 7, Program: "make", RunningForMS: 600000, Tail: ""},
			`{"id":7,"program":"make","running_for_ms":600000,"tail":""}`},
		{Steer{Note: "use staging"}, `{"note":"use staging"}`},
		{Resume{BookedBy: "itin-1", WaitingFor: "CI", BookedAt: at, Checks: 0},
			`{"booked_by":"itin-1","waiting_for":"CI","booked_at":"2026-11-30T12:00:00Z","checks":0}`},
	} {
		e := mustNew(t, c.p)
		if e.Type() != c.p.EventType() || string(e.Data()) != c.want {
			t.Errorf("%T: type %s data %s; want %s", c.p, e.Type(), e.Data(), c.want)
		}
	}
}

func TestNew_refuses_what_a_decoder_would_refuse(t *testing.T) {
	for _, c := range []struct {
		name            string
		tenant, session string
		source          string
		p               Payload
		is              error
	}{
		{"input without text", "acme", "s1", "src", Input{}, ErrInvalidData},
		{"input of spaces", "acme", "s1", "src", Input{Text: " \n\t"}, ErrInvalidData},
		{"steer without note", "acme", "s1", "src", Steer{Note: " "}, ErrInvalidData},
		{"job without program", "acme", "s1", "src", JobExited{ID: 1}, ErrInvalidData},
		{"job with unknown status", "acme", "s1", "src", JobExited{ID: 1, Program: "x", Status: "weird"}, ErrInvalidData},
		{"resume without booked_at", "acme", "s1", "src", Resume{BookedBy: "x"}, ErrInvalidData},
		{"bad session", "acme", "a.b", "src", Input{Text: "x"}, ErrInvalidToken},
		{"no source", "acme", "s1", "", Input{Text: "x"}, ErrMissingAttribute},
		{"external without type", "acme", "s1", "src", External{}, ErrMissingAttribute},
		{"nil payload", "acme", "s1", "src", nil, ErrInvalidData},
	} {
		_, err := New(c.tenant, c.session, c.source, c.p)
		if !errors.Is(err, c.is) {
			t.Errorf("%s: New = %v; want %v", c.name, err, c.is)
		}
	}
}

func TestEncode_writes_binary_mode_with_percent_encoded_headers(t *testing.T) {
	e := mustNew(t, Input{Text: "hi"})
	e.SetExtension("note", "a \"b\" 100% é\r\n")
	m, err := Encode(context.Background(), subjEvents, e)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ce-specversion": "1.0",
		"ce-id":          e.ID(),
		"ce-source":      "jetway/test",
		"ce-type":        TypeInput,
		"ce-subject":     "acme/s1",
		"ce-time":        e.Time().UTC().Format(time.RFC3339Nano),
		"ce-note":        "a%20%22b%22%20100%25%20%C3%A9%0D%0A",
		"Content-Type":   "application/json",
		"Nats-Msg-Id":    e.ID(),
	}
	for k, v := range want {
		if got := m.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if len(m.Header) != len(want) {
		t.Errorf("headers %v; want exactly %v", m.Header, want)
	}
	if m.Subject != subjEvents || string(m.Data) != `{"text":"hi"}` {
		t.Errorf("subject %q body %s", m.Subject, m.Data)
	}
	if _, ok := e.Extensions()[ExtTraceParent]; ok {
		t.Error("Encode changed the caller's event")
	}
}

func traceCtx(t *testing.T) (context.Context, trace.SpanContext) {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
	return trace.ContextWithSpanContext(context.Background(), sc), sc
}

func TestEncode_then_Decode_preserves_everything_including_the_trace(t *testing.T) {
	ctx, sc := traceCtx(t)
	for _, c := range []struct {
		subject string
		p       Payload
	}{
		{subjEvents, Input{Text: "héllo \"world\" 100%\nsecond line"}},
		{subjEvents, Steer{Note: "stop"}},
		{subjEvents, Resume{BookedBy: "itin-1", WaitingFor: "CI", BookedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Checks: 11}},
		{subjJobs, JobExited{ID: 3, Program: "gh", ExitStatus: 1, RunningForMS: 1265000, Tail: "boom\n", Status: StatusExited, TaskRef: TaskRef{Task: "t3", Seq: 9}}},
		{subjJobs, JobOverdue{ID: 7, Program: "make", RunningForMS: 600000}},
		{subjEvents, External{Type: "com.github.push", DataContentType: "text/plain; charset=utf-8", Data: []byte("pushed é")}},
	} {
		e := mustNew(t, c.p)
		e.SetExtension("partitionkey", "k 1")
		m, err := Encode(ctx, c.subject, e)
		if err != nil {
			t.Fatalf("%T: Encode: %v", c.p, err)
		}
		h, err := DecodeMsg(m)
		if err != nil {
			t.Fatalf("%T: Decode: %v", c.p, err)
		}
		want := c.p
		if x, ok := want.(External); ok {
			x.Source = "jetway/test"
			want = x
		}
		if !equalPayload(h.Payload, want) {
			t.Errorf("%T: payload %#v, want %#v", c.p, h.Payload, want)
		}
		if h.ID != e.ID() || h.Type != e.Type() || h.Source != e.Source() || !h.Time.Equal(e.Time()) ||
			h.Tenant != "acme" || h.Session != "s1" || h.FromJobs != (c.subject == subjJobs) {
			t.Errorf("%T: decoded %+v from %s", c.p, h, e)
		}
		if h.Event.Subject() != "acme/s1" || h.Event.DataContentType() != e.DataContentType() {
			t.Errorf("%T: event %s", c.p, h.Event)
		}
		if v := h.Event.Extensions()["partitionkey"]; v != "k 1" {
			t.Errorf("%T: extension partitionkey = %v", c.p, v)
		}
		got := trace.SpanContextFromContext(h.TraceContext(context.Background()))
		if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() ||
			got.TraceState().Get("vendor") != "abc" || !got.IsRemote() {
			t.Errorf("%T: trace context %+v, want %+v", c.p, got, sc)
		}
	}
}

func equalPayload(a, b Payload) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb) && a.EventType() == b.EventType()
}

func TestEncode_without_a_trace_keeps_the_events_own(t *testing.T) {
	e := mustNew(t, Input{Text: "x"})
	e.SetExtension(ExtTraceParent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	m, err := Encode(context.Background(), subjEvents, e)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get("ce-traceparent"); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("ce-traceparent = %q", got)
	}
	h, err := DecodeMsg(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := trace.SpanContextFromContext(h.TraceContext(context.Background())); got.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id %s", got.TraceID())
	}
	if ctx := ExtractTrace(context.Background(), mustNew(t, Input{Text: "x"})); trace.SpanContextFromContext(ctx).IsValid() {
		t.Error("an event without traceparent yields a span context")
	}
}

func TestEncode_refuses_an_invalid_event(t *testing.T) {
	if _, err := Encode(context.Background(), subjEvents, event.New()); !errors.Is(err, ErrInvalidAttribute) {
		t.Errorf("Encode(empty event) = %v", err)
	}
	if _, err := Encode(context.Background(), "", mustNew(t, Input{Text: "x"})); !errors.Is(err, ErrInvalidSubject) {
		t.Errorf("Encode to no subject = %v", err)
	}
	if _, err := Encode(context.Background(), subjEvents, event.New("0.3")); !errors.Is(err, ErrSpecVersion) {
		t.Errorf("Encode(0.3) = %v", err)
	}
}

func TestDecode_reads_a_binary_event_as_nats_pub_sends_it(t *testing.T) {
	h, err := Decode(subjEvents, inputHeader(), []byte(`{"text":"hi there"}`))
	if err != nil {
		t.Fatal(err)
	}
	if in, ok := h.Payload.(Input); !ok || in.Text != "hi there" || h.ID != "e1" || h.Source != "cli" || h.FromJobs {
		t.Errorf("decoded %+v", h)
	}
	// Header names are case-insensitive in the bindings; stray '%' survive.
	hdr := binaryHeader("Ce-Specversion", "1.0", "CE-TYPE", TypeInput, "ce-source", "cli", "ce-id", "e%201%2",
		"content-type", "application/json")
	h, err = Decode(subjEvents, hdr, []byte(`{"text":"x"}`))
	if err != nil || h.ID != "e 1%2" || h.Source != "cli" {
		t.Errorf("decoded %+v, %v", h, err)
	}
	if h.Event.Subject() != "acme/s1" {
		t.Errorf("a missing subject attribute is not filled in: %q", h.Event.Subject())
	}
}

func TestDecode_reads_structured_events_made_by_sdk_go(t *testing.T) {
	e := event.New()
	e.SetID("s-1")
	e.SetSource("https://example.com/x")
	e.SetType(TypeInput)
	e.SetSubject("acme/s1")
	if err := e.SetData(event.ApplicationJSON, Input{Text: "structured"}); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	for name, hdr := range map[string]nats.Header{
		"cloudevents+json": binaryHeader("Content-Type", "application/cloudevents+json; charset=utf-8"),
		"no content type":  nil,
	} {
		h, err := Decode(subjEvents, hdr, body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if in, ok := h.Payload.(Input); !ok || in.Text != "structured" || h.ID != "s-1" || h.Source != "https://example.com/x" {
			t.Errorf("%s: decoded %+v", name, h)
		}
	}

	// sdk-go sends byte data as data_base64.
	b := event.New()
	b.SetID("b-1")
	b.SetSource("https://example.com/x")
	b.SetType("com.example.blob")
	if err := b.SetData("application/octet-stream", []byte{0, 1, 2, 0xff}); err != nil {
		t.Fatal(err)
	}
	body, err = json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `"data_base64":"AAEC/w=="`) {
		t.Fatalf("sdk-go did not write data_base64: %s", body)
	}
	h, err := Decode(subjEvents, nil, body)
	if err != nil {
		t.Fatal(err)
	}
	if x, ok := h.Payload.(External); !ok || string(x.Data) != "\x00\x01\x02\xff" || x.Type != "com.example.blob" ||
		x.DataContentType != "application/octet-stream" {
		t.Errorf("decoded %#v", h.Payload)
	}
}

func TestDecode_accepts_data_base64_for_a_jetway_type(t *testing.T) {
	body := `{"specversion":"1.0","id":"x","source":"s","type":"io.jetway.steer","datacontenttype":"application/json","data_base64":"eyJub3RlIjoic3RvcCJ9"}`
	h, err := Decode(subjEvents, nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := h.Payload.(Steer); !ok || s.Note != "stop" {
		t.Errorf("payload %#v", h.Payload)
	}
}

func TestDecode_keeps_any_other_type_as_external(t *testing.T) {
	body := `{"specversion":"1.0","id":"p1","source":"https://github.com/x/y","type":"com.github.push","data":{"ref":"main"},"comexampleext":"v","count":3,"flag":true}`
	h, err := Decode(subjEvents, nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	x, ok := h.Payload.(External)
	if !ok || x.Type != "com.github.push" || x.Source != "https://github.com/x/y" || string(x.Data) != `{"ref":"main"}` {
		t.Fatalf("payload %#v", h.Payload)
	}
	if n, _ := h.Notice(); n != "[external event] com.github.push from https://github.com/x/y:\n{\"ref\":\"main\"}" {
		t.Errorf("notice %q", n)
	}
	if ext := h.Event.Extensions(); ext["comexampleext"] != "v" || ext["count"] != int32(3) || ext["flag"] != true {
		t.Errorf("extensions %v", ext)
	}
	// A text datacontenttype carries its data as a JSON string.
	body = `{"specversion":"1.0","id":"p2","source":"s","type":"com.example.note","datacontenttype":"text/plain","data":"hello\nworld"}`
	h, err = Decode(subjEvents, nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if x := h.Payload.(External); string(x.Data) != "hello\nworld" {
		t.Errorf("text data %q", x.Data)
	}
}

func TestDecode_accepts_job_events_only_from_the_jobevents_subject(t *testing.T) {
	hdr := binaryHeader("ce-specversion", "1.0", "ce-type", TypeJobExited, "ce-source", "jetway/jobs", "ce-id", "j1",
		"Content-Type", "application/json")
	data := []byte(`{"id":3,"program":"gh","exit_status":0,"running_for_ms":1265000,"tail":"ok"}`)
	h, err := Decode(subjJobs, hdr, data)
	if err != nil {
		t.Fatal(err)
	}
	j, ok := h.Payload.(JobExited)
	if !ok || !h.FromJobs || j.Status != StatusExited || j.ID != 3 {
		t.Errorf("decoded %+v", h)
	}
	if hl, _ := h.Headline(); hl != "job 3 (gh) exited 0 after 21m" {
		t.Errorf("headline %q", hl)
	}
	// The same event on the events subject is a forgery, whatever its type says.
	for _, typ := range []string{TypeJobExited, TypeJobOverdue, "io.jetway.job.progress"} {
		hdr.Set("ce-type", typ)
		if _, err := Decode(subjEvents, hdr, data); !errors.Is(err, ErrForgedJobEvent) {
			t.Errorf("%s on %s: %v; want ErrForgedJobEvent", typ, subjEvents, err)
		}
	}
	// A job type this version does not know is still delivered from a worker.
	h, err = Decode(strings.Replace(subjJobs, "jobevents.", "jobevents.3.", 1), hdr, data)
	if err != nil {
		t.Fatal(err)
	}
	if x, ok := h.Payload.(External); !ok || x.Type != "io.jetway.job.progress" || !h.FromJobs {
		t.Errorf("decoded %+v", h)
	}
}

func TestDecode_refuses_malformed_events_with_typed_errors(t *testing.T) {
	okBody := []byte(`{"text":"hi"}`)
	without := func(name string) nats.Header {
		h := inputHeader()
		h.Del(name)
		return h
	}
	with := func(kv ...string) nats.Header {
		h := inputHeader()
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for _, c := range []struct {
		name      string
		subject   string
		hdr       nats.Header
		body      string
		is        error
		attribute string // for *AttributeError
	}{
		{"missing id", subjEvents, without("ce-id"), string(okBody), ErrMissingAttribute, "id"},
		{"blank id", subjEvents, with("ce-id", "%20"), string(okBody), ErrMissingAttribute, "id"},
		{"missing source", subjEvents, without("ce-source"), string(okBody), ErrMissingAttribute, "source"},
		{"missing type", subjEvents, without("ce-type"), string(okBody), ErrMissingAttribute, "type"},
		{"wrong specversion", subjEvents, with("ce-specversion", "0.3"), string(okBody), ErrSpecVersion, "specversion"},
		{"bad time", subjEvents, with("ce-time", "yesterday"), string(okBody), ErrInvalidAttribute, "time"},
		{"bad content type", subjEvents, with("Content-Type", "///"), string(okBody), ErrInvalidAttribute, "datacontenttype"},
		{"bad extension name", subjEvents, with("ce-trace_id", "x"), string(okBody), ErrInvalidAttribute, "trace_id"},
		{"relative dataschema", subjEvents, with("ce-dataschema", "schema.json"), string(okBody), ErrInvalidAttribute, "dataschema"},
		{"attribute twice", subjEvents, binaryHeader("ce-specversion", "1.0", "ce-id", "a", "CE-ID", "b", "ce-source", "s", "ce-type", TypeInput), string(okBody), ErrInvalidAttribute, "id"},
		{"not UTF-8", subjEvents, with("ce-source", "%FF"), string(okBody), ErrInvalidAttribute, "source"},
		{"subject for another session", subjEvents, with("ce-subject", "acme/s2"), string(okBody), ErrSubjectMismatch, "subject"},
		{"subject for another tenant", subjEvents, with("ce-subject", "evil/s1"), string(okBody), ErrSubjectMismatch, "subject"},
		{"plain JSON with a content type", subjEvents, binaryHeader("Content-Type", "application/json"), string(okBody), ErrMissingAttribute, "specversion"},
		{"structured without specversion", subjEvents, nil, `{"id":"1","source":"s","type":"t"}`, ErrMissingAttribute, "specversion"},
		{"structured 0.3", subjEvents, nil, `{"specversion":"0.3","id":"1","source":"s","type":"t"}`, ErrSpecVersion, "specversion"},
		{"structured id not a string", subjEvents, nil, `{"specversion":"1.0","id":1,"source":"s","type":"t"}`, ErrInvalidAttribute, "id"},
		{"structured object extension", subjEvents, nil, `{"specversion":"1.0","id":"1","source":"s","type":"t","ext":{}}`, ErrInvalidAttribute, "ext"},
		{"structured data and data_base64", subjEvents, nil, `{"specversion":"1.0","id":"1","source":"s","type":"t","data":1,"data_base64":"AA=="}`, ErrInvalidAttribute, "data_base64"},
		{"structured bad base64", subjEvents, nil, `{"specversion":"1.0","id":"1","source":"s","type":"t","data_base64":"!!"}`, ErrInvalidAttribute, "data_base64"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.subject, c.hdr, []byte(c.body))
			if !errors.Is(err, c.is) {
				t.Fatalf("Decode = %v; want %v", err, c.is)
			}
			var ae *AttributeError
			if !errors.As(err, &ae) || ae.Attribute != c.attribute {
				t.Errorf("Decode = %#v; want an *AttributeError for %q", err, c.attribute)
			}
			if !strings.Contains(err.Error(), c.attribute) {
				t.Errorf("error %q does not name %q", err, c.attribute)
			}
		})
	}
}

func TestDecode_refuses_data_that_does_not_fit_its_type(t *testing.T) {
	for _, c := range []struct {
		name, typ, ct, body, reason string
	}{
		{"input without text", TypeInput, "application/json", `{"txt":"hi"}`, "missing text"},
		{"input with empty text", TypeInput, "application/json", `{"text":""}`, "text is empty"},
		{"input text not a string", TypeInput, "application/json", `{"text":5}`, "text: want string"},
		{"input with no data", TypeInput, "application/json", ``, "no data"},
		{"input as plain text", TypeInput, "text/plain", `hi`, `datacontenttype "text/plain" is not JSON`},
		{"input data is an array", TypeInput, "application/json", `["hi"]`, "not a JSON object"},
		{"input data is null", TypeInput, "application/json", `null`, "not a JSON object"},
		{"input data is broken JSON", TypeInput, "application/json", `{"text":`, "malformed JSON"},
		{"steer without note", TypeSteer, "application/json", `{}`, "missing note"},
		{"job without id", TypeJobExited, "application/json", `{"program":"gh"}`, "missing id"},
		{"job with negative id", TypeJobExited, "application/json", `{"id":-1,"program":"gh"}`, "id: want uint64"},
		{"job with bad status", TypeJobExited, "application/json", `{"id":1,"program":"gh","status":"zombie"}`, `status "zombie"`},
		{"job running backwards", TypeJobOverdue, "application/json", `{"id":1,"program":"gh","running_for_ms":-5}`, "running_for_ms is negative"},
		{"job seq without task", TypeJobOverdue, "application/json", `{"id":1,"program":"gh","seq":2}`, "seq without task"},
		{"resume with a bad time", TypeResume, "application/json", `{"booked_by":"x","booked_at":"noon"}`, "does not fit the type"},
		{"resume without booked_by", TypeResume, "application/json", `{"booked_at":"2026-01-01T00:00:00Z"}`, "missing booked_by"},
	} {
		t.Run(c.name, func(t *testing.T) {
			subject := subjEvents
			if IsJobType(c.typ) {
				subject = subjJobs
			}
			hdr := binaryHeader("ce-specversion", "1.0", "ce-type", c.typ, "ce-source", "s", "ce-id", "1", "Content-Type", c.ct)
			_, err := Decode(subject, hdr, []byte(c.body))
			var de *DataError
			if !errors.Is(err, ErrInvalidData) || !errors.As(err, &de) || de.Type != c.typ {
				t.Fatalf("Decode = %#v; want a *DataError for %s", err, c.typ)
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Errorf("error %q does not say %q", err, c.reason)
			}
		})
	}
	_, err := Decode(subjEvents, inputHeader(), []byte(`{"text":`))
	if !errors.Is(err, ErrMalformed) {
		t.Errorf("broken JSON data is not also ErrMalformed: %v", err)
	}
}

func TestDecode_refuses_a_structured_body_that_is_not_JSON(t *testing.T) {
	for _, body := range []string{``, `{`, `not json`, `null`, `[1,2]`, `"x"`} {
		_, err := Decode(subjEvents, nil, []byte(body))
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("Decode(%q) = %v; want ErrMalformed", body, err)
		}
	}
	_, err := Decode(subjEvents, binaryHeader("Content-Type", "application/cloudevents-batch+json"), []byte(`[]`))
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "batch") {
		t.Errorf("batch: %v", err)
	}
}

func TestDecode_refuses_oversize_messages(t *testing.T) {
	big := []byte(`{"text":"` + strings.Repeat("x", DefaultMaxSize) + `"}`)
	_, err := Decode(subjEvents, inputHeader(), big)
	var se *SizeError
	if !errors.Is(err, ErrTooLarge) || !errors.As(err, &se) || se.Limit != DefaultMaxSize || se.Size <= DefaultMaxSize {
		t.Errorf("default limit: %#v", err)
	}
	small := Decoder{MaxSize: 64}
	if _, err := small.Decode(subjEvents, inputHeader(), []byte(`{"text":"hi"}`)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("64-byte limit with headers: %v", err)
	}
	if _, err := (Decoder{MaxSize: -1}).Decode(subjEvents, inputHeader(), big); err != nil {
		t.Errorf("no limit: %v", err)
	}
}

func TestDecode_refuses_subjects_that_do_not_carry_host_events(t *testing.T) {
	for _, subj := range []string{"jetway.out.acme.s1", "jetway.schedules.acme.s1.x", "jetway.events.acme.a.b", "foo"} {
		if _, err := Decode(subj, inputHeader(), []byte(`{"text":"x"}`)); !errors.Is(err, ErrInvalidSubject) {
			t.Errorf("Decode on %q = %v; want ErrInvalidSubject", subj, err)
		}
	}
}

func TestFromEvent_checks_an_event_from_another_binding(t *testing.T) {
	e := mustNew(t, Input{Text: "x"})
	if _, err := FromEvent("jetway.events.acme.s2", e); !errors.Is(err, ErrSubjectMismatch) {
		t.Errorf("FromEvent on another session = %v", err)
	}
	e.SetSubject("")
	h, err := FromEvent("jetway.events.acme.s2", e)
	if err != nil || h.Event.Subject() != "acme/s2" || h.Session != "s2" {
		t.Errorf("FromEvent without subject = %+v, %v", h, err)
	}
	if e.Subject() != "" {
		t.Error("FromEvent changed the caller's event")
	}
}

// An input's text is read from its own field (onlyString) when that is sure
// to read as decoding the whole object into Input does; every other body
// takes the general path. Either way the result is encoding/json's.
func TestDecode_reads_input_text_as_encoding_json_does(t *testing.T) {
	for _, c := range []struct{ body, text, reason string }{
		{`{"text":"hi"}`, "hi", ""},
		{`{ "text" : "spaced" , "extra": 1 }`, "spaced", ""},
		{`{"text":"\u00e9\n\"q\""}`, "é\n\"q\"", ""},
		{`{"text":"a\/b"}`, "a/b", ""},
		{"{\"text\":\"bad \xff byte\"}", "bad \ufffd byte", ""}, // invalid UTF-8 reads as encoding/json replaces it
		{`{"text":"first","text":"last"}`, "last", ""},
		{`{"text":"lower","TEXT":"upper"}`, "upper", ""}, // encoding/json matches keys case-insensitively
		{`{"TEXT":"upper","text":"lower"}`, "lower", ""},
		{`{"Text":"only a case variant"}`, "", "missing text"},
		{`{"text":null}`, "", "missing text"},
		{`{"text":["x"]}`, "", "text: want string"},
	} {
		h, err := Decode(subjEvents, inputHeader(), []byte(c.body))
		if c.reason != "" {
			if err == nil || !strings.Contains(err.Error(), c.reason) {
				t.Errorf("%s: error %v, want one saying %q", c.body, err, c.reason)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.body, err)
			continue
		}
		var want Input
		if err := json.Unmarshal([]byte(c.body), &want); err != nil || want.Text != c.text {
			t.Fatalf("%s: the case is wrong: encoding/json reads %q (%v)", c.body, want.Text, err)
		}
		if got := h.Payload.(Input).Text; got != c.text {
			t.Errorf("%s: text %q, want %q", c.body, got, c.text)
		}
	}
}

// The fast path of an input's text (onlyString) reads that one field: an
// Input that grows another would have it silently dropped there.
func TestInput_has_only_the_field_the_fast_path_reads(t *testing.T) {
	typ := reflect.TypeFor[Input]()
	if typ.NumField() != 1 || typ.Field(0).Tag.Get("json") != "text" {
		t.Fatalf("Input has %d fields; decodePayload reads only \"text\" when it can: decode a new field there too, then change this test", typ.NumField())
	}
}

// Encode leaves the caller's event alone with a trace to inject and
// without one (it copies the event only when it injects).
func TestEncode_does_not_change_the_callers_event(t *testing.T) {
	ctx, _ := traceCtx(t)
	for _, c := range []context.Context{ctx, context.Background()} {
		e := mustNew(t, Input{Text: "x"})
		if _, err := Encode(c, subjEvents, e); err != nil {
			t.Fatal(err)
		}
		if exts := e.Extensions(); len(exts) != 0 {
			t.Errorf("the caller's event has extensions %v after Encode", exts)
		}
	}
}

func TestPercentEncode_leaves_plain_values_and_encodes_the_rest(t *testing.T) {
	for in, want := range map[string]string{
		"":                    "",
		"io.jetway.input":     "io.jetway.input",
		"a b":                 "a%20b",
		"100%":                "100%25",
		"é\"\n":               "%C3%A9%22%0A",
		"plain then tail\x7f": "plain%20then%20tail%7F",
	} {
		if got := percentEncode(in); got != want || percentDecode(got) != in {
			t.Errorf("percentEncode(%q) = %q, want %q (and back)", in, got, want)
		}
	}
}
