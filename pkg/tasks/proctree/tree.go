package proctree

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Tree is a started command and every process it created. Kill ends them
// all; Close releases the tree's cgroups afterwards.
type Tree struct {
	h   *Host
	cmd *exec.Cmd
	// proc is the root when the fork server started it (cmd was not
	// started then: Wait waits for proc and fills cmd's ProcessState).
	proc  *os.Process
	lim   Limits
	pid   int
	token string

	v2   string // the tree's v2 cgroup, "" without
	v2fd int
	// The counters of a reused cgroup before the root was born (reuse.go).
	base counters
	// v2Limits: the limits in the v2 cgroup's files (pids.max,
	// memory.max), which a later tree that reuses it keeps or rewrites;
	// cgKilled (guarded by killMu): cgroup.kill was written, which keeps
	// it from being reused.
	v2Limits Limits
	cgKilled bool
	// empty (guarded by killMu): the root was reaped and the tree's
	// cgroups were found empty, which they stay (nothing is left to fork
	// into them): a later Kill has nothing to do.
	empty bool
	// confined: the tree runs confined (Landlock, no capabilities), so
	// none of its processes can leave its v2 cgroup or make cgroups:
	// "populated 0" in the v2 cgroup's cgroup.events is all of it gone.
	confined bool
	// viaHelper: cmd runs the confinement helper (wrapInHelper), so the
	// fork server can start it.
	viaHelper bool
	pidsDir   string // v1 cgroups, "" without
	memDir    string
	// pidsMax and memMax: the limits in the v1 cgroups' files.
	pidsMax int
	memMax  int64

	cpuHit atomic.Bool
	killMu sync.Mutex // one Kill at a time

	knownMu sync.Mutex
	known   map[int]uint64 // pid -> start time of members seen by a sweep

	waitOnce sync.Once
	waitErr  error
	done     chan struct{}

	closeOnce sync.Once
	limitHit  string // cached by Close
	closed    atomic.Bool
}

// Pid is the root's process id (also the tree's process group id).
func (t *Tree) Pid() int { return t.pid }

// Marker is the JETWAY_TASK value the tree's processes carry.
func (t *Tree) Marker() string { return t.token }

// Cgroup is the tree's v2 cgroup directory, "" when it has none.
func (t *Tree) Cgroup() string { return t.v2 }

// Started exists for the Windows shape of the tasks.ProcessTree contract
// (assign a suspended process to a job object); on Linux the root is born
// inside its cgroup, so there is nothing left to do.
func (t *Tree) Started() error { return nil }

// Wait waits for the root to exit (exec.Cmd.Wait) and returns its error.
// Safe to call from several goroutines; only the first waits.
func (t *Tree) Wait() error {
	t.waitOnce.Do(func() {
		if t.proc != nil {
			t.waitErr = t.waitProc()
		} else {
			t.waitErr = t.cmd.Wait()
		}
		untrack(t.pid)
		close(t.done)
	})
	<-t.done
	return t.waitErr
}

// waitProc is exec.Cmd.Wait for a root the fork server started: the
// same error for the same end (an *exec.ExitError unless it exited 0),
// and cmd.ProcessState set.
func (t *Tree) waitProc() error {
	state, err := t.proc.Wait()
	if err != nil {
		return err
	}
	t.cmd.ProcessState = state
	if !state.Success() {
		return &exec.ExitError{ProcessState: state}
	}
	return nil
}

// launch starts cmd, through the fork server where the host uses it and
// cmd is one it can start, else with exec.Cmd.Start. startMu is held
// (shared).
func (t *Tree) launch(cmd *exec.Cmd) error {
	if !t.h.cfg.NoForkServer && t.viaHelper {
		cg := -1
		if a := cmd.SysProcAttr; a.UseCgroupFD {
			cg = a.CgroupFD
		}
		p, err := forkServerStart(cmd, cg)
		if err == nil {
			t.proc, cmd.Process = p, p
			return nil
		}
		if !errors.Is(err, errNoForkServer) {
			return err
		}
	}
	return cmd.Start()
}

// Done is closed once Wait has returned.
func (t *Tree) Done() <-chan struct{} { return t.done }

// watchCPU ends the tree when its total CPU time passes the limit: RLIMIT_CPU
// counts each process alone, so a tree of many would get far more.
func (t *Tree) watchCPU(limit time.Duration) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	path := filepath.Join(t.v2, "cpu.stat")
	for {
		select {
		case <-t.done:
			return
		case <-tick.C:
		}
		if time.Duration(eventCount(path, "usage_usec")-t.base.cpu)*time.Microsecond >= limit {
			t.cpuHit.Store(true)
			t.killMu.Lock()
			if !t.closed.Load() {
				t.signal(syscall.SIGKILL, true)
			}
			t.killMu.Unlock()
			return
		}
	}
}

// watchDescendants is the fallback for a tree without a cgroup: a sweep
// every 250ms remembers the tree's processes, so one whose parent died and
// which dropped both the process group and the marker (env -u JETWAY_TASK
// setsid ...) is still known when the tree is killed.
func (t *Tree) watchDescendants() {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-t.done:
			return
		case <-tick.C:
			t.members(true)
		}
	}
}

// members finds the tree's processes: its cgroups' members and, on a full
// sweep (or without a v2 cgroup), this process's descendants that share the
// root's process group, carry the marker, were seen before, or descend from
// any of those.
func (t *Tree) members(full bool) map[int]proc {
	out := map[int]proc{}
	var from []int
	if t.v2 != "" {
		from = append(from, readPids(filepath.Join(t.v2, "cgroup.procs"))...)
	}
	for _, d := range []string{t.pidsDir, t.memDir} {
		if d != "" {
			from = append(from, readPids(filepath.Join(d, "cgroup.procs"))...)
		}
	}
	if !full && t.v2 != "" {
		for _, pid := range from {
			if p, ok := readStat(pid); ok {
				out[pid] = p
			}
		}
		return out
	}
	all := scanProcs()
	desc := descendants(all, os.Getpid())
	in := map[int]bool{}
	for _, pid := range from {
		in[pid] = true
	}
	marker := MarkerEnv + "=" + t.token
	t.knownMu.Lock()
	for pid, p := range desc {
		if in[pid] || p.pgrp == t.pid || t.known[pid] == p.start || (p.state != 'Z' && hasEnv(pid, marker)) {
			out[pid] = p
		}
	}
	// Everything below a member is a member.
	for pid := range out {
		for k, p := range descendants(desc, pid) {
			out[k] = p
		}
	}
	for pid, p := range out {
		t.known[pid] = p.start
	}
	t.knownMu.Unlock()
	// The root, even as a zombie nobody has waited for yet.
	if p, ok := all[t.pid]; ok && !t.isReaped() {
		out[t.pid] = p
	}
	return out
}

func (t *Tree) isReaped() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// signal sends sig to every member; it returns how many were alive.
func (t *Tree) signal(sig syscall.Signal, full bool) int {
	// Find the members before signalling anyone: a parent that dies first
	// would hand its children to this process, out of reach of the walk
	// down from the root.
	members := t.members(full)
	if sig == syscall.SIGKILL && t.v2 != "" {
		t.cgKilled = true
		_ = os.WriteFile(filepath.Join(t.v2, "cgroup.kill"), []byte("1"), 0)
	}
	if !t.isReaped() {
		_ = syscall.Kill(-t.pid, sig)
	}
	live := 0
	for pid, p := range members {
		if p.state == 'Z' {
			continue
		}
		live++
		_ = syscall.Kill(pid, sig)
		if sig == syscall.SIGTERM {
			// A stopped process would not act on SIGTERM until continued.
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	return live
}

// alive counts members that are not zombies, reaping orphaned zombies on
// the way so they leave /proc.
func (t *Tree) alive(full bool) int {
	reapOrphans()
	n := 0
	for pid, p := range t.members(full) {
		if p.state != 'Z' || (pid != t.pid && !isTracked(pid)) {
			n++
		}
	}
	return n
}

// Kill ends the tree: SIGTERM to every member, SIGKILL to what is left after
// the grace period, and then waits until no member is left (orphaned
// zombies reaped). The root's own status is left for Wait.
func (t *Tree) Kill() error {
	return t.kill(t.h.cfg.Grace)
}

// KillNow is Kill without the grace period.
func (t *Tree) KillNow() error { return t.kill(0) }

func (t *Tree) kill(grace time.Duration) error {
	t.killMu.Lock()
	defer t.killMu.Unlock()
	if t.closed.Load() {
		// Close ended the tree, and its cgroup may be another tree's now.
		return nil
	}
	full := t.v2 == ""
	// A cgroup cannot be left by the escapes a command can make (setsid,
	// double fork, dropping the marker), so an empty cgroup after the root
	// was waited for means an empty tree: the common end of a task costs
	// one read, not a /proc sweep.
	if t.empty {
		return nil
	}
	if !full && t.isReaped() && t.emptyNow() {
		t.empty = true
		return nil
	}
	if grace > 0 && t.signal(syscall.SIGTERM, true) > 0 {
		waitFor(grace, func() bool { return t.alive(full) == 0 })
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		t.signal(syscall.SIGKILL, full)
		if waitFor(100*time.Millisecond, func() bool { return t.alive(full) == 0 }) {
			// One full sweep confirms nothing left the cgroup.
			if t.alive(true) == 0 {
				return nil
			}
			full = true
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("proctree: tree %s: %d processes survived SIGKILL", t.token, t.alive(true))
		}
	}
}

// emptyNow reports whether the tree (with a v2 cgroup) has no process
// left: for a confined tree its v2 cgroup's cgroup.events, one read;
// otherwise every cgroup's process list.
func (t *Tree) emptyNow() bool {
	if t.confined {
		return unpopulated(t.v2)
	}
	return len(t.members(false)) == 0
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for wait := time.Millisecond; ; {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
		if wait < 20*time.Millisecond {
			wait *= 2
		}
	}
}

// Exceeded reports whether a resource limit ended (or refused) a process
// of the tree.
func (t *Tree) Exceeded() bool { return t.LimitHit() != "" }

// LimitHit names the limit that ended or refused a process of the tree
// ("memory limit (64 MiB)"), or "" when none did.
func (t *Tree) LimitHit() string {
	if t.closed.Load() {
		return t.limitHit
	}
	return t.computeLimitHit()
}

func (t *Tree) computeLimitHit() string { return t.limitHitFrom(t.counters()) }

// counters are what t's cgroups count: usage_usec, oom_kill and the pids
// limit's max events of the v2 cgroup, and the same of its v1 cgroups
// (memory.oom_control, pids.events); a file the host does not have is
// not read.
type counters struct{ cpu, oom, pids, oom1, pids1 int64 }

func (t *Tree) counters() counters {
	var c counters
	if t.v2 != "" {
		c.cpu = eventCount(filepath.Join(t.v2, "cpu.stat"), "usage_usec")
		if t.h.feat.V2Memory {
			c.oom = eventCount(filepath.Join(t.v2, "memory.events"), "oom_kill")
		}
		if t.h.feat.V2Pids {
			c.pids = eventCount(filepath.Join(t.v2, "pids.events"), "max")
		}
	}
	if t.memDir != "" {
		c.oom1 = eventCount(filepath.Join(t.memDir, "memory.oom_control"), "oom_kill")
	}
	if t.pidsDir != "" {
		c.pids1 = eventCount(filepath.Join(t.pidsDir, "pids.events"), "max")
	}
	return c
}

// limitHitFrom is LimitHit given the cgroups' counters now.
func (t *Tree) limitHitFrom(c counters) string {
	var hits []string
	if t.cpuHit.Load() || t.rootSignal() == syscall.SIGXCPU {
		hits = append(hits, "CPU time limit ("+t.lim.CPUTime.String()+")")
	}
	if t.lim.Memory > 0 && c.oom-t.base.oom+c.oom1-t.base.oom1 > 0 {
		hits = append(hits, "memory limit ("+Bytes(t.lim.Memory)+")")
	}
	if t.lim.Processes > 0 && c.pids-t.base.pids+c.pids1-t.base.pids1 > 0 {
		hits = append(hits, "process limit ("+strconv.Itoa(t.lim.Processes)+")")
	}
	if t.rootSignal() == syscall.SIGXFSZ {
		hits = append(hits, "file size limit ("+Bytes(t.lim.FileSize)+")")
	}
	return strings.Join(hits, ", ")
}

func (t *Tree) rootSignal() syscall.Signal {
	if !t.isReaped() || t.cmd.ProcessState == nil {
		return 0
	}
	if ws, ok := t.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

// Close kills what is left of the tree and removes its cgroups. Call it after
// Wait; LimitHit keeps answering afterwards.
func (t *Tree) Close() {
	t.closeOnce.Do(func() {
		// The counters at the end tell the limits hit, and are the bases
		// of a later tree that reuses the cgroups: nothing runs in them
		// in between, so its start need not read them.
		var end counters
		if t.pid != 0 {
			_ = t.KillNow()
			end = t.counters()
			t.limitHit = t.limitHitFrom(end)
		} else {
			end = t.counters()
		}
		// From here on no kill touches the cgroup, which may be handed to
		// another tree below.
		t.killMu.Lock()
		t.closed.Store(true)
		reusableCgroup, empty := !t.cgKilled, t.empty
		t.killMu.Unlock()
		v2 := t.v2
		kept := reusable{dir: v2, fd: t.v2fd, limits: t.v2Limits, pids: t.pidsDir, mem: t.memDir, pidsMax: t.pidsMax, memMax: t.memMax, base: end}
		pidsDir, memDir := t.pidsDir, t.memDir
		if v2 != "" && t.v2fd >= 0 && reusableCgroup && t.h.keepCgroup(kept, empty, empty && t.confined) {
			v2, pidsDir, memDir = "", "", "" // kept for a later tree, with its descriptor
		} else if t.v2fd >= 0 {
			_ = syscall.Close(t.v2fd)
		}
		for _, d := range []string{v2, pidsDir, memDir} {
			if d == "" {
				continue
			}
			// A cgroup whose last zombie is being reaped refuses rmdir for
			// a moment.
			waitFor(time.Second, func() bool { return removeCgroup(d) == nil })
		}
		t.h.mu.Lock()
		delete(t.h.trees, t)
		t.h.mu.Unlock()
	})
}

// Bytes formats a byte count in binary units ("64 MiB").
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + string("KMGTPE"[exp]) + "iB"
}
