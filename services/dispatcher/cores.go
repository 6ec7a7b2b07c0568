package dispatcher

import (
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	api "jetway/pkg/dispatcherapi"
)

// The dispatcher is one core per resource, and two transports over them:
//
//	events      eventsCore    publish.go, dedupe.go     input, steer, resume, CloudEvents
//	sessions    sessionsCore  sessions.go, detail.go, layover.go, recovery.go, transcript.go, mcp.go
//	                          (records, detail, layovers, recovery policy, transcript, output)
//	agents      agentsCore    agents.go                 agent profiles
//	groundStop  stopCore      stop.go, stopmirror.go    Ground Stop
//	jobs        jobsCore      jobs.go                   a session's jobs
//	cluster     clusterCore   cluster.go                runners, workers, streams
//	approvals   approvalsCore approvals.go              tool approvals and questions waiting for a person
//	signIn      signInCore    signin.go                 one-time console sign-in codes
//
// The HTTP API
// (httpAPI: http.go, httpops.go, cehttp.go, sse.go) and the NATS micro
// API (natsAPI: natsapi.go) only read a request, pass it through the gate
// (gate.go) and call the same core, so a rule cannot hold on one door and
// not on the other. The Dispatcher itself only wires them together and
// runs them (dispatcher.go), and keeps its Go API (goapi.go) as one line
// per operation.
//
// The cores are types of this package rather than packages under
// internal/, on purpose: they share the problem constructors and texts
// (problem.go), the wire names (wire.go) and the store (store.go), and
// each other in a few places (the events core asks the agents and stop
// cores). As packages, all of that would have to be exported, and the
// error texts that are the public contract would live far from the code
// that says them. What keeps each core its own room here is that it holds
// only what it uses (its fields), and a test that bounds every type's
// methods (methods_test.go).
//
// Every type's receiver is d, as the Dispatcher's was: the methods moved
// into the cores with their bodies unchanged, which keeps their history
// readable and concurrent edits to them mergeable.

// cores are the dispatcher's resources and what both transports share
// around them: the config, log, tracer and metrics of a request.
type cores struct {
	cfg     Config
	log     zerolog.Logger
	tracer  trace.Tracer
	metrics *metrics
	gate    *gate
	store   *store

	events     *eventsCore
	sessions   *sessionsCore
	agents     *agentsCore
	groundStop *stopCore
	jobs       *jobsCore
	cluster    *clusterCore
	approvals  *approvalsCore
	signIn     *signInCore
}

// newCores builds every core on one store. cfg is complete (New has filled
// in the defaults).
func newCores(cfg Config, log zerolog.Logger, tracer trace.Tracer, m *metrics, st *store) *cores {
	agents := &agentsCore{store: st, log: log}
	stop := &stopCore{store: st, log: log}
	c := &cores{
		cfg: cfg, log: log, tracer: tracer, metrics: m, store: st,
		gate:   newGate(cfg.Auth, cfg.RatePerSecond, cfg.RateBurst),
		agents: agents, groundStop: stop,
		events: &eventsCore{store: st, source: cfg.Source, log: log, tracer: tracer, metrics: m,
			agents: agents, groundStop: stop},
		sessions: &sessionsCore{store: st, log: log, groundStop: stop},
		jobs:     &jobsCore{store: st, log: log},
		cluster:  &clusterCore{store: st},
	}
	c.signIn = &signInCore{store: st, gate: c.gate, log: log, ttl: api.SignInCodeTTL, now: time.Now}
	c.approvals = &approvalsCore{store: st, log: log, source: cfg.Source, events: c.events}
	return c
}
