// Package telemetry sets up what every jetway service reports about itself:
// structured logs (zerolog) that carry trace ids, OpenTelemetry traces, and
// Prometheus metrics.
package telemetry
