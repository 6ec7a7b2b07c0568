package tasks

import (
	"strings"
	"testing"
	"time"

	"jetway/pkg/tasks/proctree"
)

func requireLimit(t *testing.T, m *Manager, what string, ok bool) {
	t.Helper()
	if !ok {
		t.Skipf("no %s limit on this host: %s", what, m.Host().Features())
	}
}

func TestProcess_limit_contains_a_fork_bomb(t *testing.T) {
	m := newManager(t)
	f := m.Host().Features()
	requireLimit(t, m, "process", f.V2Pids || f.PidsV1 != "")
	// A bounded bomb: 200 background sleeps, far past the ceiling of 16.
	info := start(t, m, Spec{
		Summary: "bomb",
		Cmd:     sh(`i=0; while [ $i -lt 200 ]; do sleep 100 & i=$((i+1)); done; echo all spawned`),
		Limits:  proctree.Limits{Processes: 16},
	})
	end := waitEnd(t, m, info.ID)
	lines, _, _, _ := ReadLines(info.Path, 1, 0)
	if strings.Contains(strings.Join(lines, "\n"), "all spawned") {
		t.Error("the bomb spawned everything")
	}
	if end.Limit != "process limit (16)" || lastLine(t, info.Path) != "[tasks] ended by the process limit (16)" {
		t.Errorf("limit %q, last line %q", end.Limit, lastLine(t, info.Path))
	}
	checkGone(t, nil)
}

func TestMemory_limit_ends_the_tree_and_says_so(t *testing.T) {
	m := newManager(t)
	f := m.Host().Features()
	requireLimit(t, m, "memory", f.V2Memory || f.MemoryV1 != "")
	info := start(t, m, Spec{
		Cmd:    sh(`x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived`),
		Limits: proctree.Limits{Memory: 32 << 20},
	})
	end := waitEnd(t, m, info.ID)
	if end.Limit != "memory limit (32 MiB)" || end.ExitCode == 0 {
		t.Errorf("end: exit %d, limit %q", end.ExitCode, end.Limit)
	}
	if got := lastLine(t, info.Path); got != "[tasks] ended by the memory limit (32 MiB)" {
		t.Errorf("last line %q", got)
	}
}

func TestCPU_time_limit_ends_a_busy_tree(t *testing.T) {
	m := newManager(t)
	requireLimit(t, m, "CPU time", m.Host().Features().V2Dir != "")
	info := start(t, m, Spec{
		Cmd:    sh(`while :; do :; done`),
		Limits: proctree.Limits{CPUTime: 200 * time.Millisecond},
	})
	end := waitEnd(t, m, info.ID)
	if end.Limit != "CPU time limit (200ms)" || end.ExitCode != 137 {
		t.Errorf("end: exit %d, limit %q", end.ExitCode, end.Limit)
	}
}

func TestLimitNotice_writes_the_callers_line(t *testing.T) {
	m := newManager(t)
	var gotTerminated bool
	var gotOutput string
	info := start(t, m, Spec{
		Cmd:    sh(`echo cannot allocate; exit 1`),
		Limits: proctree.Limits{FileSize: 1 << 20},
		LimitNotice: func(terminated bool, exitCode int, output string) string {
			gotTerminated, gotOutput = terminated, output
			return "limit hit? exit " + string(rune('0'+exitCode))
		},
	})
	waitEnd(t, m, info.ID)
	if gotTerminated || gotOutput != "cannot allocate" || lastLine(t, info.Path) != "limit hit? exit 1" {
		t.Errorf("terminated %v, output %q, last line %q", gotTerminated, gotOutput, lastLine(t, info.Path))
	}
}

func TestDefault_tree_limits_apply_to_specs_without_limits(t *testing.T) {
	m := newManager(t, func(c *Config) { c.Limits.Tree = proctree.Limits{FileSize: 4096} })
	dir := t.TempDir()
	info := startSh(t, m, `exec head -c 100000 /dev/zero > `+dir+`/f`)
	end := waitEnd(t, m, info.ID)
	if end.Limit != "file size limit (4 KiB)" {
		t.Errorf("limit %q", end.Limit)
	}
}
