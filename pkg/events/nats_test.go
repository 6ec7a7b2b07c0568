package events

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

// startNATS runs an embedded nats-server with JetStream on a free port and
// returns a connection to it; both are closed when the test ends.
func startNATS(t *testing.T) *nats.Conn {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready within 10s")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// wire publishes each message and returns them as a subscriber on
// jetway.> received them, headers and all.
func wire(t *testing.T, nc *nats.Conn, msgs ...*nats.Msg) []*nats.Msg {
	t.Helper()
	sub, err := nc.SubscribeSync("jetway.>")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	for _, m := range msgs {
		if err := nc.PublishMsg(m); err != nil {
			t.Fatalf("publish %s: %v", m.Subject, err)
		}
	}
	var got []*nats.Msg
	for range msgs {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		got = append(got, m)
	}
	return got
}

func TestOverNATS_events_from_other_publishers_are_decoded(t *testing.T) {
	nc := startNATS(t)

	// As `nats pub -H 'ce-specversion:1.0' -H 'ce-type:io.jetway.input' -H
	// 'ce-source:cli' -H 'ce-id:n1' -H 'Content-Type:application/json'
	// jetway.events.acme.s1 '{"text":"from the cli"}'` sends it.
	raw := &nats.Msg{Subject: subjEvents, Data: []byte(`{"text":"from the cli"}`), Header: binaryHeader(
		"ce-specversion", "1.0", "ce-type", TypeInput, "ce-source", "cli", "ce-id", "n1",
		"Content-Type", "application/json")}

	// As sdk-go's structured NATS sender sends it: json.Marshal(event), no headers.
	se := event.New()
	se.SetID("sdk-1")
	se.SetSource("https://ci.example.com")
	se.SetType("com.example.build.finished")
	se.SetSubject("acme/s1")
	if err := se.SetData(event.ApplicationJSON, map[string]any{"ok": true}); err != nil {
		t.Fatal(err)
	}
	structured, err := json.Marshal(se)
	if err != nil {
		t.Fatal(err)
	}

	// Byte data in structured mode: data_base64.
	b64 := []byte(`{"specversion":"1.0","id":"b64-1","source":"s","type":"io.jetway.input",` +
		`"datacontenttype":"application/json","data_base64":"eyJ0ZXh0IjoiYmFzZTY0In0="}`)

	got := wire(t, nc, raw,
		&nats.Msg{Subject: subjEvents, Data: structured},
		&nats.Msg{Subject: subjEvents, Data: b64, Header: binaryHeader("Content-Type", ContentTypeStructured)})

	h, err := DecodeMsg(got[0])
	if err != nil {
		t.Fatalf("binary: %v", err)
	}
	if in, ok := h.Payload.(Input); !ok || in.Text != "from the cli" || h.ID != "n1" || h.Tenant != "acme" || h.Session != "s1" {
		t.Errorf("binary decoded %+v", h)
	}

	h, err = DecodeMsg(got[1])
	if err != nil {
		t.Fatalf("structured: %v", err)
	}
	if x, ok := h.Payload.(External); !ok || x.Type != "com.example.build.finished" || string(x.Data) != `{"ok":true}` || h.ID != "sdk-1" {
		t.Errorf("structured decoded %+v", h)
	}
	if n, _ := h.Notice(); n != "[external event] com.example.build.finished from https://ci.example.com:\n{\"ok\":true}" {
		t.Errorf("structured notice %q", n)
	}

	h, err = DecodeMsg(got[2])
	if err != nil {
		t.Fatalf("data_base64: %v", err)
	}
	if in, ok := h.Payload.(Input); !ok || in.Text != "base64" {
		t.Errorf("data_base64 decoded %+v", h)
	}
}

func TestOverNATS_malformed_events_get_typed_errors(t *testing.T) {
	nc := startNATS(t)
	forged := &nats.Msg{Subject: subjEvents, Data: []byte(`{"id":3,"program":"gh","exit_status":0,"running_for_ms":1,"tail":""}`),
		Header: binaryHeader("ce-specversion", "1.0", "ce-type", TypeJobExited, "ce-source", "tenant", "ce-id", "f1")}
	noID := &nats.Msg{Subject: subjEvents, Data: []byte(`{"text":"x"}`),
		Header: binaryHeader("ce-specversion", "1.0", "ce-type", TypeInput, "ce-source", "cli")}
	noText := &nats.Msg{Subject: subjEvents, Data: []byte(`{"note":"x"}`),
		Header: binaryHeader("ce-specversion", "1.0", "ce-type", TypeInput, "ce-source", "cli", "ce-id", "t1")}
	otherSession := &nats.Msg{Subject: subjEvents, Data: []byte(`{"text":"x"}`),
		Header: binaryHeader("ce-specversion", "1.0", "ce-type", TypeInput, "ce-source", "cli", "ce-id", "o1", "ce-subject", "acme/other")}
	broken := &nats.Msg{Subject: subjEvents, Data: []byte(`{"specversion":"1.0",`)}

	got := wire(t, nc, forged, noID, noText, otherSession, broken)
	for i, want := range []error{ErrForgedJobEvent, ErrMissingAttribute, ErrInvalidData, ErrSubjectMismatch, ErrMalformed} {
		if _, err := DecodeMsg(got[i]); !errors.Is(err, want) {
			t.Errorf("message %d: %v; want %v", i, err, want)
		}
	}
	if _, err := (Decoder{MaxSize: 32}).DecodeMsg(got[1]); !errors.Is(err, ErrTooLarge) {
		t.Errorf("size limit: %v", err)
	}
}

func TestOverNATS_Encode_round_trip_keeps_everything_and_dedupes_in_JetStream(t *testing.T) {
	nc := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     "EVENTS_TEST",
		Subjects: []string{Filter(KindEvents), Filter(KindJobEvents)},
	})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}

	_, sc := traceCtx(t)
	p := JobExited{ID: 3, Program: "gh", ExitStatus: 1, RunningForMS: 1265000,
		Tail: "FAIL: TestX \"quoted\" 100% ✗\n", Status: StatusExited, TaskRef: TaskRef{Task: "t3", Seq: 2}}
	e := mustNew(t, p)
	e.SetExtension("origin", "café bar")
	m, err := Encode(trace.ContextWithSpanContext(ctx, sc), subjJobs, e)
	if err != nil {
		t.Fatal(err)
	}
	for i, wantDup := range []bool{false, true} {
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if ack.Duplicate != wantDup {
			t.Errorf("publish %d: duplicate = %v, want %v (Nats-Msg-Id = CE id)", i, ack.Duplicate, wantDup)
		}
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("stream holds %d messages; want 1", info.State.Msgs)
	}

	stored, err := stream.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Decode(stored.Subject, stored.Header, stored.Data)
	if err != nil {
		t.Fatalf("decode stored: %v", err)
	}
	if !equalPayload(h.Payload, p) || h.ID != e.ID() || !h.FromJobs || !h.Time.Equal(e.Time()) ||
		h.Source != e.Source() || h.Event.Extensions()["origin"] != "café bar" {
		t.Errorf("decoded %+v\nfrom %s", h, e)
	}
	got := trace.SpanContextFromContext(h.TraceContext(context.Background()))
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || got.TraceState().String() != sc.TraceState().String() {
		t.Errorf("trace %v, want %v", got, sc)
	}
	if hl, _ := h.Headline(); hl != "job 3 (gh) exited 1 after 21m" {
		t.Errorf("headline %q", hl)
	}
}
