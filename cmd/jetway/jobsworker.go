package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"jetway/pkg/bus"
	"jetway/pkg/tasks"
	"jetway/services/jobs"
)

func init() {
	addCommand(newJobsWorkerCmd)
	addDevComponent(devComponent{Name: "jobs-worker", Run: runDevJobsWorker})
	addDevFlags(func(cmd *cobra.Command) { addJobsWorkerFlags(cmd, &devJobsFlags, true) })
	addDevCheck(func() error { return devJobsFlags.apply(&jobs.Config{}) })
}

// devJobsFlags are `jetway dev`'s jobs worker flags: the same as
// jobs-worker's, with the same safe defaults.
var devJobsFlags jobsWorkerFlags

// jobsWorkerFlags are the worker settings shared by `jobs-worker` and dev.
type jobsWorkerFlags struct {
	grace       time.Duration
	maxRunning  int
	maxDuration time.Duration
	maxOutput   int64
	memory      int64
	processes   int
	cpuTime     time.Duration
	noCgroups   bool
	unconfined  bool
	jobEnv      []string
	jobRead     []string
	mcpIdle     time.Duration
	diskSize    int64
	diskFiles   int64
}

// apply puts the flags into cfg; a limit of 0 on the command line means
// none, which the jobs package spells as a negative value (its zero is the
// default).
func (f *jobsWorkerFlags) apply(cfg *jobs.Config) error {
	none := func(v int64) int64 {
		if v == 0 {
			return -1
		}
		return v
	}
	cfg.Grace = f.grace
	cfg.NoCgroups = f.noCgroups
	cfg.Limits.MaxRunning = f.maxRunning
	cfg.Limits.MaxDuration = f.maxDuration
	cfg.Limits.MaxOutputBytes = f.maxOutput
	cfg.Limits.Tree.Memory = none(f.memory)
	cfg.Limits.Tree.Processes = int(none(int64(f.processes)))
	cfg.Limits.Tree.CPUTime = time.Duration(none(int64(f.cpuTime)))
	cfg.WorkspaceSize = none(f.diskSize)
	cfg.WorkspaceFiles = none(f.diskFiles)
	cfg.AllowUnconfined = f.unconfined
	cfg.ReadOnly = f.jobRead
	if f.mcpIdle <= 0 {
		return fmt.Errorf("--mcp-idle %s: must be longer than zero", f.mcpIdle)
	}
	cfg.MCPIdle = f.mcpIdle
	for _, name := range f.jobEnv {
		if err := jobs.ForbiddenJobEnv(name); err != nil {
			return fmt.Errorf("--job-env: %w", err)
		}
		if v, ok := os.LookupEnv(name); ok {
			cfg.Env = append(cfg.Env, name+"="+v)
		}
	}
	return nil
}

func newJobsWorkerCmd(g *globals) *cobra.Command {
	var (
		nf        natsFlags
		id, root  string
		provision bool
		flags     jobsWorkerFlags
	)
	cmd := &cobra.Command{
		Use:   "jobs-worker",
		Short: "Run a jobs worker: the processes, output files and workspaces of the sessions bound to it",
		Long: `jobs-worker runs the shell commands agents start, as contained process trees
with their output in files, and serves them and the sessions' workspaces
(DIR/<tenant>/<session>) as the NATS micro service jetway-jobs, endpoints
jetway.jobs.<id>.<op> (see ` + "`nats micro info jetway-jobs`" + `). Job ends and overdue
jobs are published on jetway.jobevents.<tenant>.<session>.

The id must stay the same across restarts, with the same --root: a worker
that comes back reports the jobs it never saw end as lost and kills what
its previous run left behind. The buckets must exist (jetway dev, or
--provision).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger("jobs-worker")
			if err != nil {
				return err
			}
			leanerHeap()
			if root == "" {
				return errors.New("jobs-worker: --root (or JETWAY_JOBS_ROOT) is required")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			nc, err := bus.Connect(ctx, nf.config("jobs", "jetway-jobs-worker@"+id))
			if err != nil {
				return err
			}
			defer nc.Close()
			if provision {
				js, err := bus.JetStream(nc)
				if err != nil {
					return err
				}
				if err := bus.Provision(ctx, js, bus.ProvisionConfig{}); err != nil {
					return err
				}
			}
			cfg := jobs.Config{NC: nc, WorkerID: id, Root: root, Version: serviceVersion, Log: log}
			if err := flags.apply(&cfg); err != nil {
				return err
			}
			w, err := jobs.New(cfg)
			if err != nil {
				return err
			}
			go func() {
				select {
				case <-w.Ready():
					outf(cmd.OutOrStdout(), "jobs worker %s running on %s, root %s\n", id, nc.ConnectedUrlRedacted(), root)
				case <-ctx.Done():
				}
			}()
			return w.Run(ctx)
		},
	}
	f := cmd.Flags()
	nf.register(f)
	f.StringVar(&id, "id", envOr("JETWAY_JOBS_ID", defaultWorkerID()), "worker id: 1-64 of [A-Za-z0-9_-], stable across restarts (env JETWAY_JOBS_ID)")
	f.StringVar(&root, "root", os.Getenv("JETWAY_JOBS_ROOT"), "directory of the workspaces and output files (env JETWAY_JOBS_ROOT)")
	f.BoolVar(&provision, "provision", false, "create or update the streams and buckets first")
	addJobsWorkerFlags(cmd, &flags, false)
	return cmd
}

// addJobsWorkerFlags registers the worker's flags. For `jetway dev` the
// disk cap is off unless asked for: dev runs in a developer's directory,
// usually not as root (where it could not cap anyway), and as root its
// loop mounts would outlive a dev killed the hard way until the next start.
func addJobsWorkerFlags(cmd *cobra.Command, flags *jobsWorkerFlags, dev bool) {
	f := cmd.Flags()
	diskSize, diskFiles := int64(jobs.DefaultWorkspaceSize), int64(jobs.DefaultWorkspaceFiles)
	if dev {
		diskSize, diskFiles = 0, 0
	}
	f.DurationVar(&flags.grace, "grace", jobs.DefaultGrace, "how long a kill waits after SIGTERM before SIGKILL")
	f.IntVar(&flags.maxRunning, "max-running", envInt("JETWAY_JOBS_MAX_RUNNING", tasks.DefaultLimits.MaxRunning), "commands one session may run at once, foreground and background (env JETWAY_JOBS_MAX_RUNNING)")
	f.DurationVar(&flags.maxDuration, "max-duration", tasks.DefaultLimits.MaxDuration, "longest a job may run")
	f.Int64Var(&flags.maxOutput, "max-output", tasks.DefaultLimits.MaxOutputBytes, "largest output file of a job, in bytes")
	f.Int64Var(&flags.memory, "memory", envInt64("JETWAY_JOBS_MEMORY", jobs.DefaultTreeLimits.Memory), "memory limit of each job's process tree, in bytes (0: none; env JETWAY_JOBS_MEMORY)")
	f.IntVar(&flags.processes, "processes", envInt("JETWAY_JOBS_PROCESSES", jobs.DefaultTreeLimits.Processes), "process limit of each job's tree, threads included (0: none; env JETWAY_JOBS_PROCESSES)")
	f.DurationVar(&flags.cpuTime, "cpu-time", jobs.DefaultTreeLimits.CPUTime, "CPU time limit of each job's tree (0: none)")
	f.BoolVar(&flags.noCgroups, "no-cgroups", false, "contain process trees without cgroups")
	f.BoolVar(&flags.unconfined, "allow-unconfined-jobs", false,
		"run jobs even where the kernel cannot confine them (no Landlock ABI 3+): each job then reads and writes every workspace and whatever else the worker's user can, its credentials' files included")
	f.StringArrayVar(&flags.jobEnv, "job-env", nil, "NAME of a variable of the worker's environment to pass to every job (repeatable; NATS_* and JETWAY_* never are)")
	f.StringArrayVar(&flags.jobRead, "job-read", nil, "PATH jobs may read and execute besides the system directories, e.g. a toolchain (repeatable)")
	f.DurationVar(&flags.mcpIdle, "mcp-idle", jobs.DefaultMCPIdle, "how long a session's MCP stdio server may go unused before it is stopped")
	f.Int64Var(&flags.diskSize, "workspace-size", envInt64("JETWAY_JOBS_WORKSPACE_SIZE", diskSize),
		"disk cap of each session's workspace and temporary directory, in bytes (0: none; needs root; env JETWAY_JOBS_WORKSPACE_SIZE)")
	f.Int64Var(&flags.diskFiles, "workspace-files", envInt64("JETWAY_JOBS_WORKSPACE_FILES", diskFiles),
		"files each session's workspace and temporary directory may hold (0: none; needs root; env JETWAY_JOBS_WORKSPACE_FILES)")
}

func envInt64(key string, def int64) int64 {
	if n, err := strconv.ParseInt(os.Getenv(key), 10, 64); err == nil {
		return n
	}
	return def
}

func envInt(key string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(key)); err == nil {
		return n
	}
	return def
}

var notWorkerID = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// defaultWorkerID is the host name made into a worker id: stable across
// restarts of the same machine, which is what a worker id must be.
func defaultWorkerID() string {
	h, _ := os.Hostname()
	id := notWorkerID.ReplaceAllString(h, "-")
	if len(id) > 64 {
		id = id[:64]
	}
	if id == "" {
		id = "worker"
	}
	return id
}

// runDevJobsWorker runs a worker inside `jetway dev`, id "dev", with its
// workspaces under DATA/jobs.
func runDevJobsWorker(ctx context.Context, env *devEnv) error {
	log := env.Log.With().Str("component", "jobs-worker").Logger()
	cfg := jobs.Config{NC: env.NC, WorkerID: "dev", Root: filepath.Join(env.DataDir, "jobs"), Version: serviceVersion, Log: log}
	if err := devJobsFlags.apply(&cfg); err != nil {
		return err
	}
	w, err := jobs.New(cfg)
	if err != nil {
		return err
	}
	env.AddReadyCheck("jobs-worker", func(context.Context) error {
		select {
		case <-w.Ready():
			return nil
		default:
			return errors.New("starting")
		}
	})
	return w.Run(ctx)
}

// workerGCPercent is the jobs worker's GOGC unless the environment sets
// one. Its live heap is small (the compiled redaction rules are most of
// it) and it shares a machine with the commands it runs, so it trades a
// little collector time for a heap that grows half, not all, of what is
// live between collections: measured with jetway-bench's jobs group, peak
// RssAnon 27.2 MiB at the default 100 and 20.3 MiB at 50, with job starts
// and output capture unchanged.
const workerGCPercent = 50

func leanerHeap() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(workerGCPercent)
	}
}
