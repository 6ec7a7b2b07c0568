// Package proctree starts a command as the root of a contained process tree
// and ends the whole tree on demand, escapees included.
//
// Containment is layered because hosts differ: every root gets its own
// process group; the host process becomes a child subreaper so orphans come
// back to it; where the unified cgroup hierarchy is writable each tree gets a
// cgroup it is born into (CLONE_INTO_CGROUP), killed with cgroup.kill; and a
// sweep of this process's descendants in /proc (by process group, by the
// JETWAY_TASK environment marker, and by parent pid from any member) finds
// what the others miss. Limits come from cgroup controllers (v2 or v1) and
// from rlimits set by the confinement helper, a small static program the
// tree's root starts as (helper.go), which also confines it.
package proctree

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"jetway/pkg/tasks/proctree/confspec"
)

// MarkerEnv is the environment variable every process of a tree inherits;
// its value names the tree, so the sweep can find processes that left the
// process group.
const MarkerEnv = "JETWAY_TASK"

// Limits caps a tree's resources. The zero value of a field is no limit.
type Limits struct {
	// Memory caps the whole tree's memory (memory cgroup). Where no memory
	// controller is available it becomes a per-process RLIMIT_AS.
	Memory int64 `json:"memory,omitempty"`
	// Processes caps how many processes (tasks, as the kernel counts them)
	// the tree may have at once (pids cgroup): a fork bomb hits the ceiling.
	Processes int `json:"processes,omitempty"`
	// CPUTime caps the tree's total CPU time (cgroup v2 cpu.stat, checked
	// every 50ms) and, rounded up to seconds, each process's RLIMIT_CPU.
	CPUTime time.Duration `json:"cpu_time,omitempty"`
	// FileSize caps the size of any file a process writes (RLIMIT_FSIZE).
	FileSize int64 `json:"file_size,omitempty"`
	// AddressSpace caps each process's virtual memory (RLIMIT_AS).
	AddressSpace int64 `json:"address_space,omitempty"`
}

// IsZero reports whether no limit is set.
func (l Limits) IsZero() bool { return l == Limits{} }

// Config sets up a Host.
type Config struct {
	// Grace is how long Kill waits after SIGTERM before SIGKILL; zero means
	// 5 seconds.
	Grace time.Duration
	// NoCgroups turns off cgroups, leaving process groups, the subreaper and
	// the /proc sweep (what a host without a writable cgroup mount gets).
	NoCgroups bool
	// Log receives what containment was found; the zero value logs nothing.
	Log zerolog.Logger
	// NoView turns the confined trees' file system view off even where
	// the host allows one (ViewAvailable): they then may not create
	// AF_UNIX sockets at all.
	NoView bool
	// NoForkServer starts every tree through exec.Cmd, not through the
	// helper's fork server (forkserver.go).
	NoForkServer bool
}

// Host starts and contains process trees for one owner (a task manager).
// It is safe for concurrent use.
type Host struct {
	cfg   Config
	feat  Features
	id    string // unique among Hosts on the machine: "<pid>-<n>"
	v2    string // this host's parent cgroup dirs, "" when unavailable
	pids  string
	mem   string
	seq   atomic.Int64
	mu    sync.Mutex
	trees map[*Tree]struct{}
	done  bool
	reuse []reusable // empty task cgroups of ended trees (reuse.go)
}

var hostSeq atomic.Int64

// Detect reports what containment this machine offers, without creating
// anything lasting.
func Detect() Features {
	f := detectCgroups()
	var v int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0); err == nil {
		f.Subreaper = v != 0
	}
	return f
}

// NewHost detects the containment available, creates this host's parent
// cgroups and makes the process a child subreaper. Close releases them.
func NewHost(cfg Config) (*Host, error) {
	if cfg.Grace <= 0 {
		cfg.Grace = 5 * time.Second
	}
	h := &Host{cfg: cfg, trees: map[*Tree]struct{}{}}
	h.id = fmt.Sprintf("%d-%d", os.Getpid(), hostSeq.Add(1))
	if !cfg.NoCgroups {
		h.feat = detectCgroups()
	}
	h.feat.Subreaper = startReaper()
	name := "jetway-" + h.id
	if d := h.feat.V2Dir; d != "" {
		sweepStale(d)
		if err := os.Mkdir(filepath.Join(d, name), 0o755); err == nil {
			h.v2 = filepath.Join(d, name)
			_, err := os.Stat(filepath.Join(h.v2, "cgroup.kill"))
			h.feat.V2Kill = err == nil
			// Ask for the controllers; this works only where the parent
			// delegates them, and task cgroups then get pids.max/memory.max.
			_ = os.WriteFile(filepath.Join(h.v2, "cgroup.subtree_control"), []byte("+pids +memory"), 0)
			ctrl, _ := os.ReadFile(filepath.Join(h.v2, "cgroup.subtree_control"))
			h.feat.V2Pids = strings.Contains(string(ctrl), "pids")
			h.feat.V2Memory = strings.Contains(string(ctrl), "memory")
		} else {
			h.feat.V2Dir = ""
			cfg.Log.Warn().Err(err).Msg("proctree: cannot create a cgroup; falling back")
		}
	}
	if d := h.feat.PidsV1; d != "" && !h.feat.V2Pids {
		sweepStale(d)
		if os.Mkdir(filepath.Join(d, name), 0o755) == nil {
			h.pids = filepath.Join(d, name)
		} else {
			h.feat.PidsV1 = ""
		}
	}
	if d := h.feat.MemoryV1; d != "" && !h.feat.V2Memory {
		sweepStale(d)
		if os.Mkdir(filepath.Join(d, name), 0o755) == nil {
			h.mem = filepath.Join(d, name)
		} else {
			h.feat.MemoryV1 = ""
		}
	}
	cfg.Log.Info().Str("containment", h.feat.String()).Msg("proctree: host ready")
	return h, nil
}

// Cgroup is the host's own v2 cgroup directory, parent of its trees'
// cgroups; "" without one. Close removes it.
func (h *Host) Cgroup() string { return h.v2 }

// Features reports the containment this host uses.
func (h *Host) Features() Features { return h.feat }

// sweepStale removes the cgroups of hosts whose process is gone (a worker
// that crashed), killing what they still hold: nothing outlives its worker
// for longer than the next worker's start.
func sweepStale(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, "jetway-") || strings.HasPrefix(name, "jetway-probe") {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(name, "jetway-"), "-", 2)[0])
		if err != nil {
			continue
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			continue
		}
		sub := filepath.Join(dir, name)
		kids, _ := os.ReadDir(sub)
		for _, k := range kids {
			if k.IsDir() {
				killCgroup(filepath.Join(sub, k.Name()))
			}
		}
		_ = removeCgroup(sub)
	}
}

// killCgroup SIGKILLs every process of a cgroup.
func killCgroup(dir string) {
	if os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0) == nil {
		return
	}
	for _, pid := range readPids(filepath.Join(dir, "cgroup.procs")) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("proctree: host closed")

// Start starts cmd as the root of a new contained tree. cmd must not have
// been started; Start sets its SysProcAttr (own process group, parent-death
// signal, cgroup) and adds the marker to its environment, and, when limits
// need it, runs it through the confinement helper. A cmd without an Env gets MinimalEnv,
// not this process's environment, which may hold credentials.
func (h *Host) Start(cmd *exec.Cmd, lim Limits) (*Tree, error) {
	return h.StartConfined(cmd, lim, nil)
}

// StartConfined is Start with the tree confined to c (see Confinement);
// a nil c confines nothing. A confined tree always starts through the
// helper, which confines itself and then execs the command; one that
// cannot be confined does not run (the helper exits 127 saying why). c's
// View is decided here: set where the host allows a view (ViewAvailable)
// and the host's config does not turn it off.
func (h *Host) StartConfined(cmd *exec.Cmd, lim Limits, c *Confinement) (*Tree, error) {
	if cmd.Err != nil {
		return nil, fmt.Errorf("proctree: start %s: %w", cmd.Path, cmd.Err)
	}
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	h.mu.Unlock()

	n := h.seq.Add(1)
	t := &Tree{
		h: h, cmd: cmd, lim: lim, v2fd: -1, confined: c != nil,
		token: fmt.Sprintf("%s-%d", h.id, n),
		known: map[int]uint64{},
		done:  make(chan struct{}),
	}
	name := fmt.Sprintf("t%d", n)
	var shim confspec.Spec
	if h.v2 != "" {
		if err := h.treeCgroup(t, name); err != nil {
			return nil, err
		}
	}
	fail := func(err error) (*Tree, error) {
		t.Close()
		return nil, fmt.Errorf("proctree: limits for %s: %w", cmd.Path, err)
	}
	v2Pids, v2Mem := false, false
	if t.v2 != "" {
		var err error
		if v2Pids, v2Mem, err = t.writeV2Limits(lim); err != nil {
			return fail(err)
		}
	}
	if lim.Processes > 0 && !v2Pids {
		switch {
		case h.pids != "":
			if t.pidsDir == "" {
				dir := filepath.Join(h.pids, name)
				if err := os.Mkdir(dir, 0o755); err != nil {
					return fail(err)
				}
				t.pidsDir = dir
			}
			if t.pidsMax != lim.Processes {
				if err := writeFile(filepath.Join(t.pidsDir, "pids.max"), strconv.Itoa(lim.Processes)); err != nil {
					return fail(err)
				}
				t.pidsMax = lim.Processes
			}
			shim.Join = append(shim.Join, t.pidsDir)
		default:
			h.cfg.Log.Warn().Int("processes", lim.Processes).Msg("proctree: no pids controller; process limit not enforced")
		}
	}
	if lim.Memory > 0 && !v2Mem {
		switch {
		case h.mem != "":
			if t.memDir == "" {
				dir := filepath.Join(h.mem, name)
				if err := os.Mkdir(dir, 0o755); err != nil {
					return fail(err)
				}
				t.memDir = dir
				// Without swap accounting the tree could page out instead
				// of hitting the limit; best effort.
				_ = writeFile(filepath.Join(dir, "memory.swappiness"), "0")
			}
			if t.memMax != lim.Memory {
				if err := writeFile(filepath.Join(t.memDir, "memory.limit_in_bytes"), strconv.FormatInt(lim.Memory, 10)); err != nil {
					return fail(err)
				}
				t.memMax = lim.Memory
			}
			shim.Join = append(shim.Join, t.memDir)
		default:
			if lim.AddressSpace == 0 || lim.Memory < lim.AddressSpace {
				lim.AddressSpace = lim.Memory
			}
		}
	}
	if lim.CPUTime > 0 {
		shim.CPU = uint64(math.Ceil(lim.CPUTime.Seconds()))
	}
	if lim.FileSize > 0 {
		shim.FSize = uint64(lim.FileSize)
	}
	if lim.AddressSpace > 0 {
		shim.AS = uint64(lim.AddressSpace)
	}

	env := cmd.Env
	if env == nil {
		env = MinimalEnv()
	}
	if c != nil {
		cc := *c
		cc.View = false
		if !h.cfg.NoView {
			cc.View, _ = ViewAvailable()
		}
		shim.Confine = &cc
	}
	env = append(env[:len(env):len(env)], MarkerEnv+"="+t.token)
	cmd.Env = env
	if len(shim.Join) > 0 || shim.CPU > 0 || shim.FSize > 0 || shim.AS > 0 || shim.Confine != nil {
		files, err := wrapInHelper(cmd, shim)
		if err != nil {
			return fail(err)
		}
		defer closeAll(files)
		t.viaHelper = true
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if !cmd.SysProcAttr.Setsid {
		// A new session (a pty's) is already a group of its own, and
		// setpgid would fail on its leader.
		cmd.SysProcAttr.Setpgid = true
		cmd.SysProcAttr.Pgid = 0
	}
	// The root dies with the thread that started it; Go keeps threads alive
	// unless a goroutine locked to one exits, and a dead worker must not
	// leave its commands running.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if t.v2fd >= 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = t.v2fd
	}
	startMu.RLock()
	err := t.launch(cmd)
	if err != nil && t.v2fd >= 0 && !errors.Is(err, exec.ErrNotFound) {
		// clone3 with CLONE_INTO_CGROUP refused (EACCES where the cgroup's
		// placement rules are not met; seen under load in the jobs tests):
		// run uncontained by cgroup rather than not at all.
		h.cfg.Log.Warn().Err(err).Msg("proctree: start in cgroup failed; retrying without")
		first := err
		cmd.SysProcAttr.UseCgroupFD = false
		// An exec.Cmd starts once, even when its Start failed: the retry
		// is a fresh one with the same fields (a context given to
		// exec.CommandContext is not carried over; the callers use none).
		*cmd = exec.Cmd{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir,
			Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr,
			ExtraFiles: cmd.ExtraFiles, SysProcAttr: cmd.SysProcAttr}
		_ = syscall.Close(t.v2fd)
		_ = removeCgroup(t.v2)
		t.v2, t.v2fd = "", -1
		if err = t.launch(cmd); err != nil {
			err = fmt.Errorf("%w (and in its cgroup: %w)", err, first)
		}
	}
	if err == nil {
		track(cmd.Process.Pid)
	}
	startMu.RUnlock()
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("proctree: start %s: %w", cmd.Path, err)
	}
	t.pid = cmd.Process.Pid
	h.mu.Lock()
	h.trees[t] = struct{}{}
	h.mu.Unlock()
	if lim.CPUTime > 0 && t.v2 != "" {
		go t.watchCPU(lim.CPUTime)
	}
	if t.v2 == "" {
		go t.watchDescendants()
	}
	return t, nil
}

// MinimalEnv is the environment of a command started without one: PATH,
// and the locale and time zone variables when set. Nothing else of this
// process's environment is passed on.
func MinimalEnv() []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	env := []string{"PATH=" + path}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "LANG" || name == "TZ" || strings.HasPrefix(name, "LC_") {
			env = append(env, kv)
		}
	}
	return env
}

// Close kills every tree still alive, then removes the host's cgroups.
// Nothing started through the host outlives it.
func (h *Host) Close() {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return
	}
	h.done = true
	trees := make([]*Tree, 0, len(h.trees))
	for t := range h.trees {
		trees = append(trees, t)
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range trees {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = t.Kill()
		}()
	}
	wg.Wait()
	// The marker sweep catches processes of trees already closed by their
	// owner but not waited for.
	prefix := MarkerEnv + "=" + h.id + "-"
	for pid := range descendants(scanProcs(), os.Getpid()) {
		if hasEnvPrefix(pid, prefix) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if h.v2 == "" {
		h.killOrphans()
	}
	reapOrphans()
	h.dropReused()
	for _, d := range []string{h.v2, h.pids, h.mem} {
		if d != "" {
			if err := removeCgroup(d); err != nil {
				h.cfg.Log.Warn().Err(err).Msg("proctree: cleanup")
			}
		}
	}
	stopReaper()
}

func hasEnvPrefix(pid int, prefix string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for _, e := range strings.Split(string(b), "\x00") {
		if strings.HasPrefix(e, prefix) {
			return true
		}
	}
	return false
}

// killOrphans is the last resort of a host without cgroups: a process that
// left the process group, dropped the marker and lost its parent before any
// sweep saw it belongs to no tree, but it was reparented to this process
// (the subreaper), outside its process group. Every such orphan and what
// runs below it is killed. A process runs one Host in practice; a second
// open one would lose its own such orphans too.
func (h *Host) killOrphans() {
	all := scanProcs()
	self := syscall.Getpgrp()
	for _, pid := range childrenOfSelf() {
		p, ok := all[pid]
		if !ok || isTracked(pid) || p.pgrp == self || p.state == 'Z' {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for k := range descendants(all, pid) {
			_ = syscall.Kill(k, syscall.SIGKILL)
		}
	}
	waitFor(time.Second, func() bool {
		reapOrphans()
		for _, pid := range childrenOfSelf() {
			if p, ok := readStat(pid); ok && !isTracked(pid) && p.pgrp != self {
				return false
			}
		}
		return true
	})
}
