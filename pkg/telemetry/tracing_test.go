package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"jetway/pkg/telemetry"
)

// restoreGlobals puts the global tracer provider and propagator back.
func restoreGlobals(t *testing.T) {
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(prop)
	})
}

func TestSetupTracing_exports_spans_over_OTLP_HTTP_when_an_endpoint_is_set(t *testing.T) {
	restoreGlobals(t)
	var (
		mu    sync.Mutex
		paths []string
		body  int
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		paths = append(paths, r.URL.Path)
		body += len(b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(collector.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shutdown, err := telemetry.SetupTracing(ctx, telemetry.TracingConfig{ServiceName: "jetway-test", ServiceVersion: "v0"})
	if err != nil {
		t.Fatalf("SetupTracing: %v", err)
	}
	_, span := otel.Tracer("test").Start(ctx, "op")
	if !span.SpanContext().IsValid() || !span.IsRecording() {
		t.Fatalf("span from the global provider is not recording")
	}
	span.End()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) == 0 || paths[0] != "/v1/traces" || body == 0 {
		t.Fatalf("collector saw requests %v with %d body bytes, want a POST to /v1/traces", paths, body)
	}
}

func TestSetupTracing_without_an_endpoint_exports_nothing_but_propagates_traceparent(t *testing.T) {
	restoreGlobals(t)
	otel.SetTracerProvider(noop.NewTracerProvider())
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())

	shutdown, err := telemetry.SetupTracing(context.Background(), telemetry.TracingConfig{ServiceName: "x"})
	if err != nil {
		t.Fatalf("SetupTracing: %v", err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if telemetry.TracingEnabled() {
		t.Errorf("TracingEnabled with no endpoint set")
	}
	_, span := otel.Tracer("test").Start(context.Background(), "op")
	if span.IsRecording() {
		t.Errorf("span records with no endpoint set")
	}
	span.End()

	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(trace.ContextWithSpanContext(context.Background(), remote), carrier)
	want := "00-01020300000000000000000000000000-0405060000000000-01"
	if got := carrier.Get("traceparent"); got != want {
		t.Errorf("traceparent = %q, want %q", got, want)
	}
}
