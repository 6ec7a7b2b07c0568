package jobs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"jetway/pkg/tasks/proctree"
	"jetway/pkg/tasks/proctree/confspec"
	"jetway/services/jobs/jobsapi"
)

// DefaultTreeLimits are each job's limits where Config.Limits.Tree leaves a
// field zero. 2 GiB of memory holds a compiler, a test suite or a language
// server, and stops a runaway allocation long before the machine swaps or
// its OOM killer picks a victim among other sessions. 1024 processes: the
// kernel counts threads too, so a parallel build of a large machine's width
// (every compiler with its threads) fits, while a fork bomb stops in well
// under a second. An hour of CPU time is a long build many times over; a
// spinning loop is ended even when the wall-clock limit (MaxDuration, 2 h)
// is further off.
var DefaultTreeLimits = proctree.Limits{Memory: 2 << 30, Processes: 1024, CPUTime: time.Hour}

// MetadataConfinement is the micro service metadata key saying how the
// worker confines its jobs: "landlock-v<ABI>", or "none" (jobs refused
// unless the worker was started allowing unconfined jobs, then
// "none (unconfined jobs allowed)").
const MetadataConfinement = "confinement"

// MetadataView is the micro service metadata key saying whether confined
// jobs get a file system view of their own: "mount namespace", or "none
// (unix sockets refused)" where the namespaces cannot be had.
const MetadataView = "view"

// MetadataLimits is the micro service metadata key saying how each job's
// limits hold on this host: for the whole tree by cgroups where the
// worker can make them (as root, or in a cgroup delegated to its user),
// else per process by rlimits, and the process limit then not at all
// (RLIMIT_NPROC would count every process of the worker's user, the
// worker and every other session's jobs included). For example
// "memory 2 GiB: the tree's (memory cgroup); processes 1024: the tree's
// (pids cgroup); CPU time 1h0m0s: the tree's (cgroup cpu.stat) and each
// process's (RLIMIT_CPU)".
const MetadataLimits = "limits"

// limitsInfo is the MetadataLimits value for trees started by h with lim.
func limitsInfo(h *proctree.Host, lim proctree.Limits) string {
	if h == nil {
		return "none (no process host)"
	}
	f := h.Features()
	var parts []string
	switch {
	case lim.Memory <= 0:
		parts = append(parts, "memory: none")
	case f.V2Memory:
		parts = append(parts, "memory "+proctree.Bytes(lim.Memory)+": the tree's (memory cgroup)")
	case f.MemoryV1 != "":
		parts = append(parts, "memory "+proctree.Bytes(lim.Memory)+": the tree's (v1 memory cgroup)")
	default:
		parts = append(parts, "memory "+proctree.Bytes(lim.Memory)+": each process's address space (RLIMIT_AS; no memory cgroup)")
	}
	switch {
	case lim.Processes <= 0:
		parts = append(parts, "processes: none")
	case f.V2Pids:
		parts = append(parts, "processes "+strconv.Itoa(lim.Processes)+": the tree's (pids cgroup)")
	case f.PidsV1 != "":
		parts = append(parts, "processes "+strconv.Itoa(lim.Processes)+": the tree's (v1 pids cgroup)")
	default:
		parts = append(parts, "processes "+strconv.Itoa(lim.Processes)+": NOT ENFORCED (no pids cgroup)")
	}
	switch {
	case lim.CPUTime <= 0:
		parts = append(parts, "CPU time: none")
	case f.V2Dir != "":
		parts = append(parts, "CPU time "+lim.CPUTime.String()+": the tree's (cgroup cpu.stat) and each process's (RLIMIT_CPU)")
	default:
		parts = append(parts, "CPU time "+lim.CPUTime.String()+": each process's (RLIMIT_CPU; no cgroup)")
	}
	return strings.Join(parts, "; ")
}

// viewInfo is the MetadataView value ("" when jobs are not confined).
func (w *Worker) viewInfo() string {
	if w.conf.base == nil {
		return ""
	}
	if ok, _ := proctree.ViewAvailable(); ok {
		return "mount namespace"
	}
	return "none (unix sockets refused)"
}

// confinement is what the worker found at start.
type confinement struct {
	abi  int                   // the kernel's Landlock ABI, 0 for none usable
	base *proctree.Confinement // the system part; nil when unconfined
}

func (c confinement) String() string {
	if c.base != nil {
		return "landlock-v" + strconv.Itoa(c.abi)
	}
	return "none"
}

// detectConfinement decides how jobs are confined. Landlock is used when
// the kernel has at least proctree.MinLandlockABI; below, jobs run only if
// AllowUnconfined says the operator accepts that they reach everything the
// worker can.
func (w *Worker) detectConfinement() (confinement, error) {
	abi := proctree.LandlockABI()
	if w.cfg.NoLandlock {
		abi = 0
	}
	if abi < proctree.MinLandlockABI {
		return confinement{abi: abi}, nil
	}
	base := proctree.SystemConfinement()
	if err := base.AddReadOnly(w.cfg.ReadOnly...); err != nil {
		return confinement{}, fmt.Errorf("jobs: --job-read: %w", err)
	}
	root, err := filepath.EvalSymlinks(w.cfg.Root)
	if err != nil {
		return confinement{}, fmt.Errorf("jobs: root: %w", err)
	}
	if d, ok := base.Overlaps(root); ok {
		return confinement{}, fmt.Errorf("jobs: root %s and %s, which every job may read, overlap: every workspace below it would be open to every job; choose a root elsewhere (or drop the --job-read path)", root, d)
	}
	return confinement{abi: abi, base: &base}, nil
}

// errUnconfined is a job refused because the worker cannot confine it.
func (w *Worker) errUnconfined() error {
	return &jobsapi.Error{Code: jobsapi.CodeUnavailable, Message: fmt.Sprintf(
		"jobs worker %s refuses to run commands: it cannot confine them (this kernel offers Landlock ABI %d, confinement needs %d, Linux 6.2 or newer), "+
			"so a command could read every session's workspace and the worker's own secrets; "+
			"the operator may start the worker with --allow-unconfined-jobs to accept that risk",
		w.cfg.WorkerID, w.conf.abi, proctree.MinLandlockABI)}
}

// jobConfinement is a job's confinement: the system part plus, read-write,
// the session's workspace and its temporary directory, and the network
// mode the session's agent profile gives ("" is none).
func (w *Worker) jobConfinement(ws, tmp, network string) *proctree.Confinement {
	if w.conf.base == nil {
		return nil
	}
	c := *w.conf.base
	c.ReadWrite = []string{ws, tmp}
	c.Network = network
	return &c
}

// checkNetwork refuses a network mode that is none of the profile's.
func checkNetwork(network string) error {
	if !confspec.ValidNetwork(network) {
		return badRequest("network %q: one of none, outbound, all", network)
	}
	return nil
}

// tmpDir is the session's temporary directory (TMPDIR of its jobs), next to
// its output files and outside every workspace: <root>/.jobs/<tenant>/<session>/tmp.
func (w *Worker) tmpDir(tenant, session string) (string, error) {
	if dir, ok := w.disks.tmpOf(sessionKey(tenant, session)); ok {
		return dir, nil // in the session's image: it counts against the cap
	}
	dir := filepath.Join(w.cfg.Root, ".jobs", tenant, session, "tmp")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("jobs: temporary directory of %s/%s: %w", tenant, session, err)
	}
	return dir, nil
}

// passedEnv are the worker's variables a job gets when they are set: the
// locale and time zone. Everything else of the worker's environment stays
// with the worker (its NATS URL, user, password, token and keys above all).
func passedEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "LANG" || name == "TZ" || strings.HasPrefix(name, "LC_") {
			env = append(env, kv)
		}
	}
	return env
}

// ForbiddenJobEnv reports why name may not be passed to jobs with
// --job-env: the worker's own credentials and settings.
func ForbiddenJobEnv(name string) error {
	up := strings.ToUpper(name)
	if strings.HasPrefix(up, "NATS_") || strings.HasPrefix(up, "JETWAY_") {
		return fmt.Errorf("jobs: %s is the worker's own setting and may hold its credentials; it is never passed to jobs", name)
	}
	return nil
}

// setNonDumpable keeps processes of the same user (a job, where the worker
// cannot confine it) from reading the worker's /proc/<pid>/environ, mem and
// fds: a non-dumpable process's /proc entries belong to root and ptrace
// access to it needs CAP_SYS_PTRACE.
func setNonDumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("jobs: set the worker non-dumpable: %w", err)
	}
	return nil
}

// confinementInfo is the MetadataConfinement value.
func (w *Worker) confinementInfo() string {
	if w.conf.base == nil && w.cfg.AllowUnconfined {
		return "none (unconfined jobs allowed)"
	}
	return w.conf.String()
}

// clearTmpDirs empties the sessions' temporary directories at start: no job
// of a previous run is alive to use them, and nothing else would ever
// remove what they left.
func (w *Worker) clearTmpDirs() {
	dirs, _ := filepath.Glob(filepath.Join(w.cfg.Root, ".jobs", "*", "*", "tmp"))
	// An image a killed worker left mounted: its tmp, not the image's ws.
	left, _ := filepath.Glob(filepath.Join(w.cfg.Root, ".jobs", "*", "*", "disk", "tmp"))
	for _, d := range append(dirs, left...) {
		if err := os.RemoveAll(d); err != nil {
			w.cfg.Log.Warn().Err(err).Str("dir", d).Msg("jobs: cannot clear a temporary directory")
		}
	}
}
