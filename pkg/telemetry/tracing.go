package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// TracingConfig names the service in exported spans.
type TracingConfig struct {
	ServiceName    string
	ServiceVersion string
}

// ShutdownFunc flushes pending spans and stops exporting.
type ShutdownFunc func(context.Context) error

// TracingEnabled reports whether an OTLP endpoint is configured in the
// environment (OTEL_EXPORTER_OTLP_ENDPOINT or its traces-only variant).
func TracingEnabled() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// SetupTracing installs the global tracer provider and the W3C trace-context
// propagator. Spans are exported over OTLP/HTTP when TracingEnabled;
// otherwise the provider stays a no-op, so tracing costs nothing until
// someone points it at a collector. The propagator is set either way: a
// service that does not export still passes traceparent on.
// The exporter reads the standard OTEL_EXPORTER_OTLP_* variables.
func SetupTracing(ctx context.Context, cfg TracingConfig) (ShutdownFunc, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
		propagation.TraceContext{}, propagation.Baggage{}))
	if !TracingEnabled() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
	}
	attrs := []resource.Option{resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost()}
	if cfg.ServiceName != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceName(cfg.ServiceName)))
	}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceVersion(cfg.ServiceVersion)))
	}
	res, err := resource.New(ctx, attrs...)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("telemetry: shut down tracer provider: %w", err)
		}
		return nil
	}, nil
}
