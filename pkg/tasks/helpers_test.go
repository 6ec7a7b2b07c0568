package tasks

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/tasks/proctree"
)

const sid = "s1"

var bg = WithSession(context.Background(), sid)

// newManager is a manager writing under a temporary directory with a short
// grace period; cfgs adjust its Config.
func newManager(t *testing.T, cfgs ...func(*Config)) *Manager {
	t.Helper()
	cfg := Config{
		Output: Files{Dir: t.TempDir()}.Output,
		Proc:   proctree.Config{Grace: 200 * time.Millisecond},
	}
	for _, f := range cfgs {
		f(&cfg)
	}
	m := NewManager(cfg)
	t.Cleanup(m.Close)
	return m
}

func sh(script string) *exec.Cmd { return exec.Command("sh", "-c", script) }

func start(t *testing.T, m *Manager, spec Spec) Info {
	t.Helper()
	info, err := m.Start(bg, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return info
}

func startSh(t *testing.T, m *Manager, script string) Info {
	t.Helper()
	return start(t, m, Spec{Summary: script, Cmd: sh(script)})
}

// waitEnd waits (bounded) for the task to end and returns its last snapshot.
func waitEnd(t *testing.T, m *Manager, id string) Info {
	t.Helper()
	info, out, err := m.Wait(context.Background(), sid, id, 10*time.Second)
	if err != nil || out != WaitEnded {
		t.Fatalf("Wait(%s) = %v, %v; want ended", id, out, err)
	}
	return info
}

var pidLine = regexp.MustCompile(`^pid (\d+)$`)

// outputPids waits until the task's output holds n "pid N" lines and returns
// the pids.
func outputPids(t *testing.T, path string, n int) []int {
	t.Helper()
	var pids []int
	testutil.Eventually(t, 10*time.Second, strconv.Itoa(n)+" pid lines", func() bool {
		lines, _, _, _ := ReadLines(path, 1, 0)
		pids = pids[:0]
		for _, l := range lines {
			if m := pidLine.FindStringSubmatch(l); m != nil {
				p, _ := strconv.Atoi(m[1])
				pids = append(pids, p)
			}
		}
		return len(pids) >= n
	})
	return pids
}

func alive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// markedProcs lists every process on the machine whose environment names a
// tree of this test process (the JETWAY_TASK marker).
func markedProcs() []int {
	ents, _ := os.ReadDir("/proc")
	prefix := []byte(proctree.MarkerEnv + "=" + strconv.Itoa(os.Getpid()) + "-")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		for _, kv := range splitNul(b) {
			if len(kv) >= len(prefix) && string(kv[:len(prefix)]) == string(prefix) {
				out = append(out, pid)
			}
		}
	}
	return out
}

func splitNul(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		out = append(out, b[:i])
		if i == len(b) {
			break
		}
		b = b[i+1:]
	}
	return out
}

func lastLine(t *testing.T, path string) string {
	t.Helper()
	lines, _, _, err := ReadLines(path, 1, 0)
	if err != nil || len(lines) == 0 {
		t.Fatalf("no output in %s: %v", path, err)
	}
	return lines[len(lines)-1]
}
