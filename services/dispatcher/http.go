package dispatcher

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"jetway/pkg/auth"
	"jetway/pkg/telemetry"
	"jetway/services/dispatcher/console"
)

// OpenAPI is the OpenAPI 3.1 description of the HTTP API, served at
// GET /v1/openapi.yaml. docs/openapi.yaml is a copy kept identical by a test.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Handler returns the HTTP API. It can be mounted on any server (jetway dev
// mounts it next to the other services); Run serves it on Config.Addr.
func (d *Dispatcher) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions/{session}/input", d.handleInput)
	mux.HandleFunc("POST /v1/sessions/{session}/steer", d.handleSteer)
	mux.HandleFunc("POST /v1/sessions/{session}/resume", d.handleResume)
	mux.HandleFunc("GET /v1/sessions/{session}/layovers", d.handleLayovers)
	mux.HandleFunc("DELETE /v1/sessions/{session}/layover", d.handleCancelLayover)
	mux.HandleFunc("GET /v1/sessions/{session}/recovery", d.handleRecovery)
	mux.HandleFunc("PUT /v1/sessions/{session}/recovery", d.handleRecovery)
	mux.HandleFunc("DELETE /v1/sessions/{session}/recovery", d.handleRecovery)
	mux.HandleFunc("POST /v1/events", d.handleEvents)
	mux.HandleFunc("GET /v1/sessions", d.handleSessions)
	mux.HandleFunc("GET /v1/sessions/{session}", d.handleSession)
	mux.HandleFunc("GET /v1/sessions/{session}/jobs", d.handleJobs)
	mux.HandleFunc("GET /v1/sessions/{session}/transcript", d.handleTranscript)
	mux.HandleFunc("GET /v1/sessions/{session}/jobs/{id}/output", d.handleJobOutput)
	mux.HandleFunc("POST /v1/sessions/{session}/jobs/{id}/kill", d.handleKillJob)
	mux.HandleFunc("GET /v1/sessions/{session}/stream", d.handleStream)
	mux.HandleFunc("GET /v1/agents", d.handleAgents)
	mux.HandleFunc("GET /v1/agents/{name}", d.handleAgent)
	mux.HandleFunc("PUT /v1/agents/{name}", d.handleAgent)
	mux.HandleFunc("DELETE /v1/agents/{name}", d.handleAgent)
	mux.HandleFunc("GET /v1/stop", d.handleStop)
	mux.HandleFunc("POST /v1/stop", d.handleStop)
	mux.HandleFunc("DELETE /v1/stop", d.handleStop)
	mux.HandleFunc("GET /v1/cluster", d.handleCluster)
	web := console.Handler()
	mux.Handle("GET /{$}", web)
	mux.Handle("GET "+console.Prefix, web)
	mux.HandleFunc("GET /v1/openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(OpenAPI)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", d.handleReady)
	mux.Handle("GET /metrics", telemetry.MetricsHandler(d.cfg.Registry))
	return &instrumented{d: d, mux: mux}
}

// instrumented wraps the mux with tracing, metrics and problem+json for the
// mux's own 404/405 answers.
type instrumented struct {
	d   *Dispatcher
	mux *http.ServeMux
}

type remoteParentKey struct{}

func (h *instrumented) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	_, pattern := h.mux.Handler(r)
	route := pattern
	if route == "" {
		route = "unmatched"
	}
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	remote := trace.SpanContextFromContext(ctx).IsRemote()
	ctx = context.WithValue(ctx, remoteParentKey{}, remote)
	ctx, span := h.d.tracer.Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
	defer span.End()
	r = r.WithContext(ctx)

	sw := &statusWriter{ResponseWriter: w}
	if pattern == "" {
		h.notFound(sw, r)
	} else {
		h.mux.ServeHTTP(sw, r)
	}
	status := sw.status
	if status == 0 {
		status = http.StatusOK
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	h.d.metrics.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	log := telemetry.WithTrace(ctx, h.d.log)
	log.Debug().Str("method", r.Method).Str("route", route).
		Int("status", status).Dur("took", time.Since(start)).Msg("request")
	if route != "GET /v1/sessions/{session}/stream" {
		h.d.metrics.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	}
}

// notFound turns the mux's plain-text 404 or 405 into a problem.
func (h *instrumented) notFound(w http.ResponseWriter, r *http.Request) {
	c := &captureWriter{header: http.Header{}}
	h.mux.ServeHTTP(c, r)
	if allow := c.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	if c.status == http.StatusMethodNotAllowed {
		writeProblem(w, r, problemf(http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed",
			"%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, c.header.Get("Allow")))
		return
	}
	writeProblem(w, r, problemf(http.StatusNotFound, "not-found", "Not found", "no route for %s %s", r.Method, r.URL.Path))
}

type captureWriter struct {
	header http.Header
	status int
}

func (c *captureWriter) Header() http.Header         { return c.header }
func (c *captureWriter) Write(b []byte) (int, error) { return len(b), nil }
func (c *captureWriter) WriteHeader(code int)        { c.status = code }

// statusWriter records the status for metrics; Unwrap keeps
// http.ResponseController (flushing SSE) working through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// fail answers with the problem err maps to and counts the refusal.
func (d *Dispatcher) fail(w http.ResponseWriter, r *http.Request, err error) {
	p := toProblem(err)
	d.metrics.refused.WithLabelValues(p.Slug()).Inc()
	log := telemetry.WithTrace(r.Context(), d.log)
	ev := log.Info()
	if p.Status >= 500 {
		ev = log.Error()
	}
	ev.Str("method", r.Method).Str("path", r.URL.Path).Int("status", p.Status).Str("problem", p.Slug()).
		Str("detail", p.Detail).Msg("request refused")
	if sc := trace.SpanFromContext(r.Context()); sc.IsRecording() {
		sc.SetAttributes(attribute.String("jetway.problem", p.Slug()))
	}
	writeProblem(w, r, p)
}

// principal authenticates the request's bearer token and applies the rate
// limit.
func (d *Dispatcher) principal(r *http.Request) (auth.Principal, error) {
	p, err := d.authenticate(auth.BearerToken(r.Header.Get("Authorization")))
	if err == nil && r.URL.Path != "/v1/stop" {
		err = needsTenant(p)
	}
	return p, err
}

// readBody reads the whole body under the size limit.
func (d *Dispatcher) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, d.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, problemf(http.StatusBadRequest, "bad-request", "Unreadable body", "read body: %v", err)
	}
	return b, nil
}

// decodeJSON reads a JSON object body into v.
func (d *Dispatcher) decodeJSON(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	b, err := d.readBody(w, r)
	if err != nil {
		return err
	}
	if optional && len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return problemf(http.StatusBadRequest, "bad-request", "Malformed JSON body", "%v", err)
	}
	return nil
}

func (d *Dispatcher) handleInput(w http.ResponseWriter, r *http.Request) {
	p, err := d.principal(r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	var req InputRequest
	if err := d.decodeJSON(w, r, &req, false); err != nil {
		d.fail(w, r, err)
		return
	}
	acc, err := d.Input(r.Context(), p, r.PathValue("session"), req)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, acc)
}

func (d *Dispatcher) handleSteer(w http.ResponseWriter, r *http.Request) {
	p, err := d.principal(r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	var req SteerRequest
	if err := d.decodeJSON(w, r, &req, false); err != nil {
		d.fail(w, r, err)
		return
	}
	acc, err := d.Steer(r.Context(), p, r.PathValue("session"), req)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, acc)
}

// handleEvents is the CloudEvents HTTP binding: binary mode (ce-* headers),
// structured mode (application/cloudevents+json) and batch mode
// (application/cloudevents-batch+json), read by the SDK itself.
func (d *Dispatcher) handleEvents(w http.ResponseWriter, r *http.Request) {
	p, err := d.principal(r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	body, err := d.readBody(w, r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	evs, batch, err := readCloudEvents(r.Header, body)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	for _, e := range evs {
		if err := d.checkEvent(r.Context(), p, e); err != nil {
			d.fail(w, r, err)
			return
		}
	}
	out := make([]Accepted, 0, len(evs))
	for _, e := range evs {
		acc, err := d.PublishEvent(r.Context(), p, e)
		if err != nil {
			d.fail(w, r, err)
			return
		}
		out = append(out, acc)
	}
	if batch {
		writeJSON(w, http.StatusAccepted, BatchAccepted{Events: out})
		return
	}
	writeJSON(w, http.StatusAccepted, out[0])
}

// maxBatch bounds the events in one batch request.
const maxBatch = 100

// readCloudEvents reads one event (binary or structured mode) or a batch
// from an HTTP request's headers and body with the SDK's HTTP binding.
func readCloudEvents(h http.Header, body []byte) ([]event.Event, bool, error) {
	msg := cehttp.NewMessage(h, io.NopCloser(bytes.NewReader(body)))
	defer msg.Finish(nil)
	switch msg.ReadEncoding() {
	case binding.EncodingStructured, binding.EncodingBatch:
		// The SDK keeps one of data and data_base64 and silently drops the
		// other; the NATS API refuses the pair, and so must this door, or
		// the same event would mean different things by the way it came.
		if err := refuseDataPair(body, msg.ReadEncoding() == binding.EncodingBatch); err != nil {
			return nil, msg.ReadEncoding() == binding.EncodingBatch, err
		}
	}
	if msg.ReadEncoding() == binding.EncodingBatch {
		evs, err := cehttp.NewEventsFromHTTPRequest(&http.Request{Header: h, Body: io.NopCloser(bytes.NewReader(body))})
		if err != nil {
			return nil, true, problemf(http.StatusBadRequest, "invalid-event", "Invalid CloudEvents batch", "%v", err)
		}
		switch {
		case len(evs) == 0:
			return nil, true, problem(http.StatusBadRequest, "invalid-event", "Invalid CloudEvents batch", "the batch is empty")
		case len(evs) > maxBatch:
			return nil, true, problemf(http.StatusBadRequest, "invalid-event", "Invalid CloudEvents batch",
				"the batch holds %d events, at most %d are accepted", len(evs), maxBatch)
		}
		return evs, true, nil
	}
	if msg.ReadEncoding() == binding.EncodingUnknown {
		return nil, false, problem(http.StatusUnsupportedMediaType, "unsupported-media-type", "Not a CloudEvent",
			"send ce-* headers (binary mode) or Content-Type application/cloudevents+json (structured mode)")
	}
	e, err := binding.ToEvent(context.Background(), msg)
	if err != nil {
		return nil, false, problemf(http.StatusBadRequest, "invalid-event", "Invalid CloudEvent", "%v", err)
	}
	return []event.Event{*e}, false, nil
}

// refuseDataPair answers 400 when a structured event (or any event of a
// batch) carries both data and data_base64. Bodies that are not JSON are
// left for the SDK to refuse with its own words.
func refuseDataPair(body []byte, batch bool) error {
	var objs []map[string]json.RawMessage
	if batch {
		if json.Unmarshal(body, &objs) != nil {
			return nil
		}
	} else {
		var one map[string]json.RawMessage
		if json.Unmarshal(body, &one) != nil {
			return nil
		}
		objs = append(objs, one)
	}
	isSet := func(raw json.RawMessage, ok bool) bool {
		return ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
	}
	for i, o := range objs {
		d, hasData := o["data"]
		b, hasB64 := o["data_base64"]
		if isSet(d, hasData) && isSet(b, hasB64) {
			where := "the event"
			if batch {
				where = "event " + strconv.Itoa(i+1) + " of the batch"
			}
			return problemf(http.StatusBadRequest, "invalid-event", "Invalid CloudEvent",
				"%s has both data and data_base64; send one (data_base64 for binary data)", where)
		}
	}
	return nil
}

func (d *Dispatcher) handleSessions(w http.ResponseWriter, r *http.Request) {
	p, err := d.principal(r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	ss, err := d.Sessions(r.Context(), p)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, SessionList{Sessions: ss})
}

func (d *Dispatcher) handleJobs(w http.ResponseWriter, r *http.Request) {
	p, err := d.principal(r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	jobs, err := d.Jobs(r.Context(), p, r.PathValue("session"))
	if err != nil {
		d.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, JobList{Jobs: jobs})
}

func (d *Dispatcher) handleStop(w http.ResponseWriter, r *http.Request) {
	p, err := d.principal(r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	t := StopTarget{Scope: q.Get("scope"), Tenant: q.Get("tenant"), Session: q.Get("session")}
	var st StopState
	switch r.Method {
	case http.MethodPost:
		var req StopRequest
		if err = d.decodeJSON(w, r, &req, true); err == nil {
			st, err = d.SetStop(r.Context(), p, t, req)
		}
	case http.MethodDelete:
		st, err = d.ClearStop(r.Context(), p, t)
	default:
		st, err = d.Stop(r.Context(), p, t)
	}
	if err != nil {
		d.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (d *Dispatcher) handleReady(w http.ResponseWriter, r *http.Request) {
	if err := d.readyCheck(r.Context()); err != nil {
		writeProblem(w, r, problem(http.StatusServiceUnavailable, "not-ready", "Not ready", err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
