package proctree

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
// Only cgroups without limits are reused, for trees without limits: the
// limit files and the counters that tell a limit was hit (pids.events,
// memory.events) then never carry over. The CPU time a cgroup used before
// is subtracted (Tree.cpuBase).

// reusable is an empty task cgroup kept open for CLONE_INTO_CGROUP.
type reusable struct {
	dir string
	fd  int
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
func (h *Host) keepCgroup(dir string, fd int) bool {
	if !emptyCgroup(dir) {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done || len(h.reuse) >= reuseCount {
		return false
	}
	h.reuse = append(h.reuse, reusable{dir: dir, fd: fd})

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
		_ = removeCgroup(c.dir)
	}
}

// emptyCgroup reports whether a cgroup holds no process, in it or below
// (cgroup.events says "populated 0"), and no child cgroup a tree made.
func emptyCgroup(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil || !strings.Contains(string(b), "populated 0") {
		return false
	}
	if len(readPids(filepath.Join(dir, "cgroup.procs"))) > 0 {
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
