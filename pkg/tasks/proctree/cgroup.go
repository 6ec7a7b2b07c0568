package proctree

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Features is what containment the host offers, found by Detect.
type Features struct {
	// V2Dir is this process's own cgroup in the unified (v2) hierarchy; task
	// cgroups are created below it. Empty when there is no usable v2 mount.
	V2Dir string
	// V2Kill reports whether cgroup.kill exists (Linux 5.14+).
	V2Kill bool
	// V2Pids and V2Memory report whether the pids and memory controllers can
	// be enabled for task cgroups in the unified hierarchy.
	V2Pids, V2Memory bool
	// PidsV1 and MemoryV1 are this process's own cgroup in the v1 pids and
	// memory hierarchies, used for limits when v2 has no controllers.
	PidsV1, MemoryV1 string
	// Subreaper reports whether PR_SET_CHILD_SUBREAPER is set, so orphans of
	// a task come back to this process instead of init.
	Subreaper bool
}

func (f Features) String() string {
	var parts []string
	if f.V2Dir != "" {
		kill := "signals"
		if f.V2Kill {
			kill = "cgroup.kill"
		}
		parts = append(parts, fmt.Sprintf("cgroup v2 at %s (kill by %s)", f.V2Dir, kill))
	} else {
		parts = append(parts, "no cgroup v2 (process group and /proc sweep only)")
	}
	switch {
	case f.V2Pids:
		parts = append(parts, "process limit: v2 pids.max")
	case f.PidsV1 != "":
		parts = append(parts, "process limit: v1 pids.max")
	default:
		parts = append(parts, "process limit: unavailable")
	}
	switch {
	case f.V2Memory:
		parts = append(parts, "memory limit: v2 memory.max")
	case f.MemoryV1 != "":
		parts = append(parts, "memory limit: v1 memory.limit_in_bytes")
	default:
		parts = append(parts, "memory limit: RLIMIT_AS per process")
	}
	if f.V2Dir != "" {
		parts = append(parts, "CPU time: v2 cpu.stat per tree + RLIMIT_CPU")
	} else {
		parts = append(parts, "CPU time: RLIMIT_CPU per process")
	}
	parts = append(parts, fmt.Sprintf("subreaper: %t", f.Subreaper))
	return strings.Join(parts, "; ")
}

type mount struct {
	root, point, fstype string
	opts                []string // super options: the v1 controllers
}

func readMounts() []mount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }() // read only: a failed close loses nothing
	var out []mount
	s := bufio.NewScanner(f)
	for s.Scan() {
		// id parent maj:min root point opts [optional...] - fstype source superopts
		fields := strings.Fields(s.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+3 >= len(fields) {
			continue
		}
		fs := fields[sep+1]
		if fs != "cgroup" && fs != "cgroup2" {
			continue
		}
		out = append(out, mount{
			root: unescapeMount(fields[3]), point: unescapeMount(fields[4]),
			fstype: fs, opts: strings.Split(fields[sep+3], ","),
		})
	}
	return out
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroups maps a hierarchy key ("" for v2, else each v1 controller) to
// this process's path in it, from /proc/self/cgroup.
func ownCgroups() map[string]string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// hostDir joins a mount point with a cgroup path seen from this process,
// taking away the mount's own root (a container sees a sub-tree).
func hostDir(m mount, path string) string {
	if m.root != "/" {
		path = strings.TrimPrefix(path, m.root)
	}
	return filepath.Join(m.point, path)
}

// detectCgroups finds the cgroup directories this process may create task
// cgroups under. A hierarchy counts only when a test directory can be made
// in it.
func detectCgroups() Features {
	var f Features
	own := ownCgroups()
	for _, m := range readMounts() {
		switch m.fstype {
		case "cgroup2":
			p, ok := own[""]
			if !ok || f.V2Dir != "" {
				continue
			}
			dir := hostDir(m, p)
			if writable(dir) {
				f.V2Dir = dir
				_, err := os.Stat(filepath.Join(dir, "cgroup.kill"))
				f.V2Kill = err == nil
				ctrl, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
				for _, c := range strings.Fields(string(ctrl)) {
					f.V2Pids = f.V2Pids || c == "pids"
					f.V2Memory = f.V2Memory || c == "memory"
				}
			}
		case "cgroup":
			for _, o := range m.opts {
				p, ok := own[o]
				if !ok {
					continue
				}
				dir := hostDir(m, p)
				if o == "pids" && f.PidsV1 == "" && writable(dir) {
					f.PidsV1 = dir
				}
				if o == "memory" && f.MemoryV1 == "" && writable(dir) {
					f.MemoryV1 = dir
				}
			}
		}
	}
	return f
}

func writable(dir string) bool {
	probe := filepath.Join(dir, fmt.Sprintf("jetway-probe-%d", os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return false
	}
	return os.Remove(probe) == nil
}

// writeFile writes a cgroup control file, naming it in the error.
func writeFile(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// eventCount reads "key N" from a cgroup events-style file (pids.events,
// memory.events, memory.oom_control).
func eventCount(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// removeCgroup removes a cgroup directory and any children left in it.
func removeCgroup(dir string) error {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			_ = removeCgroup(filepath.Join(dir, e.Name()))
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}
