// Package dispatcher is jetway's front door: the HTTP API and the NATS
// request API through which people and other systems send input, steers and
// CloudEvents into sessions, list sessions and jobs, follow a session's
// output, and flip Ground Stop.
//
// Every request is authenticated with a bearer token that maps to one tenant
// (pkg/auth), limited in size and rate, checked against the event contract
// (pkg/events) and published onto jetway.events.<tenant>.<session>. A
// caller-chosen CE id is recorded per tenant and session (jetway_event_ids),
// so a retried request is stored once and answered as a duplicate, while
// the same id from another tenant or session is a different event. Errors
// are RFC 9457 problem details on both transports.
//
// Key-value layout read here (written by the runner and the jobs service):
//
//	jetway_sessions  <tenant>.<session>         the session record (JSON, record.go)
//	jetway_jobs      <tenant>.<session>.<id>    one background job (JSON)
//	jetway_workers   <tenant>.<session>         the session's jobs worker
//	jetway_control   see package groundstop
//
// and written only here: jetway_event_ids <tenant>.<session>.<hash of id>
// (dedupe.go). A session's history is read from JETWAY_TRANSCRIPTS one
// message at a time (transcript.go), its waiting events counted in
// its work shard (detail.go), and its jobs' output and kill asked of its jobs
// worker through the jobs service's API (jobs.go). The request and answer
// bodies, and the problem type of every error, are pkg/dispatcherapi's.
//
// Inside, the dispatcher is one core per resource (events, sessions,
// agents, Ground Stop, jobs, cluster) with the HTTP and NATS APIs as thin
// transports over the same cores; cores.go says why and where each lives.
package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/telemetry"
)

// Defaults for zero Config fields.
const (
	DefaultAddr          = "127.0.0.1:8080"
	DefaultSource        = "jetway/dispatcher"
	DefaultMaxBodyBytes  = 1 << 20
	DefaultRatePerSecond = 20
	DefaultRateBurst     = 40
	DefaultHeartbeat     = 15 * time.Second
	// ServiceName is the NATS micro service name (see `nats micro ls`).
	ServiceName = api.ServiceName
	// APISubjectPrefix starts every NATS API subject: jetway.api.input, …
	APISubjectPrefix = api.SubjectPrefix
)

// Config is everything a Dispatcher needs. Conn and Auth are required.
type Config struct {
	// Conn is the NATS connection events are published on.
	Conn *nats.Conn
	// Auth maps bearer tokens to tenants. There is no way to run without
	// one: a dispatcher that let anyone publish would be an open relay
	// into every session.
	Auth *auth.Store

	// Addr is where Run serves HTTP (DefaultAddr when empty).
	Addr string
	// Source is the CloudEvents source of events the dispatcher builds
	// itself (input, steer).
	Source string
	// MaxBodyBytes limits a request body (default 1 MiB); larger is a 413.
	MaxBodyBytes int64
	// RatePerSecond and RateBurst size each tenant's token bucket (defaults
	// 20/s, burst 40). A negative RatePerSecond turns rate limiting off.
	RatePerSecond float64
	RateBurst     int
	// Heartbeat is how often an idle SSE stream gets a comment line, so
	// proxies and clients can tell a quiet session from a dead connection.
	Heartbeat time.Duration

	// Logger receives access and refusal logs; nil logs nothing. The caller
	// names the service or component in it.
	Logger *zerolog.Logger
	// Registry receives the dispatcher's metrics and is what /metrics
	// serves; nil makes a private one (with Go runtime and process metrics).
	Registry *prometheus.Registry
	// TracerProvider makes the request spans; nil uses the global one.
	TracerProvider trace.TracerProvider
	// Version is reported by the NATS micro service (default "0.0.0").
	Version string
}

// Dispatcher serves the API. Build it with New. It wires the cores and
// the two transports together (cores.go) and runs them; the operations are
// the cores'.
type Dispatcher struct {
	*cores
	// auth is Config.Auth, the token store the gate reads.
	auth *auth.Store
}

// New checks cfg and builds a Dispatcher; it does not listen yet.
func New(cfg Config) (*Dispatcher, error) {
	if cfg.Conn == nil {
		return nil, errors.New("dispatcher: Config.Conn is required")
	}
	if cfg.Auth == nil || cfg.Auth.Len() == 0 {
		return nil, fmt.Errorf("dispatcher: Config.Auth is required: %w", auth.ErrNoTokens)
	}
	cfg = withDefaults(cfg)
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	js, err := bus.JetStream(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	c := newCores(cfg, log, cfg.TracerProvider.Tracer("jetway/services/dispatcher"), m, newStore(cfg.Conn, js))
	return &Dispatcher{cores: c, auth: cfg.Auth}, nil
}

// withDefaults fills in cfg's zero fields, so every core and transport
// reads one complete Config.
func withDefaults(cfg Config) Config {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.Source == "" {
		cfg.Source = DefaultSource
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.RatePerSecond == 0 {
		cfg.RatePerSecond = DefaultRatePerSecond
	}
	if cfg.RateBurst <= 0 {
		cfg.RateBurst = DefaultRateBurst
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Version == "" {
		cfg.Version = "0.0.0"
	}
	if cfg.Registry == nil {
		cfg.Registry = telemetry.NewRegistry()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	return cfg
}

// Run serves the HTTP API on cfg.Addr and the NATS API until ctx is done,
// then shuts both down, giving in-flight requests a few seconds.
func (d *Dispatcher) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", d.cfg.Addr)
	if err != nil {
		return fmt.Errorf("dispatcher: listen on %s: %w", d.cfg.Addr, err)
	}
	return d.Serve(ctx, ln)
}

// Serve is Run on a listener the caller opened (tests, socket activation).
func (d *Dispatcher) Serve(ctx context.Context, ln net.Listener) error {
	svc, err := d.StartNATS()
	if err != nil {
		_ = ln.Close() // the NATS error is the one to report
		return err
	}
	defer func() {
		if err := svc.Stop(); err != nil {
			d.log.Warn().Err(err).Msg("dispatcher: stop the NATS API")
		}
	}()
	srv := &http.Server{
		Handler:           d.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// No WriteTimeout: SSE streams are long-lived by design.
		IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	d.log.Info().Str("addr", ln.Addr().String()).Msg("dispatcher listening")
	select {
	case err := <-errc:
		return fmt.Errorf("dispatcher: serve http: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		_ = srv.Close() // after a failed graceful shutdown: closing is all that is left
	}
	return nil
}
