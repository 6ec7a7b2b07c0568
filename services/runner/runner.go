// Package runner is the distributed host event loop: it consumes host
// events per session from the work shards (JETWAY_WORK_<k>), starts a run when a session is idle,
// hands an event to the running model as a notice when it is busy, and
// records every turn in the session's transcript before anything acts on it.
//
// Any number of runners share the work. Each partition of the shards is
// pinned by the server to one runner (PriorityPolicyPinned); inside it, one
// actor per session keeps that session's order. Exclusivity does not rest on
// the pin: transcript appends are fenced by the expected last sequence per
// subject and the session record is updated by compare-and-swap, so a
// runner that lost a session finds out at its next write and stops.
package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/pkg/agent"
	"jetway/pkg/agent/permission"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/bus/kvmirror"
	"jetway/pkg/control/agents"
	rec "jetway/pkg/control/approvals"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/handover"
	"jetway/pkg/llm"
	"jetway/services/runner/internal/approvals"
	"jetway/services/runner/internal/partition"
	"jetway/services/runner/internal/subagents"
)

// Config configures a runner.
type Config struct {
	// NC is the connection to NATS; the runner does not close it.
	NC *nats.Conn
	// ID is the runner's identity, stable across restarts of the same
	// runner (default: the host name). A runner that comes back with the
	// same ID tells its successor "runner restart" rather than "lost contact".
	ID string
	// Provider answers the model calls of the default agent and of every
	// agent profile that names no model.
	Provider llm.Provider
	// ModelFor builds the provider of a profile that names a model
	// (providers.ForModel over the runner's environment). Each model is
	// built once, at the first run that needs it, and kept. Nil: a profile
	// that names a model is refused, this runner serving only Provider.
	ModelFor func(m agents.Model) (llm.Provider, error)
	// Models are the models ModelFor can build, as agents.ServingKey
	// spells them; the runner advertises them in its heartbeat so the
	// dispatcher refuses at once a send whose model no runner serves.
	// Ignored without ModelFor (the runner then advertises none).
	Models []string
	// ReadInstructions, if set, reads a workspace instruction file of the
	// run's profile (AGENTS.md) through the session's jobs worker at the
	// run's start, at most max bytes of it. Nil: no files are read.
	ReadInstructions func(ctx context.Context, s SessionRef, path string, max int) (Instructions, error)
	// System is the system prompt.
	System []string
	// Tools makes the tools of one run (nil: no tools).
	Tools func(s SessionRef) []tool.Tool
	// MCP, if set, connects the MCP servers a run's agent profile names
	// (prof.MCP, never empty here) at the run's start and hands each
	// server's tools to offer, again whenever its list changes; the run
	// offers those its profile allows, as mcp__<server>__<tool>. The
	// returned func ends the connections when the run is over and says
	// which servers were not running then, and why (failed, crashed,
	// stopped): the run's end records them in the session's history.
	MCP func(ctx context.Context, s SessionRef, prof agents.Profile, offer func(server string, tools []tool.Tool)) (closeAll func() []agents.MCPServerState)
	// ChildState, if set, tells whether an interrupted run's foreground
	// processes are gone (the jobs service's answer). An error means the
	// jobs worker could not be asked (unreachable, no answer in time): the
	// recovery waits and asks again, up to RecoveryWait, instead of being
	// refused. Without it, a runner whose tools start no processes answers
	// "gone", and one whose tools do answers "unknown", which refuses
	// recovery.
	ChildState func(ctx context.Context, s SessionRef) (handover.ChildState, error)
	// RecoveryWait bounds how long a recovery waits for an unreachable jobs
	// worker before it is refused (default 2 minutes).
	RecoveryWait time.Duration
	// KillRun, if set, kills an interrupted run's foreground processes, so
	// that a definite "still alive" becomes "gone" before recovery is asked
	// again (the run's background jobs are left alone).
	KillRun func(ctx context.Context, s SessionRef) error
	// Configure, if set, adjusts each run's agent input (budgets, hooks,
	// permissions) before the run starts.
	Configure func(s SessionRef, in *agent.QueryInput)

	// Heartbeat is how often the runner announces itself (default 1s);
	// StaleAfter is when a silent runner counts as gone (default 3×Heartbeat).
	Heartbeat  time.Duration
	StaleAfter time.Duration
	// IdleEvict drops an idle session's actor and its cached history after
	// this long without events (default 30s), so memory stays bounded.
	IdleEvict time.Duration
	// KeepAlive is how often held events are told "in progress" (default 1s;
	// keep it well under the work consumers' AckWait).
	KeepAlive time.Duration
	// Permissions is the runs' tool permission mode. Runs are unattended —
	// there is no one to ask — so the default is accept_all; the jobs worker's
	// containment is the sandbox. Deny rules still apply.
	Permissions permission.Mode
	Deny        []string
	// ContextWindow is the model's context size in tokens, for compaction
	// (0 = 200000). Compaction folds old history behind a boundary and a
	// summary the model writes; recorded history is never edited.
	ContextWindow int
	// Rails bound what sessions may spend.
	Rails Rails
	// MaxTurns and MaxDuration bound each run (0 = off).
	MaxTurns    int
	MaxDuration time.Duration
	// ToolOutputDir receives tool output too large for the model's context.
	ToolOutputDir string

	Logger zerolog.Logger
}

// SessionRef names one session and the run being built for it.
type SessionRef struct {
	Tenant, Session, Run string
	// Lineage is a sub-agent's ancestors, root first (empty for a root
	// session). The jobs worker needs it with every command it starts:
	// it kills a sub-agent's commands on any ancestor's Ground Stop.
	Lineage []string
	// Network is the network mode of the run's agent profile, which its
	// shell commands get (jobsapi.StartRequest.Network).
	Network string
	// Ask, set on a live run's ref, puts a question asked from inside one
	// of its calls (an MCP server's elicitation) to a person as a durable
	// approval and waits for the answer (internal/approvals, Gate.Ask).
	Ask rec.Asker
}

// Runner consumes host events and drives runs.
type Runner struct {
	cfg Config
	js  jetstream.JetStream
	log zerolog.Logger
	// live are the runs this runner drives, for a lapse of its lease to
	// stop (lease.go).
	live liveRuns

	records records
	peers   peers

	partitions int
	layout     bus.Layout
	// group is the pinned partition group that feeds the actors; tenure is
	// its Tenure (a test stands in for it).
	group  *partition.Group
	tenure func(n int) (uint64, bool)

	mu     sync.Mutex
	actors map[string]*actor // key: tenant.session

	// profiles is the agents bucket: the profile a run starts with.
	// defaults mirrors its stored default profiles, so the run start of a
	// session on the implicit default (the common case) reads nothing.
	profiles jetstream.KeyValue
	defaults atomic.Pointer[kvmirror.Mirror]
	// models are the providers built for profiles' models (agents.go).
	models models

	// running mirrors the session records by partition for the
	// partitions the sweep looks at (partruns.go).
	running *partRuns
	// sweepNow asks the sweeper for a sweep (sweep.go); the asks of one
	// moment make one sweep.
	sweepNow chan struct{}
	sweepMu  sync.Mutex // one sweep at a time

	// work are the shard streams, by shard (order.go).
	work        []jetstream.Stream
	transcripts transcripts
	// orderLookups counts the order checks that asked the work stream
	// (order.go); a test reads it.
	orderLookups atomic.Int64
	control      jetstream.KeyValue
	stops        *groundstop.Mirror // Ground Stop switches (groundstop.go)
	rails        rails
	subagents    *subagents.Service
	approvals    *approvals.Gate // a person in the loop (approvals.go)

	stop chan struct{} // closed when the runner leaves
	wg   sync.WaitGroup
	// actorWG counts live actor goroutines; closing (under mu) stops new
	// ones from starting once the runner is leaving.
	actorWG sync.WaitGroup
	closing bool
}

// New checks the configuration and connects to the buckets and streams that
// `bus.Provision` created.
func New(ctx context.Context, cfg Config) (*Runner, error) {
	if cfg.NC == nil {
		return nil, errors.New("runner: config: NC is required")
	}
	if cfg.Provider == nil {
		return nil, errors.New("runner: config: Provider is required")
	}
	if cfg.ID == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("runner: config: no ID and no host name: %w", err)
		}
		cfg.ID = host
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 3 * cfg.Heartbeat
	}
	if cfg.IdleEvict <= 0 {
		cfg.IdleEvict = 30 * time.Second
	}
	if cfg.Permissions == "" {
		cfg.Permissions = permission.AcceptAll
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = time.Second
	}
	if cfg.RecoveryWait <= 0 {
		cfg.RecoveryWait = DefaultRecoveryWait
	}
	js, err := bus.JetStream(cfg.NC)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	sessions, err := bus.OpenBucket(ctx, js, bus.BucketSessions)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	byPartition, err := bus.OpenBucket(ctx, js, bus.BucketSessionsByPartition)
	if err != nil {
		return nil, fmt.Errorf("runner: %w (provision again: jetway-provision makes it)", err)
	}
	runners, err := bus.OpenBucket(ctx, js, bus.BucketRunners)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	control, err := bus.OpenBucket(ctx, js, bus.BucketControl)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	profiles, err := bus.OpenBucket(ctx, js, bus.BucketAgents)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	layout, err := bus.ReadLayout(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	p := layout.Partitions
	r := &Runner{
		cfg:        cfg,
		js:         js,
		log:        cfg.Logger.With().Str("runner", cfg.ID).Logger(),
		records:    records{kv: sessions},
		partitions: p,
		layout:     layout,
		actors:     make(map[string]*actor),
		control:    control,
		profiles:   profiles,
		rails:      rails{cfg: cfg.Rails, kv: control},
		stop:       make(chan struct{}),
		sweepNow:   make(chan struct{}, 1),
	}
	r.running = &partRuns{kv: byPartition, log: r.log, wg: &r.wg}
	r.subagents = r.subagentsOf()
	r.approvals = &approvals.Gate{KV: control, JS: js, Source: source, Partitions: p, Publish: r.publishOut}
	r.group, err = partition.New(partition.Config{
		JS: js, Peers: runners, ID: cfg.ID, Incarnation: newID(""), Partitions: p, Shards: layout.Shards,
		Heartbeat: cfg.Heartbeat, StaleAfter: cfg.StaleAfter, OnLeaseLost: r.leaseLost,
		Deliver: r.deliver, Busy: r.busyIn, OnBeat: r.askSweep, OnPeerGone: r.askSweep, Log: cfg.Logger,
		Models: advertised(cfg),
	})
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	r.peers, r.tenure = peers{g: r.group}, r.group.Tenure
	return r, nil
}

// ID is the runner's identity.
func (r *Runner) ID() string { return r.cfg.ID }

// Run consumes until ctx is done, then leaves cleanly: it stops pulling,
// lets live runs end at their next safe point, and removes its heartbeat so
// its partitions move at once.
func (r *Runner) Run(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := r.openWork(ctx); err != nil {
		return fmt.Errorf("runner: work stream: %w", err)
	}
	ts, err := openTranscripts(ctx, r.js)
	if err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	r.transcripts = ts
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.evictLoop(runCtx) }()
	// Nothing is pulled until the Ground Stop mirror holds what the
	// bucket held at start: a switch set before this runner started must
	// hold for its first event.
	if err := r.startControl(runCtx); err != nil {
		cancel()
		r.wg.Wait()
		return err
	}
	if err := r.group.Start(runCtx); err != nil {
		cancel()
		r.wg.Wait()
		return fmt.Errorf("runner: %w", err)
	}
	// The first sweep now, not a beat later: it reads the live runs of the
	// partitions this runner looks at (those nobody holds, when it is the
	// first), and a dead runner's runs there are recovered at once.
	r.sweep(runCtx)
	wctx, wdone := context.WithTimeout(runCtx, r.cfg.StaleAfter)
	if err := r.running.waitReady(wctx); err != nil {
		r.log.Warn().Err(err).Msg("live runs not read within a lease; the next beat's sweep reads them")
	}
	wdone()
	r.log.Info().Int("partitions", r.partitions).Str("incarnation", r.inc()).Msg("runner started")
	<-ctx.Done()
	cancel()
	r.mu.Lock()
	r.closing = true // no actor starts from here on
	r.mu.Unlock()
	close(r.stop)
	r.group.Stop()
	r.wg.Wait()
	r.actorWG.Wait()
	// Only now does the runner stop looking alive: its runs have ended, so
	// a runner that recovers them never runs beside them.
	leaveCtx, done := context.WithTimeout(context.Background(), 2*time.Second)
	defer done()
	if err := r.group.Leave(leaveCtx); err != nil {
		r.log.Warn().Err(err).Msg("leave")
	}
	r.log.Info().Msg("runner stopped")
	return nil
}

func (r *Runner) stopping() <-chan struct{} { return r.stop }

// newID returns a short random id with a prefix.
func newID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// advertised is what the heartbeat says this runner serves besides its
// own provider: Models when it can build models, else none (an empty list,
// not an absent one: "serves nothing named", not "does not say").
func advertised(cfg Config) []string {
	if cfg.ModelFor == nil {
		return []string{}
	}
	return append([]string{}, cfg.Models...)
}
