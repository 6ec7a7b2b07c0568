// Package jobs is the jobs worker (`jetway jobs-worker`): it owns the
// processes agents start and the sessions' workspaces, and serves them over
// NATS as the micro service jetway-jobs, endpoints jetway.jobs.<worker>.<op>
// (see package jobsapi for the contract).
//
// A worker wraps one tasks.Manager. Each session is bound to one worker by a
// create-if-absent key in the jetway_workers bucket, so all of a session's
// jobs and its workspace (<root>/<tenant>/<session>) live on one machine.
// A task that ends unseen by the model publishes io.jetway.job.exited on
// jetway.jobevents.<tenant>.<session>; one that runs past its expected
// duration publishes io.jetway.job.overdue. Events carry a Nats-Msg-Id
// derived from the task and the occasion, so a retried or repeated publish
// (a restart re-reporting an end) is stored once.
//
// The task table is persisted in the jetway_jobs bucket (key
// <tenant>.<session>.<id>). A worker that starts again under the same id
// kills the survivors of its previous incarnation it can identify (the
// JETWAY_JOBS_WORKER environment marker every command carries, and the
// stale cgroups package proctree sweeps), reports the tasks it never saw
// end as lost, and continues each session's id counter.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/redact"
	"jetway/pkg/tasks"
	"jetway/pkg/tasks/proctree"
	"jetway/pkg/workspace"
	"jetway/services/jobs/jobsapi"
)

// Defaults for zero Config fields.
const (
	DefaultRunTimeout    = 120 * time.Second
	DefaultMaxRunTimeout = 10 * time.Minute
	DefaultMaxWait       = 10 * time.Minute
	DefaultShell         = "/bin/sh"
	DefaultGrace         = 5 * time.Second
)

// WorkerEnv is the environment marker every command of a worker carries
// (value: the worker id and a hash of its root). A restarted worker kills the processes that still
// carry its id: they belonged to its previous incarnation.
const WorkerEnv = "JETWAY_JOBS_WORKER"

// Config is everything a Worker needs. NC, WorkerID and Root are required.
type Config struct {
	NC *nats.Conn
	// WorkerID names the worker in subjects, bindings and records: 1–64 of
	// [A-Za-z0-9_-], stable across restarts (a restart under another id
	// cannot report its predecessor's tasks lost).
	WorkerID string
	// Root holds the workspaces (<root>/<tenant>/<session>) and the output
	// files (<root>/.jobs/<tenant>/<session>/).
	Root string
	// Limits bound the tasks (zero fields: tasks.DefaultLimits; zero fields
	// of Tree: DefaultTreeLimits, negative ones: no such limit).
	Limits tasks.Limits
	// Grace is the SIGTERM-to-SIGKILL grace period of a kill (default 5s).
	Grace time.Duration
	// NoCgroups turns cgroup containment off (process groups, the
	// subreaper and the /proc sweep remain).
	NoCgroups bool
	// Shell runs each command as `Shell -c command` (default /bin/sh).
	Shell string
	// Env is added to every command's environment, after the one the
	// worker builds (PATH, HOME = the workspace, TMPDIR, SHELL, LANG, LC_*,
	// TZ, TERM). Nothing else of the worker's own environment is passed on:
	// it may hold credentials.
	Env []string
	// ReadOnly are paths jobs may read and execute besides the system
	// directories (a toolchain outside /usr, say).
	ReadOnly []string
	// AllowUnconfined runs jobs where the kernel cannot confine them (no
	// Landlock, or one older than proctree.MinLandlockABI): each job then
	// reaches everything the worker's user can. Without it such a worker
	// refuses every command.
	AllowUnconfined bool
	// NoLandlock makes the worker act as on a kernel without Landlock. It
	// exists for tests of that path.
	NoLandlock bool
	// RunTimeout is a run call's default wait (120 s); MaxRunTimeout caps
	// the wait a call may ask for (10 min), and MaxWait a status call's.
	RunTimeout    time.Duration
	MaxRunTimeout time.Duration
	MaxWait       time.Duration
	// Workspace holds the limits of the file tools.
	Workspace workspace.Config
	// WorkspaceSize and WorkspaceFiles cap each session's workspace and
	// temporary directory together, in bytes and in files (zero:
	// DefaultWorkspaceSize, DefaultWorkspaceFiles; negative: no such cap;
	// both negative: no disk cap). The kernel enforces them where the
	// worker can mount an image per session (disk.go).
	WorkspaceSize  int64
	WorkspaceFiles int64
	// MCPIdle stops a session's MCP stdio server that no connection used
	// for this long (default DefaultMCPIdle).
	MCPIdle time.Duration
	// SecretEnv is the environment the secrets of MCP stdio servers are
	// read from (nil: the worker's own). Only the source is configurable:
	// which variable a tenant's secret name reads is
	// agents.ResolveMCPSecret's alone, so no configuration can let one
	// tenant's name reach another's variable.
	SecretEnv func(variable string) (string, bool)
	// Source is the CloudEvents source of the worker's events (default
	// "jetway/jobs/<worker>").
	Source  string
	Version string
	Log     zerolog.Logger
}

// Worker is one jobs worker. Create it with New and serve with Run.
type Worker struct {
	cfg     Config
	js      jetstream.JetStream
	jobsKV  jetstream.KeyValue
	bindKV  jetstream.KeyValue
	sessKV  jetstream.KeyValue // session records, read for run fences (fence.go)
	mgr     *tasks.Manager
	conf    confinement
	disks   *diskCaps
	out     *outbox
	mcp     *mcpHost
	stops   *groundstop.Mirror
	ready   chan struct{}
	closing atomic.Bool // Run is shutting down: ends are told by events

	mu       sync.Mutex
	bound    map[string]bool                 // sessions confirmed bound here
	spaces   map[string]*workspace.Workspace // open workspaces by session key
	fgRuns   map[string]int                  // session key + run -> foreground calls in flight
	fgTasks  map[string]bool                 // task keys a run call is waiting for
	fgEnded  map[string]bool                 // foreground tasks whose unseen end was held back
	lostFG   map[string]bool                 // task keys lost while in the foreground
	handOffs map[string]*handOff             // session key + run -> its hand-off (handoff.go)
	lineage  map[string][]string             // sub-agent session key -> its ancestors, root first
	seqs     map[string]uint64               // function task key -> last notice seq
	overdues map[string]int                  // task key -> overdue events so far
	// eventKeys holds each task's random event key (see eventID); a task
	// restored from a record made before keys has "" (the old id form).
	eventKeys map[string]string

	reqMu     sync.Mutex
	stopping  bool
	reqs      sync.WaitGroup
	reqCtx    context.Context // cancelled at shutdown: waits give up
	reqCancel context.CancelFunc
}

// New checks cfg and returns a worker; Run starts it.
func New(cfg Config) (*Worker, error) {
	if cfg.NC == nil {
		return nil, errors.New("jobs: Config.NC is required")
	}
	if err := jobsapi.ValidWorkerID(cfg.WorkerID); err != nil {
		return nil, fmt.Errorf("jobs: Config.WorkerID: %w", err)
	}
	if cfg.Root == "" {
		return nil, errors.New("jobs: Config.Root is required")
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("jobs: root %s: %w", cfg.Root, err)
	}
	cfg.Root = root
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Shell == "" {
		cfg.Shell = DefaultShell
	}
	if cfg.RunTimeout <= 0 {
		cfg.RunTimeout = DefaultRunTimeout
	}
	if cfg.MaxRunTimeout <= 0 {
		cfg.MaxRunTimeout = DefaultMaxRunTimeout
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.Source == "" {
		cfg.Source = "jetway/jobs/" + cfg.WorkerID
	}
	cfg.Limits.Tree = treeLimits(cfg.Limits.Tree)
	for _, kv := range cfg.Env {
		name, _, _ := strings.Cut(kv, "=")
		if err := ForbiddenJobEnv(name); err != nil {
			return nil, err
		}
	}
	js, err := bus.JetStream(cfg.NC)
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	return &Worker{
		cfg: cfg, js: js, ready: make(chan struct{}),
		bound: map[string]bool{}, spaces: map[string]*workspace.Workspace{},
		fgRuns: map[string]int{}, fgTasks: map[string]bool{}, fgEnded: map[string]bool{}, lostFG: map[string]bool{}, lineage: map[string][]string{},
		handOffs: map[string]*handOff{},
		seqs:     map[string]uint64{}, overdues: map[string]int{}, eventKeys: map[string]string{},
	}, nil
}

// Ready is closed once the worker serves requests.
func (w *Worker) Ready() <-chan struct{} { return w.ready }

// ID is the worker id.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// Run recovers the worker's previous tasks, serves the micro service until
// ctx is done, then stops: no new requests, every running task killed (and
// its end published, since the model did not see it), the outbox drained.
func (w *Worker) Run(ctx context.Context) error {
	log := w.cfg.Log
	var err error
	if w.jobsKV, err = bus.OpenBucket(ctx, w.js, bus.BucketJobs); err != nil {
		return fmt.Errorf("jobs: %w (is the bus provisioned?)", err)
	}
	if w.bindKV, err = bus.OpenBucket(ctx, w.js, bus.BucketWorkers); err != nil {
		return fmt.Errorf("jobs: %w (is the bus provisioned?)", err)
	}
	if w.sessKV, err = bus.OpenBucket(ctx, w.js, bus.BucketSessions); err != nil {
		return fmt.Errorf("jobs: %w (is the bus provisioned, and may the jobs user read session records?)", err)
	}
	if err := os.MkdirAll(w.cfg.Root, 0o755); err != nil {
		return fmt.Errorf("jobs: root: %w", err)
	}
	if err := setNonDumpable(); err != nil {
		return err
	}
	if w.conf, err = w.detectConfinement(); err != nil {
		return err
	}
	w.disks = newDiskCaps(w.cfg.Root, w.cfg.WorkspaceSize, w.cfg.WorkspaceFiles)
	switch {
	case w.disks.on():
		log.Info().Str("disk_cap", w.disks.String()).Msg("jobs: each session's workspace and temporary directory are capped (a loop-mounted ext4 image each)")
	case w.disks.turnedOff:
		log.Info().Str("disk_cap", w.disks.String()).Msg("jobs: workspaces have no disk cap: a session can fill the file system under --root")
	default:
		log.Warn().Str("disk_cap", w.disks.String()).Msg("jobs: workspaces have NO disk cap: a session can fill the file system under --root")
	}
	switch {
	case w.conf.base != nil:
		log.Info().Str("confinement", w.conf.String()).Msg("jobs: each job is confined to its workspace and temporary directory (Landlock)")
		// The helper is loaded and the view probed now, so a worker that
		// cannot confine says so at start, not at its first job.
		if err := proctree.HelperReady(); err != nil {
			log.Error().Err(err).Msg("jobs: no confinement helper: every command will fail to start")
		} else if ok, why := proctree.ViewAvailable(); ok {
			log.Info().Msg("jobs: each job sees only its confinement's paths (a mount namespace of its own): no unix socket elsewhere is reachable")
		} else {
			log.Warn().Str("why", why).Msg("jobs: no mount namespace for jobs (needs root or user namespaces): jobs may not create unix sockets at all")
		}
	case w.cfg.AllowUnconfined:
		log.Warn().Str("confinement", "none").Int("landlock_abi", w.conf.abi).
			Msg("jobs: jobs run UNCONFINED (--allow-unconfined-jobs): each reaches every workspace and whatever else this worker's user can")
	default:
		log.Error().Str("confinement", "none").Int("landlock_abi", w.conf.abi).
			Msg("jobs: this kernel cannot confine jobs (no Landlock ABI 3+); every command will be refused unless the worker is started with --allow-unconfined-jobs")
	}
	if unread := agents.UnreadMCPSecretVars(os.Environ()); w.cfg.SecretEnv == nil && len(unread) > 0 {
		log.Warn().Strs("variables", unread).Msg("jobs: " + agents.UnreadMCPSecretWarning(unread))
	}
	records, err := w.loadRecords(ctx)
	if err != nil {
		return err
	}
	if n := killSurvivors(w.marker()); n > 0 {
		log.Warn().Int("processes", n).Msg("jobs: killed processes left by this worker's previous run")
	}
	w.clearTmpDirs()

	w.out = newOutbox(w.js, w.jobsKV, w.record, log)
	outDone := make(chan struct{})
	go func() { defer close(outDone); w.out.run() }()

	w.mgr = tasks.NewManager(tasks.Config{
		Limits:      w.cfg.Limits,
		Output:      w.outputFile,
		OnNotice:    w.onNotice,
		AppendClean: redact.AppendCleanLine,
		Unchanged:   redact.Unchanged,
		CleanTail:   redact.Lines,
		Proc:        proctree.Config{Grace: w.cfg.Grace, NoCgroups: w.cfg.NoCgroups, Log: log},
	})
	if info := limitsInfo(w.mgr.Host(), w.mgr.Limits().Tree); strings.Contains(info, "NOT ENFORCED") {
		log.Warn().Str("limits", info).Msg("jobs: a job's limits cannot all be enforced here (cgroups need root or a cgroup delegated to this user)")
	} else {
		log.Info().Str("limits", info).Msg("jobs: each job's limits")
	}
	w.mgr.SetOnEnd(w.onEnd)
	w.mgr.SetOnOverdue(w.onOverdue)
	w.restore(records)

	mcpCtx, stopMCP := context.WithCancel(ctx)
	defer stopMCP()
	mcpDone, err := w.startMCP(mcpCtx)
	if err != nil {
		w.mgr.Close()
		w.out.close()
		<-outDone
		return err
	}
	w.reqCtx, w.reqCancel = context.WithCancel(context.Background())
	defer w.reqCancel()
	svc, err := w.startService()
	if err != nil {
		stopMCP()
		<-mcpDone
		w.mgr.Close()
		w.out.close()
		<-outDone
		return err
	}
	log.Info().Str("worker", w.cfg.WorkerID).Str("root", w.cfg.Root).Int("restored", len(records)).
		Msg("jobs: worker ready")
	close(w.ready)

	<-ctx.Done()
	_ = svc.Stop()
	w.reqMu.Lock()
	w.stopping = true
	w.reqMu.Unlock()
	w.reqCancel()
	w.reqs.Wait()
	w.closing.Store(true)
	stopMCP()
	<-mcpDone
	w.mgr.Close()
	w.out.close()
	<-outDone
	w.mu.Lock()
	for _, ws := range w.spaces {
		_ = ws.Close()
	}
	w.mu.Unlock()
	for _, err := range w.disks.detachAll() {
		log.Warn().Err(err).Msg("jobs: a workspace's disk stays mounted")
	}
	log.Info().Str("worker", w.cfg.WorkerID).Msg("jobs: worker stopped")
	return nil
}

// treeLimits is lim with DefaultTreeLimits for its zero fields and no
// limit for its negative ones.
func treeLimits(lim proctree.Limits) proctree.Limits {
	def := func(v, d int64) int64 {
		switch {
		case v == 0:
			return d
		case v < 0:
			return 0
		}
		return v
	}
	lim.Memory = def(lim.Memory, DefaultTreeLimits.Memory)
	lim.Processes = int(def(int64(lim.Processes), int64(DefaultTreeLimits.Processes)))
	lim.CPUTime = time.Duration(def(int64(lim.CPUTime), int64(DefaultTreeLimits.CPUTime)))
	return lim
}

// sessionKey is the manager's session id for tenant/session.
func sessionKey(tenant, session string) string { return tenant + "/" + session }

// taskKey names one task across sessions.
func taskKey(sid, id string) string { return sid + "/" + id }

func splitSession(sid string) (tenant, session string) {
	tenant, session, _ = strings.Cut(sid, "/")
	return tenant, session
}

// recordKey is the task's key in the jetway_jobs bucket.
func recordKey(sid, id string) string {
	t, s := splitSession(sid)
	return t + "." + s + "." + id
}

var outputName = regexp.MustCompile(`^[0-9]+$`)

// outputFile is the manager's Config.Output: the task's file under
// <root>/.jobs/<tenant>/<session>/ (".jobs" is no valid tenant, so it never
// meets a workspace) and its ref "out:<session>:<hex>".
func (w *Worker) outputFile(sid, id string) (path, ref string, err error) {
	tenant, session := splitSession(sid)
	if !outputName.MatchString(id) {
		return "", "", fmt.Errorf("jobs: task id %q", id)
	}
	h := randHex(4)
	dir := filepath.Join(w.cfg.Root, ".jobs", tenant, session)
	return filepath.Join(dir, id+"-"+h+".out"), "out:" + session + ":" + h, nil
}
