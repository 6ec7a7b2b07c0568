// Package bench measures jetway against raw JetStream in the same run.
//
// Every figure jetway claims (runner latency and throughput, the agent loop's
// overhead, the jobs service's start latency, output capture and memory) is
// printed next to a baseline measured by this same program on the same
// machine a moment before: raw JetStream publish and consume, a bare SDK call,
// a bare os/exec start, `cat >file`. A ratio against a baseline from another
// day or another machine would mean nothing, so there are none here.
//
// The harness starts what it measures: an embedded nats-server with
// JetStream in a temporary directory (or a real cluster by URL), a local fake
// Anthropic server with configurable latency, in-process runners and jobs
// managers, and real `jetway runner` processes for the crash figure. Nothing
// is hard-coded: a figure that cannot be measured here says why instead.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// Groups of figures, in the order Run measures them. The raw JetStream group
// always runs first: every other group compares with it.
const (
	GroupRaw = "raw"
)

// AllGroups is every group, in run order.
var AllGroups = []string{GroupRaw}

// measures maps each group but raw to the method that measures it; each
// group's file adds itself to AllGroups and measures in init, in the order
// the files are compiled (agent, jobs, runner).
var measures = map[string]func(*env, context.Context){}

// Config says what to measure and where.
type Config struct {
	// Quick shrinks every sample so the whole run finishes in under a
	// minute on a small machine; the figures are noisier.
	Quick bool
	// NATSURL measures against a running server or cluster instead of an
	// embedded one. The bench creates and deletes its own streams there and
	// provisions jetway's (bus.Provision) if they are missing.
	NATSURL string
	// Groups limits the run to these groups (nil: AllGroups).
	Groups []string
	// Sizes overrides the sample sizes chosen by Quick (zero fields keep
	// them), so a test can run a figure on a handful of messages.
	Sizes Sizes
	// ModelLatency is how long the fake model waits before answering. Zero
	// measures the host's own overhead; a real model's seconds would hide it.
	ModelLatency time.Duration
	// JetwayBinary is a jetway executable for the figures that need a real
	// process (a runner SIGKILLed, a jobs worker's peak RSS). Empty: those
	// figures say "not measured".
	JetwayBinary string
	// ClientCommand starts this program again as the felt group's HTTP
	// client (a command line that runs FeltClient on its stdin and
	// stdout), so that the client is a process of its own as a person's
	// terminal is. Empty: the felt figures say "not measured".
	ClientCommand []string
	// WorkDir holds the embedded server's store, task output and workspaces
	// (default: a new temporary directory, removed at the end).
	WorkDir string
	// Progress receives one line per step while the bench runs.
	Progress func(line string)
}

// Sizes are the sample sizes of one run.
type Sizes struct {
	// RawMessages is how many messages the raw publish and consume rates
	// use; RawSamples how many sync publishes and requests are timed.
	RawMessages int
	RawSamples  int
	// AgentTurns is how many model turns the loop-overhead figure times.
	AgentTurns int
	// Probes is how many events each runner latency figure times;
	// SessionCounts the session populations they run at.
	Probes        int
	SessionCounts []int
	// IdleSessions is N for the memory-per-idle-session figure.
	IdleSessions int
	// SustainedEvents is how many events the throughput figure sends, over
	// SustainedSessions sessions.
	SustainedEvents   int
	SustainedSessions int
	// TaskStarts is how many task starts are timed; CaptureBytes how much
	// output the capture figures write.
	TaskStarts   int
	CaptureBytes int64
}

func defaultSizes(quick bool) Sizes {
	if quick {
		return Sizes{
			RawMessages: 10000, RawSamples: 500,
			AgentTurns: 100,
			Probes:     50, SessionCounts: []int{1, 100, 1000},
			IdleSessions:    1000,
			SustainedEvents: 1000, SustainedSessions: 100,
			TaskStarts: 50, CaptureBytes: 100_000_000,
		}
	}
	return Sizes{
		RawMessages: 200000, RawSamples: 10000,
		AgentTurns: 2000,
		Probes:     1000, SessionCounts: []int{1, 100, 1000},
		IdleSessions:    10000,
		SustainedEvents: 20000, SustainedSessions: 1000,
		TaskStarts: 1000, CaptureBytes: 1_000_000_000,
	}
}

func (s Sizes) merge(o Sizes) Sizes {
	if o.RawMessages > 0 {
		s.RawMessages = o.RawMessages
	}
	if o.RawSamples > 0 {
		s.RawSamples = o.RawSamples
	}
	if o.AgentTurns > 0 {
		s.AgentTurns = o.AgentTurns
	}
	if o.Probes > 0 {
		s.Probes = o.Probes
	}
	if len(o.SessionCounts) > 0 {
		s.SessionCounts = o.SessionCounts
	}
	if o.IdleSessions > 0 {
		s.IdleSessions = o.IdleSessions
	}
	if o.SustainedEvents > 0 {
		s.SustainedEvents = o.SustainedEvents
	}
	if o.SustainedSessions > 0 {
		s.SustainedSessions = o.SustainedSessions
	}
	if o.TaskStarts > 0 {
		s.TaskStarts = o.TaskStarts
	}
	if o.CaptureBytes > 0 {
		s.CaptureBytes = o.CaptureBytes
	}
	return s
}

// env is what every group shares: the NATS connection, the baselines
// measured so far, and the results.
type env struct {
	cfg   Config
	sizes Sizes
	dir   string
	url   string
	srv   *server.Server // nil with Config.NATSURL
	// srvLog keeps srv's last warnings (nil with Config.NATSURL).
	srvLog *serverWarnings
	nc     *nats.Conn
	js     jetstream.JetStream
	base   baselines
	// tenantCreds holds the bench tenant's credential on the bench's own
	// server (empty with Config.NATSURL).
	tenantCreds bus.TenantCredentials
	results     []Result
}

// baselines are the raw figures other figures are compared with.
type baselines struct {
	syncP50, syncP99 float64 // ms
	asyncRate        float64 // msgs/s
	consumeRate      float64 // msgs/s
	floorRate        float64 // msgs/s, into a work shard, pulled pinned, acked and logged
	floorMsgs        float64 // messages per event on the floor consumers' connection
	floorCPU         float64 // µs of the process's CPU per message on the floor (0: unknown)
	floorCores       float64 // cores the floor's run kept busy
	rttP50, rttP99   float64 // ms, request/reply
	measured         bool
	// leaderLoads is what the tapped sustained run wrote per event to
	// each single leader off the event path (nil until it ran).
	leaderLoads map[string]leaderLoad
}

// Run measures the configured groups and returns their figures in order.
// A figure that fails to measure is reported as "not measured: <why>"; Run
// itself fails only when the bench cannot start at all.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	groups := cfg.Groups
	if len(groups) == 0 {
		groups = AllGroups
	}
	for _, g := range groups {
		if !slices.Contains(AllGroups, g) {
			return nil, fmt.Errorf("bench: unknown group %q (have %s)", g, strings.Join(AllGroups, ", "))
		}
	}
	e := &env{cfg: cfg, sizes: defaultSizes(cfg.Quick).merge(cfg.Sizes)}
	if err := e.start(ctx); err != nil {
		return nil, err
	}
	defer e.stop()

	// Every group compares with the raw figures, so they run first.
	e.progress("raw JetStream baselines")
	e.measureRaw(ctx)
	e.measureTenant(ctx)
	for _, g := range groups {
		if ctx.Err() != nil {
			break
		}
		if m := measures[g]; m != nil {
			m(e, ctx)
		}
	}
	if err := ctx.Err(); err != nil {
		return e.results, fmt.Errorf("bench: interrupted: %w", err)
	}
	return e.results, nil
}

func (e *env) start(ctx context.Context) error {
	dir := e.cfg.WorkDir
	if dir == "" {
		d, err := os.MkdirTemp("", "jetway-bench-")
		if err != nil {
			return fmt.Errorf("bench: work dir: %w", err)
		}
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: work dir: %w", err)
	}
	e.dir = dir
	e.url = e.cfg.NATSURL
	if e.url == "" {
		e.progress("starting an embedded nats-server with JetStream in %s", dir)
		conf, creds, err := benchAccounts(dir)
		if err != nil {
			e.cleanDir()
			return err
		}
		e.tenantCreds = creds
		e.srvLog = &serverWarnings{}
		srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: dir + "/nats", ServerName: "bench", ConfigFile: conf, Logger: e.srvLog})
		if err != nil {
			e.cleanDir()
			return fmt.Errorf("bench: embedded server: %w", err)
		}
		e.srv = srv
		e.url = srv.ClientURL()
	}
	nc, err := bus.Connect(ctx, bus.ConnConfig{URLs: []string{e.url}, Name: "jetway-bench"})
	if err != nil {
		e.stop()
		return fmt.Errorf("bench: connect %s: %w", e.url, err)
	}
	e.nc = nc
	// Async publish acks that never come (a dropped ack on a slow host)
	// must not hold the pending window shut for the rest of the run.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(2*time.Minute))
	if err != nil {
		e.stop()
		return fmt.Errorf("bench: jetstream: %w", err)
	}
	e.js = js
	if e.srv != nil {
		if err := e.keepStreamsDir(ctx); err != nil {
			e.stop()
			return err
		}
	}
	return nil
}

// keepStreamsDir makes a stream that lives as long as the bench's own
// server. Deleting an account's last stream makes nats-server (2.15.2)
// remove the account's now empty streams directory in a goroutine of its
// own, which races a stream created right after: its directory's parent
// goes away under it and the create fails with "error creating store for
// stream" (seen as "mkdir …/JETWAY/streams: no such file or directory").
// The figures make and delete streams one after another, and jetway's own
// streams, which would keep the directory, are not there in every group.
func (e *env) keepStreamsDir(ctx context.Context) error {
	_, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "BENCH_KEEP", Subjects: []string{"bench.keep"}, Storage: jetstream.FileStorage, Replicas: 1,
		Description: "jetway-bench: keeps the account's streams directory for the run",
	})
	if err != nil {
		return fmt.Errorf("bench: the stream that keeps the streams directory: %w", err)
	}
	return nil
}

func (e *env) stop() {
	if e.nc != nil {
		e.nc.Close()
	}
	if e.srv != nil {
		bus.StopEmbedded(e.srv)
	}
	e.cleanDir()
}

func (e *env) cleanDir() {
	if e.cfg.WorkDir == "" && e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

func (e *env) progress(format string, args ...any) {
	if e.cfg.Progress != nil {
		e.cfg.Progress(fmt.Sprintf(format, args...))
	}
}

// add records a figure and reports it as progress.
func (e *env) add(r Result) {
	e.results = append(e.results, r)
	e.progress("  %s", r.line())
}

// measured is the value of the figure name, if this run measured it.
func (e *env) measured(name string) (float64, bool) {
	for _, r := range e.results {
		if r.Name == name && r.Value != nil {
			return *r.Value, true
		}
	}
	return 0, false
}

// skip records a figure that could not be measured, and why.
func (e *env) skip(name, unit, goal string, err error) {
	e.add(NotMeasured(name, unit, goal, err.Error()))
}

// errNoBinary is the reason figures needing a real process give when the
// bench has no jetway executable to start.
var errNoBinary = errors.New("no jetway binary to start as a separate process (Config.JetwayBinary)")

// patience is how long the bench waits for one thing the system under test
// should do in milliseconds (an event reaching the model, a run ending)
// before it gives up on the figure: short in quick mode, which must finish
// within a minute even when something is stuck.
func (e *env) patience() time.Duration {
	if e.cfg.Quick {
		return 10 * time.Second
	}
	return 60 * time.Second
}

// deadline bounds one wait of the bench: generous, since a slow machine is
// a result, but never forever.
func deadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// uid is a short random name for the bench's own streams and subjects, so
// runs against a shared cluster never collide.
func uid() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return strings.ToUpper(hex.EncodeToString(b[:]))
}
