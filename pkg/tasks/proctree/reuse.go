package proctree

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// reuseCount is how many empty task cgroups a host keeps for later trees.
const reuseCount = 4

// Reused cgroups. The first process born into a v2 cgroup costs the kernel
// far more than later ones: on this project's VMs a clone3 into a fresh
// cgroup took ~0.7 ms at the median, against ~0.2 ms (a plain fork and exec)
// into one that had held processes before; creating the cgroup well ahead
// of time did not help. That was most of what starting a task cost. So the
// cgroup of a tree that ended is kept, once it is verifiably empty, and a
// later tree is born into it instead of into a new one. Each tree still has
// a cgroup of its own for its whole life, and is born into it.
//
// A cgroup that was ever killed through cgroup.kill is not reused either:
// on this kernel (6.18) a process later born into it with CLONE_INTO_CGROUP
// was SIGKILLed at birth (cgroup's kill sequence number is compared with
// the one the fork started from).
//
// A cgroup that held limits is reused too: the tree that takes it writes
// its own limits, or "max" where it has none, before its root is born; the
// counters that tell a limit was hit (pids.events, memory.events) and the
// CPU time it used before are read when the earlier tree is closed (they
// do not change while the cgroup is empty) and subtracted (Tree.base).
// Page cache the earlier tree left charged to it is reclaimed first when
// the new tree needs the memory.

// reusable is an empty task cgroup kept open for CLONE_INTO_CGROUP.
type reusable struct {
	dir    string
	fd     int
	limits Limits // what its pids.max and memory.max say
	// pids and mem are the tree's v1 cgroups kept with it ("" without),
	// holding pidsMax and memMax.
	pids, mem string
	pidsMax   int
	memMax    int64
	// base is what its counters said when its last tree was closed.
	base counters
}

// takeCgroup returns an empty cgroup an ended tree left, if one is kept.
func (h *Host) takeCgroup() (reusable, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.reuse)
	if n == 0 {
		return reusable{}, false
	}
	c := h.reuse[n-1]
	h.reuse = h.reuse[:n-1]

	return c, true
}

// keepCgroup keeps an ended tree's cgroup for a later tree when it is empty
// and the host has room; it reports whether it took the cgroup (and fd).
// procsEmpty says the tree was found empty after the root was reaped
// (Tree.empty), so the process lists are not read again; sealed that it
// was a confined tree found so (Tree.emptyNow), which could neither make
// cgroups nor leave its own: nothing is left to look at.
func (h *Host) keepCgroup(c reusable, procsEmpty, sealed bool) bool {
	if !sealed && (!emptyCgroup(c.dir, procsEmpty) || !emptyV1(c.pids, procsEmpty) || !emptyV1(c.mem, procsEmpty)) {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done || len(h.reuse) >= reuseCount {
		return false
	}
	h.reuse = append(h.reuse, c)

	return true
}

// dropReused closes and removes the kept cgroups (Host.Close).
func (h *Host) dropReused() {
	h.mu.Lock()
	kept := h.reuse
	h.reuse = nil
	h.mu.Unlock()
	for _, c := range kept {
		_ = syscall.Close(c.fd)
		for _, d := range []string{c.dir, c.pids, c.mem} {
			if d != "" {
				_ = removeCgroup(d) // an empty cgroup of ours; Close logs none of these
			}
		}
	}
}

// emptyV1 reports whether a v1 cgroup ("" is none) holds no process and
// no child cgroup.
func emptyV1(dir string, procsEmpty bool) bool {
	return dir == "" || noProcsNorChildren(dir, procsEmpty)
}

// emptyCgroup reports whether a cgroup holds no process, in it or below
// (cgroup.events says "populated 0"), and no child cgroup a tree made.
func emptyCgroup(dir string, procsEmpty bool) bool {
	return unpopulated(dir) && noProcsNorChildren(dir, procsEmpty)
}

// noProcsNorChildren: dir lists no process (unless procsEmpty says that is
// known) and holds no child cgroup.
func noProcsNorChildren(dir string, procsEmpty bool) bool {
	if !procsEmpty && len(readPids(filepath.Join(dir, "cgroup.procs"))) > 0 {
		return false
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.IsDir() {
			return false
		}
	}
	return true
}

// unpopulated reports whether a v2 cgroup holds no process, in it or
// below (cgroup.events says "populated 0").
func unpopulated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	return err == nil && strings.Contains(string(b), "populated 0")
}

// treeCgroup gives t a v2 cgroup: a kept one, its counters at its last
// tree's end as t's bases, or a new one; v2Limits says what limits it holds (t's own are
// written by writeV2Limits).
func (h *Host) treeCgroup(t *Tree, name string) error {
	if c, ok := h.takeCgroup(); ok {
		t.v2, t.v2fd, t.v2Limits = c.dir, c.fd, c.limits
		t.pidsDir, t.memDir, t.pidsMax, t.memMax = c.pids, c.mem, c.pidsMax, c.memMax
		t.base = c.base
		return nil
	}
	dir := filepath.Join(h.v2, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("proctree: create cgroup: %w", err)
	}
	t.v2 = dir
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Close()
		return fmt.Errorf("proctree: open cgroup: %w", err)
	}
	t.v2fd = fd
	return nil
}

// writeV2Limits makes t's v2 cgroup hold t's process and memory limits,
// "max" where t has none, writing only the files that say otherwise (a
// reused cgroup mostly holds the same limits already). It reports which
// of the two it enforces.
func (t *Tree) writeV2Limits(lim Limits) (pids, mem bool, err error) {
	pids, mem = t.h.feat.V2Pids, t.h.feat.V2Memory
	if pids && lim.Processes != t.v2Limits.Processes {
		v := "max"
		if lim.Processes > 0 {
			v = strconv.Itoa(lim.Processes)
		}
		if err := writeFile(filepath.Join(t.v2, "pids.max"), v); err != nil {
			return false, false, err
		}
		t.v2Limits.Processes = lim.Processes
	}
	if mem && lim.Memory != t.v2Limits.Memory {
		v, swap := "max", "max"
		if lim.Memory > 0 {
			v, swap = strconv.FormatInt(lim.Memory, 10), "0"
		}
		if err := writeFile(filepath.Join(t.v2, "memory.max"), v); err != nil {
			return false, false, err
		}
		// Without swap accounting the file is absent: best effort.
		_ = writeFile(filepath.Join(t.v2, "memory.swap.max"), swap)
		t.v2Limits.Memory = lim.Memory
	}
	return pids, mem, nil
}
