package dispatcher

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	api "jetway/pkg/dispatcherapi"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"jetway/pkg/bus"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/events"
)

func TestInput_is_published_on_the_session_subject_with_its_id_as_Nats_Msg_Id(t *testing.T) {
	f := newFixture(t)
	acc := decode[Accepted](t, f.do("POST", "/v1/sessions/s1/input", tokUser, InputRequest{Text: "hello there"}), http.StatusAccepted)
	if acc.ID == "" || acc.Duplicate {
		t.Fatalf("answer %+v: want an id, not a duplicate", acc)
	}
	hs, raws := f.eventsOn("jetway.events.default.s1")
	if len(hs) != 1 {
		t.Fatalf("%d events stored, want 1", len(hs))
	}
	h := hs[0]
	if h.Type != events.TypeInput || h.ID != acc.ID || h.Tenant != "default" || h.Session != "s1" {
		t.Fatalf("stored event %+v, want io.jetway.input %s for default/s1", h, acc.ID)
	}
	if in, ok := h.Payload.(events.Input); !ok || in.Text != "hello there" {
		t.Fatalf("payload %#v, want Input{hello there}", h.Payload)
	}
	if got := raws[0].Header.Get(events.HeaderMsgID); got != acc.ID {
		t.Fatalf("Nats-Msg-Id %q, want the CE id %q", got, acc.ID)
	}
	if h.Event.Subject() != "default/s1" || h.Source != DefaultSource {
		t.Fatalf("subject %q source %q", h.Event.Subject(), h.Source)
	}
}

func TestSteer_is_published_as_io_jetway_steer(t *testing.T) {
	f := newFixture(t)
	acc := decode[Accepted](t, f.do("POST", "/v1/sessions/s1/steer", tokUser, SteerRequest{Note: "use the other branch"}), http.StatusAccepted)
	hs, _ := f.eventsOn("jetway.events.default.s1")
	if len(hs) != 1 || hs[0].ID != acc.ID {
		t.Fatalf("stored %+v, want one event %s", hs, acc.ID)
	}
	if st, ok := hs[0].Payload.(events.Steer); !ok || st.Note != "use the other branch" {
		t.Fatalf("payload %#v, want Steer", hs[0].Payload)
	}
}

func TestInput_with_empty_text_is_refused_naming_the_field(t *testing.T) {
	f := newFixture(t)
	p := problemOf(t, f.do("POST", "/v1/sessions/s1/input", tokUser, `{"text":"  "}`), http.StatusBadRequest)
	if !strings.Contains(p.Detail, "text") {
		t.Fatalf("detail %q does not name the field", p.Detail)
	}
	p = problemOf(t, f.do("POST", "/v1/sessions/s1/input", tokUser, `{"text":`), http.StatusBadRequest)
	if !strings.Contains(p.Title, "JSON") {
		t.Fatalf("title %q does not say the JSON is malformed", p.Title)
	}
}

func ceClient(t *testing.T, f *fixture, token string) cloudevents.Client {
	t.Helper()
	c, err := cloudevents.NewClientHTTP(
		cehttp.WithTarget(f.srv.URL+"/v1/events"),
		cehttp.WithHeader("Authorization", "Bearer "+token),
	)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func githubEvent(id, subject string) event.Event {
	e := cloudevents.NewEvent()
	e.SetID(id)
	e.SetSource("https://github.com/acme/repo")
	e.SetType("com.github.push")
	e.SetSubject(subject)
	_ = e.SetData(cloudevents.ApplicationJSON, map[string]any{"ref": "refs/heads/main", "commits": 3})
	return e
}

// sendStatus sends e with the SDK client and returns the HTTP status.
func sendStatus(t *testing.T, ctx context.Context, c cloudevents.Client, e event.Event) int {
	t.Helper()
	res := c.Send(ctx, e)
	var hr *cehttp.Result
	if !errors.As(res, &hr) {
		t.Fatalf("send: %v (no HTTP result)", res)
	}
	return hr.StatusCode
}

func TestCloudEvents_from_the_SDK_client_reach_the_stream_in_binary_and_structured_mode(t *testing.T) {
	f := newFixture(t)
	c := ceClient(t, f, tokAcme)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()

	if code := sendStatus(t, ctx, c, githubEvent("push-1", "acme/repo-bot")); code != http.StatusAccepted {
		t.Fatalf("binary mode: status %d, want 202", code)
	}
	if code := sendStatus(t, binding.WithForceStructured(ctx), c, githubEvent("push-2", "acme/repo-bot")); code != http.StatusAccepted {
		t.Fatalf("structured mode: status %d, want 202", code)
	}
	hs, _ := f.eventsOn("jetway.events.acme.repo-bot")
	if len(hs) != 2 {
		t.Fatalf("%d events stored, want 2", len(hs))
	}
	for i, want := range []string{"push-1", "push-2"} {
		h := hs[i]
		ext, ok := h.Payload.(events.External)
		if h.ID != want || h.Type != "com.github.push" || !ok {
			t.Fatalf("event %d: %+v, want external com.github.push %s", i, h, want)
		}
		var data struct {
			Ref     string `json:"ref"`
			Commits int    `json:"commits"`
		}
		if err := json.Unmarshal(ext.Data, &data); err != nil || data.Ref != "refs/heads/main" || data.Commits != 3 {
			t.Fatalf("event %d data %s (%v)", i, ext.Data, err)
		}
		if h.Source != "https://github.com/acme/repo" {
			t.Fatalf("event %d source %q", i, h.Source)
		}
	}
}

func TestCloudEvents_batch_is_published_in_order(t *testing.T) {
	f := newFixture(t)
	batch := []map[string]any{
		{"specversion": "1.0", "id": "b1", "source": "ci", "type": "com.github.check", "subject": "acme/s1", "data": map[string]any{"n": 1}},
		{"specversion": "1.0", "id": "b2", "source": "ci", "type": "io.jetway.input", "subject": "acme/s1", "datacontenttype": "application/json", "data": map[string]any{"text": "go"}},
	}
	resp := f.do("POST", "/v1/events", tokAcme, batch, "Content-Type", "application/cloudevents-batch+json")
	got := decode[BatchAccepted](t, resp, http.StatusAccepted)
	if len(got.Events) != 2 || got.Events[0].ID != "b1" || got.Events[1].ID != "b2" {
		t.Fatalf("answer %+v", got)
	}
	hs, _ := f.eventsOn("jetway.events.acme.s1")
	if len(hs) != 2 || hs[0].ID != "b1" || hs[1].ID != "b2" {
		t.Fatalf("stored %d events, want b1 then b2", len(hs))
	}
}

func TestCloudEvents_batch_with_one_refused_event_publishes_none(t *testing.T) {
	f := newFixture(t)
	batch := []map[string]any{
		{"specversion": "1.0", "id": "ok", "source": "ci", "type": "com.github.check", "subject": "acme/s1"},
		{"specversion": "1.0", "id": "bad", "source": "ci", "type": "io.jetway.steer", "subject": "acme/s1", "data": map[string]any{"note": "x"}},
	}
	before := f.lastSeq()
	problemOf(t, f.do("POST", "/v1/events", tokAcme, batch, "Content-Type", "application/cloudevents-batch+json"), http.StatusForbidden)
	if after := f.lastSeq(); after != before {
		t.Fatalf("stream moved from %d to %d: a refused batch was partly published", before, after)
	}
}

func TestRefusals_answer_with_the_right_status_and_a_problem(t *testing.T) {
	f := newFixture(t)
	ce := func(typ, subject string) []byte {
		b, _ := json.Marshal(map[string]any{"specversion": "1.0", "id": "x1", "source": "test", "type": typ,
			"subject": subject, "datacontenttype": "application/json", "data": map[string]any{"text": "t", "note": "n"}})
		return b
	}
	structured := []string{"Content-Type", "application/cloudevents+json"}
	cases := []struct {
		name         string
		method, path string
		token        string
		body         any
		header       []string
		status       int
		detail       string // a substring the detail must hold
	}{
		{"no token", "POST", "/v1/sessions/s1/input", "", `{"text":"hi"}`, nil, 401, "Bearer"},
		{"wrong token", "POST", "/v1/sessions/s1/input", "nope", `{"text":"hi"}`, nil, 401, "not valid"},
		{"wrong token on a listing", "GET", "/v1/sessions", "nope", nil, nil, 401, "not valid"},
		{"other tenant's session via CE subject", "POST", "/v1/events", tokUser, ce("com.example.x", "acme/s1"), structured, 403, `"acme"`},
		{"type not in the token's patterns", "POST", "/v1/events", tokAcme, ce("io.jetway.steer", "acme/s1"), structured, 403, "io.jetway.steer"},
		{"job type from a tenant", "POST", "/v1/events", tokUser, ce("io.jetway.job.exited", "default/s1"), structured, 403, "reserved"},
		{"job type even from an admin", "POST", "/v1/events", tokAdmin, ce("io.jetway.job.overdue", "default/s1"), structured, 403, "reserved"},
		{"a sub-agent's end from a tenant", "POST", "/v1/events", tokUser, ce("io.jetway.agent.finished", "default/s1"), structured, 403, "reserved for runners"},
		{"a sub-agent's work even from an admin", "POST", "/v1/events", tokAdmin, ce("io.jetway.agent.input", "default/s1"), structured, 403, "reserved for runners"},
		{"CE subject without a session", "POST", "/v1/events", tokUser, ce("com.example.x", "default"), structured, 400, "<tenant>/<session>"},
		{"not a CloudEvent", "POST", "/v1/events", tokUser, `{"hello":1}`, []string{"Content-Type", "application/json"}, 415, "ce-"},
		{"jetway type with bad data", "POST", "/v1/events", tokUser, []byte(`{"specversion":"1.0","id":"x","source":"s","type":"io.jetway.input","subject":"default/s1","data":{"txt":"a"}}`), structured, 400, "text"},
		{"non-admin Ground Stop on", "POST", "/v1/stop", tokUser, nil, nil, 403, "admin"},
		{"non-admin Ground Stop off", "DELETE", "/v1/stop", tokUser, nil, nil, 403, "admin"},
		{"unknown route", "GET", "/v1/nothing", tokUser, nil, nil, 404, "/v1/nothing"},
		{"wrong method", "PUT", "/v1/stop", tokUser, nil, nil, 405, "PUT"},
	}
	before := f.lastSeq()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := problemOf(t, f.do(c.method, c.path, c.token, c.body, c.header...), c.status)
			if !strings.Contains(p.Detail, c.detail) {
				t.Fatalf("detail %q does not say %q", p.Detail, c.detail)
			}
		})
	}
	if after := f.lastSeq(); after != before {
		t.Fatalf("refused requests published: stream moved from %d to %d", before, after)
	}
}

func TestBad_session_names_are_refused_naming_the_rule(t *testing.T) {
	f := newFixture(t)
	long := strings.Repeat("a", 65)
	cases := map[string]string{
		"a.b": "may contain only A-Z a-z 0-9 _ -",
		"*":   "may contain only A-Z a-z 0-9 _ -",
		long:  "at most 64",
		"a b": "may contain only A-Z a-z 0-9 _ -",
	}
	for name, rule := range cases {
		t.Run(name, func(t *testing.T) {
			path := "/v1/sessions/" + strings.ReplaceAll(name, " ", "%20") + "/input"
			p := problemOf(t, f.do("POST", path, tokUser, InputRequest{Text: "x"}), http.StatusBadRequest)
			if !strings.Contains(p.Detail, "session") || !strings.Contains(p.Detail, rule) {
				t.Fatalf("detail %q does not name the session rule %q", p.Detail, rule)
			}
			ce := fmt.Sprintf(`{"specversion":"1.0","id":"x","source":"s","type":"com.example.x","subject":"default/%s"}`, name)
			p = problemOf(t, f.do("POST", "/v1/events", tokUser, ce, "Content-Type", "application/cloudevents+json"), http.StatusBadRequest)
			if !strings.Contains(p.Detail, rule) {
				t.Fatalf("CE subject: detail %q does not name the rule %q", p.Detail, rule)
			}
		})
	}
}

func TestOversize_body_is_refused_with_413(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxBodyBytes = 1024 })
	big := InputRequest{Text: strings.Repeat("x", 2048)}
	p := problemOf(t, f.do("POST", "/v1/sessions/s1/input", tokUser, big), http.StatusRequestEntityTooLarge)
	if !strings.Contains(p.Detail, "1024") {
		t.Fatalf("detail %q does not name the limit", p.Detail)
	}
	ce := fmt.Sprintf(`{"specversion":"1.0","id":"x","source":"s","type":"com.example.x","subject":"default/s1","data":"%s"}`, strings.Repeat("y", 2048))
	problemOf(t, f.do("POST", "/v1/events", tokUser, ce, "Content-Type", "application/cloudevents+json"), http.StatusRequestEntityTooLarge)
}

func TestRate_limit_answers_429_with_Retry_After_per_tenant(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.RatePerSecond = 0.01; c.RateBurst = 2 })
	for i := range 2 {
		decode[Accepted](t, f.do("POST", "/v1/sessions/s1/input", tokUser, InputRequest{Text: "x"}), http.StatusAccepted)
		_ = i
	}
	resp := f.do("POST", "/v1/sessions/s1/input", tokUser, InputRequest{Text: "x"})
	p := problemOf(t, resp, http.StatusTooManyRequests)
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || ra < 1 || p.RetryAfter != ra {
		t.Fatalf("Retry-After %q, body retry_after %d", resp.Header.Get("Retry-After"), p.RetryAfter)
	}
	// The admin token is the same tenant: same bucket. Another tenant is not.
	problemOf(t, f.do("GET", "/v1/sessions", tokAdmin, nil), http.StatusTooManyRequests)
	decode[Accepted](t, f.do("POST", "/v1/sessions/s1/input", tokAcme, InputRequest{Text: "x"}), http.StatusAccepted)
}

func TestDuplicate_CE_id_is_published_once_and_reported(t *testing.T) {
	f := newFixture(t)
	c := ceClient(t, f, tokAcme)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for range 3 {
		if code := sendStatus(t, ctx, c, githubEvent("same-id", "acme/s1")); code != http.StatusAccepted {
			t.Fatalf("status %d, want 202", code)
		}
	}
	ce := `{"specversion":"1.0","id":"same-id","source":"https://github.com/acme/repo","type":"com.github.push","subject":"acme/s1"}`
	acc := decode[Accepted](t, f.do("POST", "/v1/events", tokAcme, ce, "Content-Type", "application/cloudevents+json"), http.StatusAccepted)
	if acc.ID != "same-id" || !acc.Duplicate {
		t.Fatalf("answer %+v, want duplicate of same-id", acc)
	}
	in := decode[Accepted](t, f.do("POST", "/v1/sessions/s2/input", tokUser, InputRequest{Text: "x", ID: "retry-1"}), http.StatusAccepted)
	again := decode[Accepted](t, f.do("POST", "/v1/sessions/s2/input", tokUser, InputRequest{Text: "x", ID: "retry-1"}), http.StatusAccepted)
	if in.Duplicate || !again.Duplicate || again.ID != "retry-1" {
		t.Fatalf("input retry: first %+v, second %+v", in, again)
	}
	if hs, _ := f.eventsOn("jetway.events.acme.s1"); len(hs) != 1 {
		t.Fatalf("%d events stored for same-id, want 1", len(hs))
	}
	if hs, _ := f.eventsOn("jetway.events.default.s2"); len(hs) != 1 {
		t.Fatalf("%d inputs stored for retry-1, want 1", len(hs))
	}
}

// publishOut puts a run-output CloudEvent on JETWAY_OUT and returns its
// stream sequence.
func publishOut(t *testing.T, f *fixture, subject string, p events.Payload) uint64 {
	t.Helper()
	e := event.New(events.SpecVersion)
	e.SetID(events.NewID())
	e.SetSource("jetway/runner")
	e.SetType(p.EventType())
	e.SetSubject("default/s1")
	if err := e.SetData(events.ContentTypeJSON, p); err != nil {
		t.Fatal(err)
	}
	msg, err := events.Encode(context.Background(), subject, e)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ack, err := f.js.PublishMsg(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func openStream(t *testing.T, f *fixture, token, lastID string) (*sseReader, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/v1/sessions/s1/stream", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		cancel()
		t.Fatalf("stream: status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	stop := func() { cancel(); resp.Body.Close() }
	t.Cleanup(stop)
	return &sseReader{r: bufio.NewReader(resp.Body)}, stop
}

func TestStream_resumes_exactly_after_Last_Event_ID(t *testing.T) {
	f := newFixture(t)
	out, notify := "jetway.out.default.s1", "jetway.notify.default.s1"
	var seqs []uint64
	seqs = append(seqs, publishOut(t, f, out, events.RunText{Run: "r1", Text: "one"}))
	seqs = append(seqs, publishOut(t, f, "jetway.out.default.other", events.RunText{Run: "r9", Text: "not ours"}))
	seqs = append(seqs, publishOut(t, f, out, events.RunText{Run: "r1", Text: "two"}))
	seqs = append(seqs, publishOut(t, f, notify, events.HeadlineNote{Text: "job 3 (gh) exited 0 after 21m"}))

	sse, stop := openStream(t, f, tokUser, "")
	var got []sseEvent
	for range 3 {
		got = append(got, sse.next(t))
	}
	stop()
	wantIDs := []uint64{seqs[0], seqs[2], seqs[3]}
	for i, ev := range got {
		if ev.ID != strconv.FormatUint(wantIDs[i], 10) {
			t.Fatalf("event %d id %q, want %d", i, ev.ID, wantIDs[i])
		}
	}
	if got[0].Event != events.TypeRunText || got[2].Event != events.TypeHeadline {
		t.Fatalf("event types %q, %q", got[0].Event, got[2].Event)
	}
	var text events.RunText
	if err := json.Unmarshal([]byte(got[1].Data), &text); err != nil || text.Text != "two" {
		t.Fatalf("data %q (%v)", got[1].Data, err)
	}

	s4 := publishOut(t, f, out, events.RunText{Run: "r1", Text: "three"})
	s5 := publishOut(t, f, notify, events.HeadlineNote{Text: "run ended"})
	sse, _ = openStream(t, f, tokUser, got[2].ID)
	a, b := sse.next(t), sse.next(t)
	if a.ID != strconv.FormatUint(s4, 10) || b.ID != strconv.FormatUint(s5, 10) {
		t.Fatalf("after reconnect got ids %s, %s; want %d, %d", a.ID, b.ID, s4, s5)
	}
	sse.nextComment(t) // a heartbeat, and no third event before it
}

func TestStream_is_only_the_callers_tenant(t *testing.T) {
	f := newFixture(t)
	publishOut(t, f, "jetway.out.default.s1", events.RunText{Run: "r1", Text: "secret"})
	mine := publishOut(t, f, "jetway.out.acme.s1", events.RunText{Run: "r2", Text: "acme's"})
	sse, _ := openStream(t, f, tokAcme, "")
	if ev := sse.next(t); ev.ID != strconv.FormatUint(mine, 10) {
		t.Fatalf("acme saw event %s, want only its own %d", ev.ID, mine)
	}
	problemOf(t, f.do("GET", "/v1/sessions/s1/stream", tokUser, nil, "Last-Event-ID", "abc"), http.StatusBadRequest)
}

func TestHealth_ready_and_metrics(t *testing.T) {
	f := newFixture(t)
	if got := decode[map[string]string](t, f.do("GET", "/healthz", "", nil), http.StatusOK); got["status"] != "ok" {
		t.Fatalf("healthz %v", got)
	}
	if got := decode[map[string]string](t, f.do("GET", "/readyz", "", nil), http.StatusOK); got["status"] != "ready" {
		t.Fatalf("readyz %v", got)
	}
	decode[Accepted](t, f.do("POST", "/v1/sessions/s1/input", tokUser, InputRequest{Text: "x"}), http.StatusAccepted)
	problemOf(t, f.do("POST", "/v1/sessions/s1/input", "", InputRequest{Text: "x"}), http.StatusUnauthorized)
	resp := f.do("GET", "/metrics", "", nil)
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`jetway_dispatcher_events_published_total{outcome="published"} 1`,
		`jetway_dispatcher_refusals_total{problem="unauthorized"} 1`,
		`jetway_dispatcher_requests_total{code="202",route="POST /v1/sessions/{session}/input"} 1`,
	} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestReadyz_is_503_when_NATS_is_gone(t *testing.T) {
	f := newFixture(t)
	f.nc.Close()
	p := problemOf(t, f.do("GET", "/readyz", "", nil), http.StatusServiceUnavailable)
	if !strings.Contains(p.Detail, "nats") {
		t.Fatalf("detail %q does not say NATS is the problem", p.Detail)
	}
	if resp := f.do("GET", "/healthz", "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz %d: the process is still up", resp.StatusCode)
	}
}

func TestOpenAPI_is_served_and_docs_copy_is_identical(t *testing.T) {
	f := newFixture(t)
	resp := f.do("GET", "/v1/openapi.yaml", "", nil)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(b, OpenAPI) || !bytes.HasPrefix(b, []byte("openapi: 3.1")) {
		t.Fatalf("served %d, %d bytes", resp.StatusCode, len(b))
	}
	docs, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatalf("docs copy: %v", err)
	}
	if !bytes.Equal(docs, OpenAPI) {
		t.Fatal("docs/openapi.yaml differs from services/dispatcher/openapi.yaml; copy it over")
	}
	for _, path := range []string{"/v1/sessions/{session}/input:", "/v1/sessions/{session}/steer:", "/v1/events:",
		"/v1/sessions:", "/v1/sessions/{session}:", "/v1/sessions/{session}/jobs:", "/v1/sessions/{session}/stream:",
		"/v1/sessions/{session}/recovery:", "/v1/sessions/{session}/transcript:",
		"/v1/sessions/{session}/jobs/{id}/output:", "/v1/sessions/{session}/jobs/{id}/kill:",
		"/v1/agents:", "/v1/agents/{name}:",
		"/v1/stop:", "/v1/signin/codes:", "/v1/signin:", "/v1/whoami:",
		"/healthz:", "/readyz:", "/metrics:", "/v1/openapi.yaml:"} {
		if !bytes.Contains(b, []byte("\n  "+path+"\n")) {
			t.Errorf("OpenAPI document lacks path %s", path)
		}
	}
}

func TestGround_Stop_on_and_off_globally_per_tenant_and_per_session(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	kv, err := f.js.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	st := decode[StopState](t, f.do("POST", "/v1/stop", tokOperator, `{"reason":"model bill"}`), http.StatusOK)
	if !st.GroundStop || st.Scope != "global" || st.Reason != "model bill" || st.By != "operator" {
		t.Fatalf("state %+v", st)
	}
	if rec, on, err := groundstop.Active(ctx, kv, "acme", "any"); err != nil || !on || rec.Reason != "model bill" {
		t.Fatalf("global switch in KV: %+v %v %v", rec, on, err)
	}
	got := decode[StopState](t, f.do("GET", "/v1/stop", tokUser, nil), http.StatusOK)
	if got.Scope != "default/*" || got.GlobalStop == nil || !*got.GlobalStop || got.Reason != "" || got.By != "" {
		t.Fatalf("a tenant token reads %+v, want its own tenant's switch and the global one as on only", got)
	}
	decode[StopState](t, f.do("DELETE", "/v1/stop", tokOperator, nil), http.StatusOK)
	if _, on, _ := groundstop.Active(ctx, kv, "acme", "any"); on {
		t.Fatal("global switch still on after DELETE")
	}

	st = decode[StopState](t, f.do("POST", "/v1/stop", tokAdmin, `{"reason":"our bill"}`), http.StatusOK)
	if st.Scope != "default/*" || st.By != "default" {
		t.Fatalf("a tenant admin's plain stop: %+v, want its own tenant", st)
	}
	if _, on, _ := groundstop.Active(ctx, kv, "default", "s9"); !on {
		t.Fatal("tenant switch does not stop the tenant's sessions")
	}
	if got := decode[StopState](t, f.do("GET", "/v1/stop?session=s9", tokUser, nil), http.StatusOK); got.GroundStop ||
		got.TenantStop == nil || !*got.TenantStop {
		t.Fatalf("a session's read under its tenant's stop: %+v, want tenant_stop true", got)
	}
	decode[StopState](t, f.do("DELETE", "/v1/stop", tokAdmin, nil), http.StatusOK)
	if _, on, _ := groundstop.Active(ctx, kv, "default", "s9"); on {
		t.Fatal("tenant switch still on after DELETE")
	}

	st = decode[StopState](t, f.do("POST", "/v1/stop?session=s1", tokAdmin, nil), http.StatusOK)
	if st.Scope != "default/s1" {
		t.Fatalf("scope %q", st.Scope)
	}
	if _, on, _ := groundstop.Active(ctx, kv, "default", "s1"); !on {
		t.Fatal("session switch not on")
	}
	if _, on, _ := groundstop.Active(ctx, kv, "default", "s2"); on {
		t.Fatal("another session is stopped too")
	}
	decode[StopState](t, f.do("DELETE", "/v1/stop?session=s1", tokAdmin, nil), http.StatusOK)
	if _, on, _ := groundstop.Active(ctx, kv, "default", "s1"); on {
		t.Fatal("session switch still on after DELETE")
	}
	p := problemOf(t, f.do("POST", "/v1/stop?session=a.b", tokAdmin, nil), http.StatusBadRequest)
	if !strings.Contains(p.Detail, "A-Z a-z 0-9 _ -") {
		t.Fatalf("detail %q", p.Detail)
	}
}

func TestGround_Stop_a_tenant_admin_asking_for_global_is_refused_and_other_tenants_keep_running(t *testing.T) {
	f := newFixture(t)
	startNATSAPI(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	kv, err := f.js.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []struct{ method, path string }{
		{"POST", "/v1/stop?scope=global"},
		{"DELETE", "/v1/stop?scope=global"},
		{"GET", "/v1/stop?scope=global"},
		{"POST", "/v1/stop?tenant=default"},
		{"GET", "/v1/stop?tenant=default"},
	} {
		resp := f.do(req.method, req.path, tokAcmeAdmin, `{"reason":"stop the world"}`)
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
			t.Errorf("%s %s: Content-Type %q, want problem+json", req.method, req.path, ct)
		}
		p := problemOf(t, resp, http.StatusForbidden)
		if !strings.Contains(p.Detail, "operator") {
			t.Errorf("%s %s: detail %q does not say only an operator may", req.method, req.path, p.Detail)
		}
	}
	// Its own tenant is what it may stop.
	decode[StopState](t, f.do("POST", "/v1/stop", tokAcmeAdmin, `{"reason":"acme only"}`), http.StatusOK)
	if _, on, err := groundstop.Get(ctx, kv, "", ""); err != nil || on {
		t.Fatalf("global switch on=%v err=%v after a tenant admin's requests", on, err)
	}
	if _, on, _ := groundstop.Active(ctx, kv, "acme", "s1"); !on {
		t.Fatal("acme's own stop did not stop acme")
	}
	if _, on, _ := groundstop.Active(ctx, kv, "default", "s1"); on {
		t.Fatal("acme's admin stopped tenant default")
	}
	// The same refusal over the NATS API.
	resp := natsRequest(t, f, SubjectStop, tokAcmeAdmin, `{"action":"on","scope":"global"}`)
	if code := resp.Header.Get("Nats-Service-Error-Code"); code != "403" {
		t.Fatalf("NATS global stop by a tenant admin: code %q (%s), want 403", code, resp.Data)
	}
	if _, on, _ := groundstop.Get(ctx, kv, "", ""); on {
		t.Fatal("global switch on after a tenant admin's NATS request")
	}
	resp = natsRequest(t, f, SubjectStop, tokOperator, `{"action":"on","scope":"global","reason":"incident"}`)
	var st StopState
	if err := json.Unmarshal(resp.Data, &st); err != nil || !st.GroundStop || st.Scope != "global" {
		t.Fatalf("operator's NATS global stop: %s (%v)", resp.Data, err)
	}
}

func TestGround_Stop_a_tenant_never_sees_another_tenants_switch_or_reason_and_the_operator_does(t *testing.T) {
	f := newFixture(t)
	startNATSAPI(t, f)
	decode[StopState](t, f.do("POST", "/v1/stop?session=s1", tokAcmeAdmin, `{"reason":"acme-secret-session"}`), http.StatusOK)
	decode[StopState](t, f.do("POST", "/v1/stop", tokAcmeAdmin, `{"reason":"acme-secret-tenant"}`), http.StatusOK)
	decode[StopState](t, f.do("POST", "/v1/stop?session=mine", tokAdmin, `{"reason":"default-own"}`), http.StatusOK)
	decode[StopState](t, f.do("POST", "/v1/stop", tokOperator, `{"reason":"operator-incident"}`), http.StatusOK)

	for _, tok := range []string{tokUser, tokAdmin} {
		resp := f.do("GET", "/v1/stop", tok, nil)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/stop: %d %s", resp.StatusCode, body)
		}
		for _, secret := range []string{"acme", "operator-incident", "operator"} {
			if strings.Contains(string(body), secret) {
				t.Fatalf("tenant default reads %q in %s", secret, body)
			}
		}
		var st StopState
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatal(err)
		}
		if st.GlobalStop == nil || !*st.GlobalStop || len(st.Sessions) != 1 || st.Sessions[0].Reason != "default-own" {
			t.Fatalf("tenant default's view %s: want global on (no reason) and its own session", body)
		}
	}
	resp := natsRequest(t, f, SubjectStop, tokUser, `{"action":"get"}`)
	if strings.Contains(string(resp.Data), "acme") || strings.Contains(string(resp.Data), "incident") {
		t.Fatalf("NATS get leaks another tenant's switch: %s", resp.Data)
	}
	for _, path := range []string{"/v1/stop?tenant=acme", "/v1/stop?scope=global"} {
		problemOf(t, f.do("GET", path, tokUser, nil), http.StatusForbidden)
	}

	op := decode[StopState](t, f.do("GET", "/v1/stop", tokOperator, nil), http.StatusOK)
	if op.Scope != "global" || op.Reason != "operator-incident" {
		t.Fatalf("operator reads global %+v", op)
	}
	acme := decode[StopState](t, f.do("GET", "/v1/stop?tenant=acme", tokOperator, nil), http.StatusOK)
	if acme.Scope != "acme/*" || acme.Reason != "acme-secret-tenant" || len(acme.Sessions) != 1 ||
		acme.Sessions[0].Reason != "acme-secret-session" {
		t.Fatalf("operator reads acme %+v", acme)
	}
}

func TestSessions_and_jobs_list_only_the_callers_records(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if got := decode[SessionList](t, f.do("GET", "/v1/sessions", tokUser, nil), http.StatusOK); len(got.Sessions) != 0 {
		t.Fatalf("fresh bus lists %+v", got)
	}
	if got := decode[JobList](t, f.do("GET", "/v1/sessions/s1/jobs", tokUser, nil), http.StatusOK); got.Jobs == nil || len(got.Jobs) != 0 {
		t.Fatalf("fresh bus lists jobs %+v, want an empty list", got)
	}
	problemOf(t, f.do("GET", "/v1/sessions/s1", tokUser, nil), http.StatusNotFound)

	sessions, _ := f.js.KeyValue(ctx, bus.BucketSessions)
	jobs, _ := f.js.KeyValue(ctx, bus.BucketJobs)
	put := func(kv jetstream.KeyValue, key, val string) {
		if _, err := kv.Put(ctx, key, []byte(val)); err != nil {
			t.Fatal(err)
		}
	}
	put(sessions, "default.s1", `{"state":"idle"}`)
	put(sessions, "default.s2", `not json`)
	put(sessions, "acme.s1", `{"state":"running"}`)
	put(jobs, "default.s1.3", `{"program":"gh"}`)
	put(jobs, "default.s1.4", `{"program":"make"}`)
	put(jobs, "default.s2.1", `{"program":"other session"}`)
	put(jobs, "acme.s1.1", `{"program":"other tenant"}`)

	list := decode[SessionList](t, f.do("GET", "/v1/sessions", tokUser, nil), http.StatusOK)
	if len(list.Sessions) != 2 || list.Sessions[0].Session != "s1" || list.Sessions[1].Session != "s2" {
		t.Fatalf("sessions %+v", list)
	}
	if string(list.Sessions[0].Record) != `{"state":"idle"}` || string(list.Sessions[1].Record) != `"not json"` {
		t.Fatalf("records %s, %s", list.Sessions[0].Record, list.Sessions[1].Record)
	}
	one := decode[SessionInfo](t, f.do("GET", "/v1/sessions/s1", tokAcme, nil), http.StatusOK)
	if string(one.Record) != `{"state":"running"}` {
		t.Fatalf("acme's s1 is %s", one.Record)
	}
	jl := decode[JobList](t, f.do("GET", "/v1/sessions/s1/jobs", tokUser, nil), http.StatusOK)
	if len(jl.Jobs) != 2 || jl.Jobs[0].Job != "3" || jl.Jobs[1].Job != "4" {
		t.Fatalf("jobs %+v", jl)
	}
}

func TestInput_carries_the_callers_trace_into_the_event(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := newFixture(t, func(c *Config) { c.TracerProvider = tp })
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	resp := f.do("POST", "/v1/sessions/s1/input", tokUser, `{"text":"traced"}`,
		"Content-Type", "application/json", "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	decode[Accepted](t, resp, http.StatusAccepted)
	hs, _ := f.eventsOn("jetway.events.default.s1")
	var tp0 string
	if len(hs) != 1 || hs[0].Event.ExtensionAs(events.ExtTraceParent, &tp0) != nil {
		t.Fatalf("stored %d events, traceparent missing", len(hs))
	}
	if !strings.Contains(tp0, traceID) || strings.Contains(tp0, "00f067aa0ba902b7") {
		t.Fatalf("traceparent %q: want trace %s with the dispatcher's own span", tp0, traceID)
	}
}

func TestCloudEvent_keeps_its_own_trace_when_the_request_has_none(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := newFixture(t, func(c *Config) { c.TracerProvider = tp })
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	ce := `{"specversion":"1.0","id":"t1","source":"s","type":"com.github.push","subject":"acme/s1","traceparent":"00-` + traceID + `-b7ad6b7169203331-01"}`
	decode[Accepted](t, f.do("POST", "/v1/events", tokAcme, ce, "Content-Type", "application/cloudevents+json"), http.StatusAccepted)
	hs, _ := f.eventsOn("jetway.events.acme.s1")
	var got string
	if len(hs) != 1 || hs[0].Event.ExtensionAs(events.ExtTraceParent, &got) != nil || !strings.Contains(got, traceID) {
		t.Fatalf("traceparent %q, want trace %s kept", got, traceID)
	}
}

// startNATSAPI serves the fixture's dispatcher on its NATS API too.
func startNATSAPI(t *testing.T, f *fixture) {
	t.Helper()
	svc, err := f.d.StartNATS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
}

func natsRequest(t *testing.T, f *fixture, subject, token string, body string, header ...string) *nats.Msg {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = []byte(body)
	if token != "" {
		m.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		m.Header.Set(header[i], header[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	resp, err := f.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	return resp
}

func TestNATS_API_has_the_same_operations_auth_and_errors(t *testing.T) {
	f := newFixture(t)
	svc, err := f.d.StartNATS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })

	resp := natsRequest(t, f, SubjectInput, tokUser, `{"session":"s1","text":"over nats"}`)
	var acc Accepted
	if err := json.Unmarshal(resp.Data, &acc); err != nil || acc.ID == "" || resp.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("input reply %s %v (%v)", resp.Data, resp.Header, err)
	}
	hs, _ := f.eventsOn("jetway.events.default.s1")
	if len(hs) != 1 || hs[0].ID != acc.ID {
		t.Fatalf("stored %+v, want %s", hs, acc.ID)
	}

	resp = natsRequest(t, f, SubjectEvent, tokAcme, "",
		"ce-specversion", "1.0", "ce-id", "n1", "ce-source", "ci", "ce-type", "com.github.push", "ce-subject", "acme/s1")
	if err := json.Unmarshal(resp.Data, &acc); err != nil || acc.ID != "n1" {
		t.Fatalf("event reply %s (%v)", resp.Data, err)
	}

	refusals := []struct {
		subject, token, body, code string
	}{
		{SubjectInput, "", `{"session":"s1","text":"x"}`, "401"},
		{SubjectInput, tokUser, `{"session":"a.b","text":"x"}`, "400"},
		{SubjectStop, tokUser, `{"action":"on"}`, "403"},
		{SubjectJobs, tokUser, `{"session":"*"}`, "400"},
	}
	for _, r := range refusals {
		resp := natsRequest(t, f, r.subject, r.token, r.body)
		if got := resp.Header.Get("Nats-Service-Error-Code"); got != r.code {
			t.Fatalf("%s %s: code %q, want %s (%s)", r.subject, r.body, got, r.code, resp.Data)
		}
		var p Problem
		if err := json.Unmarshal(resp.Data, &p); err != nil || strconv.Itoa(p.Status) != r.code || p.Detail == "" {
			t.Fatalf("%s: problem body %s (%v)", r.subject, resp.Data, err)
		}
	}

	resp = natsRequest(t, f, SubjectStop, tokAdmin, `{"action":"on","session":"s1"}`)
	var st StopState
	if err := json.Unmarshal(resp.Data, &st); err != nil || !st.GroundStop || st.Scope != "default/s1" {
		t.Fatalf("stop reply %s (%v)", resp.Data, err)
	}
	resp = natsRequest(t, f, SubjectSessions, tokUser, ``)
	var sl SessionList
	if err := json.Unmarshal(resp.Data, &sl); err != nil || sl.Sessions == nil {
		t.Fatalf("sessions reply %s (%v)", resp.Data, err)
	}
}

func TestServe_runs_HTTP_and_NATS_until_the_context_ends(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- f.d.Serve(ctx, ln) }()
	t.Cleanup(cancel)

	url := "http://" + ln.Addr().String() + "/healthz"
	deadline := time.Now().Add(waitFor)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("never healthy: %v", err)
		}
		<-tick.C
	}
	pctx, pcancel := context.WithTimeout(context.Background(), waitFor)
	defer pcancel()
	ping, err := f.nc.RequestWithContext(pctx, "$SRV.PING."+ServiceName, nil)
	if err != nil || !bytes.Contains(ping.Data, []byte(ServiceName)) {
		t.Fatalf("micro ping: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve returned %v after cancel", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Serve did not return after cancel")
	}
}

func TestA_body_under_max_body_but_over_the_bus_max_payload_is_413_and_the_dispatcher_goes_on(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxBodyBytes = 4 << 20 })
	limit := f.nc.MaxPayload()
	big := InputRequest{Text: strings.Repeat("x", int(limit)-100)}
	p := problemOf(t, f.do("POST", "/v1/sessions/s1/input", tokUser, big), http.StatusRequestEntityTooLarge)
	if !strings.Contains(p.Detail, strconv.FormatInt(limit, 10)) || !strings.Contains(p.Detail, "max_payload") {
		t.Fatalf("detail %q does not name the bus limit %d", p.Detail, limit)
	}
	ce := fmt.Sprintf(`{"specversion":"1.0","id":"big","source":"s","type":"com.example.x","subject":"default/s1","data":"%s"}`,
		strings.Repeat("y", int(limit)))
	problemOf(t, f.do("POST", "/v1/events", tokUser, ce, "Content-Type", "application/cloudevents+json"), http.StatusRequestEntityTooLarge)
	// The refusal happened before the bus: the connection still works.
	decode[Accepted](t, f.do("POST", "/v1/sessions/s1/input", tokUser, InputRequest{Text: "small"}), http.StatusAccepted)
	// Nor did the refused event claim its id: the corrected retry with the
	// same id is stored, not answered as a duplicate of nothing.
	fixed := `{"specversion":"1.0","id":"big","source":"s","type":"com.example.x","subject":"default/s1","data":"small"}`
	if a := decode[Accepted](t, f.do("POST", "/v1/events", tokUser, fixed, "Content-Type", "application/cloudevents+json"), http.StatusAccepted); a.Duplicate {
		t.Fatal("the corrected retry of a refused event was answered as a duplicate")
	}
}

func TestAn_impossible_Last_Event_ID_is_400_not_503(t *testing.T) {
	f := newFixture(t)
	for _, id := range []string{"18446744073709551615", "18446744073709551616", "-1", "+5"} {
		p := problemOf(t, f.do("GET", "/v1/sessions/s1/stream", tokUser, nil, "Last-Event-ID", id), http.StatusBadRequest)
		if !strings.Contains(p.Detail, "Last-Event-ID") {
			t.Errorf("Last-Event-ID %q: detail %q", id, p.Detail)
		}
	}
	problemOf(t, f.do("GET", "/v1/sessions/s1/stream?last_event_id=18446744073709551615", tokUser, nil), http.StatusBadRequest)
}

func TestA_structured_CloudEvent_over_HTTP_with_data_and_data_base64_is_400(t *testing.T) {
	f := newFixture(t)
	both := `{"specversion":"1.0","id":"both","source":"s","type":"com.example.x","subject":"default/s1","data":{"a":1},"data_base64":"eyJiIjoyfQ=="}`
	p := problemOf(t, f.do("POST", "/v1/events", tokUser, both, "Content-Type", "application/cloudevents+json"), http.StatusBadRequest)
	if !strings.Contains(p.Detail, "data_base64") {
		t.Fatalf("detail %q does not name data_base64", p.Detail)
	}
	p = problemOf(t, f.do("POST", "/v1/events", tokUser, "["+both+"]", "Content-Type", "application/cloudevents-batch+json"), http.StatusBadRequest)
	if !strings.Contains(p.Detail, "event 1 of the batch") {
		t.Fatalf("batch detail %q", p.Detail)
	}
	// Either one alone is still accepted.
	one := `{"specversion":"1.0","id":"one","source":"s","type":"com.example.x","subject":"default/s1","data":{"a":1}}`
	decode[Accepted](t, f.do("POST", "/v1/events", tokUser, one, "Content-Type", "application/cloudevents+json"), http.StatusAccepted)
	one = `{"specversion":"1.0","id":"two","source":"s","type":"com.example.x","subject":"default/s1","data_base64":"eyJiIjoyfQ=="}`
	decode[Accepted](t, f.do("POST", "/v1/events", tokUser, one, "Content-Type", "application/cloudevents+json"), http.StatusAccepted)
}

func TestAn_operator_token_of_no_tenant_may_use_Ground_Stop_only(t *testing.T) {
	f := newFixture(t)
	startNATSAPI(t, f)
	for _, path := range []string{"/v1/sessions", "/v1/sessions/s1", "/v1/sessions/s1/jobs", "/v1/sessions/s1/stream"} {
		p := problemOf(t, f.do("GET", path, tokOperator, nil), http.StatusForbidden)
		if !strings.Contains(p.Detail, "no tenant") {
			t.Errorf("GET %s: detail %q", path, p.Detail)
		}
	}
	problemOf(t, f.do("POST", "/v1/sessions/s1/input", tokOperator, InputRequest{Text: "x"}), http.StatusForbidden)
	resp := natsRequest(t, f, SubjectSessions, tokOperator, ``)
	if code := resp.Header.Get("Nats-Service-Error-Code"); code != "403" {
		t.Fatalf("NATS sessions as an operator of no tenant: code %q (%s)", code, resp.Data)
	}
	decode[StopState](t, f.do("GET", "/v1/stop", tokOperator, nil), http.StatusOK)
}

// A request that came through a tenant account's import names the tenant
// in its subject: it acts for that tenant, and a token of another tenant
// is refused there (the account is where it came from, the token what it
// may do), while an operator keeps its Ground Stop view from any account.
func TestNATS_API_through_a_tenant_account_acts_for_the_subjects_tenant_only(t *testing.T) {
	f := newFixture(t)
	svc, err := f.d.StartNATS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })

	resp := natsRequest(t, f, api.TenantSubject("acme", "input"), tokAcme, `{"session":"s9","text":"through acme's account"}`)
	var acc Accepted
	if err := json.Unmarshal(resp.Data, &acc); err != nil || acc.ID == "" {
		t.Fatalf("input through acme's account: %s (%v)", resp.Data, err)
	}
	if hs, _ := f.eventsOn("jetway.events.acme.s9"); len(hs) != 1 || hs[0].ID != acc.ID {
		t.Fatalf("stored %+v, want %s on acme's s9", hs, acc.ID)
	}
	for _, name := range api.Endpoints {
		resp := natsRequest(t, f, api.TenantSubject("acme", name), tokUser, `{"session":"s9","text":"x"}`)
		if got := resp.Header.Get("Nats-Service-Error-Code"); got != "403" {
			t.Errorf("%s through acme's account with tenant default's token: code %q, want 403 (%s)", name, got, resp.Data)
		}
	}
	if hs, _ := f.eventsOn("jetway.events.default.s9"); len(hs) != 0 {
		t.Errorf("a request through acme's account stored %d events for tenant default", len(hs))
	}
	resp = natsRequest(t, f, api.TenantSubject("acme", "stop"), tokOperator, `{"action":"get","scope":"global"}`)
	if got := resp.Header.Get("Nats-Service-Error-Code"); got != "" {
		t.Errorf("an operator's Ground Stop read through acme's account: code %s (%s)", got, resp.Data)
	}
}
