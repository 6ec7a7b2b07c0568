package proctree

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// proc is one line of /proc/<pid>/stat, the fields the sweep needs.
type proc struct {
	pid, ppid, pgrp int
	state           byte
	start           uint64 // start time in clock ticks since boot: tells a reused pid apart
}

// readStat parses /proc/<pid>/stat. The command name may hold spaces and
// parentheses, so the fields are read after the last ')'.
func readStat(pid int) (proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return proc{}, false
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0]=state f[1]=ppid f[2]=pgrp ... f[19]=starttime
	if len(f) < 20 {
		return proc{}, false
	}
	p := proc{pid: pid, state: f[0][0]}
	p.ppid, _ = strconv.Atoi(f[1])
	p.pgrp, _ = strconv.Atoi(f[2])
	p.start, _ = strconv.ParseUint(f[19], 10, 64)
	return p, true
}

// scanProcs reads every process in /proc.
func scanProcs() map[int]proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make(map[int]proc, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readStat(pid); ok {
			out[pid] = p
		}
	}
	return out
}

// descendants returns the processes below root in the parent tree. With
// PR_SET_CHILD_SUBREAPER set on the worker, every process a task started
// stays below the worker even when its own parent dies, so this set is where
// escapees are looked for.
func descendants(all map[int]proc, root int) map[int]proc {
	kids := make(map[int][]int)
	for _, p := range all {
		kids[p.ppid] = append(kids[p.ppid], p.pid)
	}
	out := make(map[int]proc)
	stack := []int{root}
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, k := range kids[pid] {
			if _, seen := out[k]; seen || k == root {
				continue
			}
			out[k] = all[k]
			stack = append(stack, k)
		}
	}
	return out
}

// hasEnv reports whether the environment of pid holds the entry kv
// ("NAME=value").
func hasEnv(pid int, kv string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for _, e := range bytes.Split(b, []byte{0}) {
		if string(e) == kv {
			return true
		}
	}
	return false
}

// childrenOfSelf lists the direct children of this process across all of
// its threads (a child belongs to the thread that forked it).
func childrenOfSelf() []int {
	dirs, _ := filepath.Glob("/proc/self/task/*/children")
	var out []int
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// readPids parses a cgroup.procs file.
func readPids(path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}
