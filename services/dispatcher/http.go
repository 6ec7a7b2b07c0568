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

// httpAPI is the HTTP transport: it reads a request into a core's call
// and writes the answer or the problem; what is allowed and what it means
// is the core's.
type httpAPI struct {
	*cores
}

// httpOp is one route's operation: the request read into a core's call,
// for a caller the gate has let through.
type httpOp func(w http.ResponseWriter, r *http.Request, p auth.Principal) (any, error)

// handler is the HTTP API (Dispatcher.Handler).
func (d *httpAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/sessions/{session}/input", d.serve(http.StatusAccepted, d.handleInput))
	mux.Handle("POST /v1/sessions/{session}/steer", d.serve(http.StatusAccepted, d.handleSteer))
	mux.Handle("POST /v1/sessions/{session}/resume", d.serve(http.StatusAccepted, d.handleResume))
	mux.Handle("GET /v1/sessions/{session}/layovers", d.serve(http.StatusOK, d.handleLayovers))
	mux.Handle("DELETE /v1/sessions/{session}/layover", d.serve(http.StatusOK, d.handleCancelLayover))
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		mux.Handle(m+" /v1/sessions/{session}/recovery", d.serve(http.StatusOK, d.handleRecovery))
	}
	mux.Handle("POST /v1/events", d.serve(http.StatusAccepted, d.handleEvents))
	mux.Handle("GET /v1/sessions", d.serve(http.StatusOK, d.handleSessions))
	mux.Handle("GET /v1/sessions/{session}", d.serve(http.StatusOK, d.handleSession))
	mux.Handle("GET /v1/sessions/{session}/jobs", d.serve(http.StatusOK, d.handleJobs))
	mux.Handle("GET /v1/sessions/{session}/transcript", d.serve(http.StatusOK, d.handleTranscript))
	mux.Handle("GET /v1/sessions/{session}/jobs/{id}/output", d.serve(http.StatusOK, d.handleJobOutput))
	mux.Handle("POST /v1/sessions/{session}/jobs/{id}/kill", d.serve(http.StatusOK, d.handleKillJob))
	mux.HandleFunc("GET /v1/sessions/{session}/stream", d.handleStream)
	mux.Handle("GET /v1/agents", d.serve(http.StatusOK, d.handleAgents))
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		mux.Handle(m+" /v1/agents/{name}", d.serve(http.StatusOK, d.handleAgent))
	}
	for _, m := range []string{"GET", "POST", "DELETE"} {
		mux.Handle(m+" /v1/stop", d.serve(http.StatusOK, d.handleStop))
	}
	mux.Handle("GET /v1/cluster", d.serve(http.StatusOK, d.handleCluster))
	mux.Handle("GET /v1/approvals", d.serve(http.StatusOK, d.handleApprovals))
	mux.Handle("GET /v1/sessions/{session}/approvals", d.serve(http.StatusOK, d.handleApprovals))
	mux.Handle("POST /v1/sessions/{session}/approvals/{id}", d.serve(http.StatusOK, d.handleDecide))
	mux.Handle("POST /v1/signin/codes", d.serve(http.StatusCreated, d.handleSignInCode))
	mux.HandleFunc("POST /v1/signin", d.handleSignIn)
	mux.Handle("GET /v1/whoami", d.serve(http.StatusOK, d.handleWhoAmI))
	web := console.Handler()
	mux.Handle("GET /{$}", web)
	mux.Handle("GET "+console.Prefix, web)
	mux.HandleFunc("GET /v1/openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(OpenAPI) // the client went away: nothing to tell it
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
	d   *httpAPI
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
func (d *httpAPI) fail(w http.ResponseWriter, r *http.Request, err error) {
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
// limit. Ground Stop and the cluster view are the routes an operator token
// of no tenant may use, as on the NATS API; so are the ones that only say
// whose the token is or sign the console in with it, which touch no
// tenant's records.
func (d *httpAPI) principal(r *http.Request) (auth.Principal, error) {
	p, err := d.gate.authenticate(auth.BearerToken(r.Header.Get("Authorization")))
	if err == nil && !tenantless[r.URL.Path] {
		err = needsTenant(p)
	}
	return p, err
}

// tenantless are the paths an operator token of no tenant may use.
var tenantless = map[string]bool{"/v1/stop": true, "/v1/cluster": true, "/v1/whoami": true, "/v1/signin/codes": true}

// readBody reads the whole body under the size limit.
func (d *httpAPI) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
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
func (d *httpAPI) decodeJSON(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
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

// serve is every JSON route: the caller through the gate, the route's
// operation, and its answer with status, or the problem it met.
func (d *httpAPI) serve(status int, op httpOp) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := d.principal(r)
		if err != nil {
			d.fail(w, r, err)
			return
		}
		res, err := op(w, r, p)
		if err != nil {
			d.fail(w, r, err)
			return
		}
		writeJSON(w, status, res)
	}
}

func (d *httpAPI) handleReady(w http.ResponseWriter, r *http.Request) {
	if err := d.store.readyCheck(r.Context()); err != nil {
		writeProblem(w, r, problem(http.StatusServiceUnavailable, "not-ready", "Not ready", err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
