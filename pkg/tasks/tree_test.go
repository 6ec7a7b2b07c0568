package tasks

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/tasks/proctree"
)

// escapes are the ways a command leaves its process group or its marker;
// each prints the pid that must not survive the task.
var escapes = map[string]string{
	"setsid":          `setsid sh -c 'echo pid $$; exec sleep 100' &`,
	"nohup":           `nohup sh -c 'echo pid $$; exec sleep 100' 2>&1 &`,
	"env -u setsid":   `env -u JETWAY_TASK setsid sh -c 'echo pid $$; exec sleep 100' &`,
	"double fork":     `sh -c 'sh -c "echo pid \$\$; exec sleep 100" &' ; wait`,
	"ignores SIGTERM": `sh -c 'trap "" TERM; echo pid $$; while :; do sleep 0.05; done' &`,
}

func checkGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if alive(pid) {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			t.Errorf("pid %d survived: %s", pid, b)
		}
	}
	if left := markedProcs(); len(left) > 0 {
		t.Errorf("marked processes survived: %v", left)
	}
}

func TestKill_ends_every_escape_shape(t *testing.T) {
	for name, script := range escapes {
		t.Run(name, func(t *testing.T) {
			m := newManager(t)
			info := startSh(t, m, script+"\necho pid $$; sleep 100")
			pids := outputPids(t, info.Path, 2)
			end, err := m.Kill(sid, info.ID)
			if err != nil || end.Status != Killed {
				t.Fatalf("Kill = %+v, %v", end, err)
			}
			checkGone(t, pids)
		})
	}
}

func TestKill_without_cgroups_still_ends_marked_and_grouped_escapes(t *testing.T) {
	for _, name := range []string{"setsid", "nohup", "env -u setsid", "double fork", "ignores SIGTERM"} {
		t.Run(name, func(t *testing.T) {
			m := newManager(t, func(c *Config) { c.Proc.NoCgroups = true })
			if m.Host().Features().V2Dir != "" {
				t.Fatal("NoCgroups manager uses a cgroup")
			}
			info := startSh(t, m, escapes[name]+"\necho pid $$; sleep 100")
			pids := outputPids(t, info.Path, 2)
			if _, err := m.Kill(sid, info.ID); err != nil {
				t.Fatal(err)
			}
			checkGone(t, pids)
		})
	}
}

func TestExit_of_the_root_ends_what_it_left_behind(t *testing.T) {
	m := newManager(t)
	f := t.TempDir() + "/pid"
	info := startSh(t, m, `setsid sh -c 'echo pid $$ > `+f+`; exec sleep 100' &
		while [ ! -s `+f+` ]; do sleep 0.01; done; cat `+f+`; echo pid $$`)
	pids := outputPids(t, info.Path, 2)
	end := waitEnd(t, m, info.ID)
	if end.Status != Exited || end.ExitCode != 0 {
		t.Errorf("end: %+v", end)
	}
	checkGone(t, pids)
}

func TestClose_leaves_nothing_and_refuses_new_tasks(t *testing.T) {
	dir := t.TempDir()
	m := NewManager(Config{Output: Files{Dir: dir}.Output, Proc: proctree.Config{Grace: 200 * time.Millisecond}})
	t.Cleanup(m.Close)
	var pids []int
	for _, name := range []string{"setsid", "env -u setsid", "ignores SIGTERM"} {
		info := startSh(t, m, escapes[name]+"\necho pid $$; sleep 100")
		pids = append(pids, outputPids(t, info.Path, 2)...)
	}
	fn := start(t, m, Spec{Run: func(ctx context.Context, _ io.Writer, _ Reporter) (int, error) {
		<-ctx.Done()
		return 0, nil
	}})
	cg := m.Host().Cgroup()
	m.Close()
	checkGone(t, pids)
	if got, _ := m.Get(sid, fn.ID); got.Status != Killed {
		t.Errorf("function task after Close: %s", got.Status)
	}
	for _, i := range m.List(sid) {
		if i.Status != Killed {
			t.Errorf("task %s after Close: %s", i.ID, i.Status)
		}
	}
	if _, err := m.Start(bg, Spec{Cmd: sh("true")}); err != ErrClosed {
		t.Errorf("Start after Close: %v", err)
	}
	if cg != "" {
		if _, err := os.Stat(cg); err == nil {
			t.Errorf("cgroup %s left after Close", cg)
		}
	}
}

// foreground starts script in m's host as a run call does, its output
// kept by a Handoff, and returns what Adopt takes over.
func foreground(t *testing.T, m *Manager, script string) (RunningCommand, *Handoff) {
	t.Helper()
	out := &Handoff{}
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdout, cmd.Stderr = out, out
	tree, err := m.Host().Start(cmd, proctree.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- tree.Wait() }()
	return RunningCommand{Cmd: cmd, Tree: tree, AttachOutput: out.Attach, Wait: waited}, out
}

func TestAdopt_takes_over_a_running_foreground_command(t *testing.T) {
	m := newManager(t)
	gate := t.TempDir() + "/gate"
	running, out := foreground(t, m, `echo before; while [ ! -e `+gate+` ]; do sleep 0.01; done; echo after; exit 4`)
	testutil.Eventually(t, 10*time.Second, "foreground output", func() bool { return strings.Contains(string(out.Bytes()), "before") })
	running.Started = time.Now()
	info, err := m.Adopt(bg, Spec{Summary: "foreground", RunID: "r1"}, running)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != Running || info.ID != "1" {
		t.Errorf("adopted: %+v", info)
	}
	if st, _ := m.RunTasks(sid, "r1"); st != ChildRunning {
		t.Errorf("RunTasks = %v", st)
	}
	os.WriteFile(gate, nil, 0o644)
	end := waitEnd(t, m, info.ID)
	lines, _, _, _ := ReadLines(end.Path, 1, 0)
	if end.Status != Exited || end.ExitCode != 4 || strings.Join(lines, ",") != "before,after" {
		t.Errorf("end: %+v, lines %q", end, lines)
	}
}

func TestAdopted_command_dies_with_Kill(t *testing.T) {
	m := newManager(t)
	running, _ := foreground(t, m, escapes["setsid"]+"\necho pid $$; sleep 100")
	info, err := m.Adopt(bg, Spec{Summary: "fg"}, running)
	if err != nil {
		t.Fatal(err)
	}
	pids := outputPids(t, info.Path, 2)
	if end, err := m.Kill(sid, info.ID); err != nil || end.Status != Killed {
		t.Fatalf("Kill = %+v, %v", end, err)
	}
	checkGone(t, pids)
}

func TestClose_without_cgroups_ends_an_orphan_that_dropped_group_and_marker(t *testing.T) {
	m := newManager(t, func(c *Config) { c.Proc.NoCgroups = true })
	// The middle shell exits at once, so no sweep ever sees the grandchild
	// below the task: it is known only as an orphan of this process.
	info := startSh(t, m, `sh -c 'env -u JETWAY_TASK setsid sh -c "echo pid \$\$; exec sleep 100" &'; echo pid $$; sleep 100`)
	pids := outputPids(t, info.Path, 2)
	m.Close()
	checkGone(t, pids)
}

// A reserved place counts before the command starts and passes to the
// task that adopts it; a place given back, or a task that ended, frees it.
func TestReserve_counts_a_foreground_command_from_before_it_starts(t *testing.T) {
	m := newManager(t, func(c *Config) { c.Limits.MaxRunning = 1 })
	place, err := m.Reserve(sid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reserve(sid); !errors.Is(err, ErrTooManyRunning) {
		t.Fatalf("a second reservation under a limit of 1: %v, want ErrTooManyRunning", err)
	}
	if _, err := m.Start(bg, Spec{Cmd: exec.Command("true")}); !errors.Is(err, ErrTooManyRunning) {
		t.Fatalf("a start while the place is reserved: %v, want ErrTooManyRunning", err)
	}
	running, _ := foreground(t, m, "sleep 100")
	running.Reservation = place
	info, err := m.Adopt(bg, Spec{Summary: "fg"}, running)
	if err != nil {
		t.Fatal(err)
	}
	place.Release() // a no-op: the task holds the place
	var tm *TooManyRunningError
	if _, err := m.Reserve(sid); !errors.As(err, &tm) || tm.Running != 1 || tm.Limit != 1 {
		t.Fatalf("a reservation while the adopted command runs: %v, want 1 of 1 running", err)
	}
	if _, err := m.Kill(sid, info.ID); err != nil {
		t.Fatal(err)
	}
	again, err := m.Reserve(sid)
	if err != nil {
		t.Fatalf("a reservation after the command ended: %v", err)
	}
	again.Release()
	if _, err := m.Reserve(sid); err != nil {
		t.Fatalf("a reservation after one was given back: %v", err)
	}
}

// KillSessionNow ends a tree that ignores SIGTERM at once (no grace) and
// writes its note last in the output.
func TestKillSessionNow_skips_the_grace_and_says_why(t *testing.T) {
	m := newManager(t, func(c *Config) { c.Proc.Grace = time.Minute })
	info, err := m.Start(bg, Spec{Cmd: sh(`trap "" TERM; echo up; while :; do sleep 0.05; done`)})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the command to be up", func() bool {
		i, _ := m.Get(sid, info.ID)
		return i.Lines > 0
	})
	at := time.Now()
	ended := m.KillSessionNow(sid, "[test] stopped by the switch")
	if len(ended) != 1 || ended[0].Status != Killed || time.Since(at) > 10*time.Second {
		t.Fatalf("KillSessionNow = %+v after %s; want it killed without the minute's grace", ended, time.Since(at))
	}
	lines, _, _, _ := ReadLines(ended[0].Path, 1, 0)
	if len(lines) == 0 || lines[len(lines)-1] != "[test] stopped by the switch" {
		t.Errorf("output %q does not end with the note", lines)
	}
}
