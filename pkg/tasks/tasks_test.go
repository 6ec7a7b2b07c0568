package tasks

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"jetway/internal/testutil"
)

func TestStart_returns_at_once_with_ids_counting_per_session(t *testing.T) {
	m := newManager(t)
	gate := filepath.Join(t.TempDir(), "gate")
	script := `while [ ! -e ` + gate + ` ]; do sleep 0.01; done`
	a := startSh(t, m, script)
	b := startSh(t, m, script)
	c, err := m.Start(WithSession(context.Background(), "s2"), Spec{Cmd: sh(script)})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != "1" || b.ID != "2" || c.ID != "1" {
		t.Errorf("ids = %s, %s, %s; want 1, 2, 1", a.ID, b.ID, c.ID)
	}
	if a.Status != Running || a.Kind != "shell" || !strings.HasPrefix(a.Ref, "out:s1:") {
		t.Errorf("snapshot at start: %+v", a)
	}
	if got := len(m.Running(sid)); got != 2 {
		t.Errorf("Running = %d tasks, want 2", got)
	}
	os.WriteFile(gate, nil, 0o644)
	waitEnd(t, m, "1")
	waitEnd(t, m, "2")
	if l := m.List(sid); len(l) != 2 || l[0].ID != "1" || l[1].ID != "2" {
		t.Errorf("List = %+v", l)
	}
	if _, err := m.Get(sid, "9"); !errors.Is(err, ErrUnknownTask) {
		t.Errorf("Get(9) error = %v, want ErrUnknownTask", err)
	}
}

func TestReadLines_and_GrepLines_work_while_the_task_runs(t *testing.T) {
	m := newManager(t)
	gate := filepath.Join(t.TempDir(), "gate")
	info := startSh(t, m, `echo alpha; echo beta >&2; echo gamma; while [ ! -e `+gate+` ]; do sleep 0.01; done; echo delta`)
	testutil.Eventually(t, 10*time.Second, "three lines", func() bool {
		_, total, _, _ := ReadLines(info.Path, 1, 0)
		return total == 3
	})
	lines, total, more, err := ReadLines(info.Path, 2, 1)
	if err != nil || total != 3 || !more || len(lines) != 1 || lines[0] != "beta" {
		t.Errorf("ReadLines(2,1) = %q, %d, %v, %v", lines, total, more, err)
	}
	got, n, err := GrepLines(info.Path, "a$", 1)
	if err != nil || n != 3 || len(got) != 1 || got[0] != "1: alpha" {
		t.Errorf("GrepLines = %q, %d, %v", got, n, err)
	}
	if cur, _ := m.Get(sid, info.ID); cur.Status != Running || cur.Lines != 3 {
		t.Errorf("snapshot while running: %+v", cur)
	}
	os.WriteFile(gate, nil, 0o644)
	end := waitEnd(t, m, info.ID)
	if end.Status != Exited || end.ExitCode != 0 || end.Lines != 4 || TailText(end, 2) != "gamma\ndelta" {
		t.Errorf("end: %+v", end)
	}
	if _, _, err := GrepLines(info.Path, "(", 1); err == nil {
		t.Error("GrepLines accepted a bad pattern")
	}
}

func TestOutput_is_cleaned_line_by_line(t *testing.T) {
	m := newManager(t, func(c *Config) {
		c.Clean = func(b []byte) string { return strings.ReplaceAll(string(b), "secret", "[redacted]") }
	})
	info := startSh(t, m, `printf 'a secret\nno newline secret'`)
	end := waitEnd(t, m, info.ID)
	lines, _, _, _ := ReadLines(info.Path, 1, 0)
	if strings.Join(lines, "|") != "a [redacted]|no newline [redacted]" || end.Lines != 2 {
		t.Errorf("lines = %q (Lines %d)", lines, end.Lines)
	}
	b, _ := os.ReadFile(info.Path)
	if end.Bytes != int64(len(b)) {
		t.Errorf("Bytes = %d, file has %d", end.Bytes, len(b))
	}
}

func TestMaxOutputBytes_stops_the_file_and_says_so(t *testing.T) {
	m := newManager(t, func(c *Config) { c.Limits.MaxOutputBytes = 1000 })
	info := startSh(t, m, `i=0; while [ $i -lt 500 ]; do echo "line $i"; i=$((i+1)); done`)
	end := waitEnd(t, m, info.ID)
	if !end.Truncated || end.Status != Exited {
		t.Errorf("end: %+v", end)
	}
	st, _ := os.Stat(info.Path)
	if st.Size() > 1100 {
		t.Errorf("file grew to %d bytes past a 1000 byte limit", st.Size())
	}
	if got := lastLine(t, info.Path); got != "[tasks] output truncated: past the 1000 B limit" {
		t.Errorf("last line = %q", got)
	}
}

func TestWait_reports_timed_out_then_ended(t *testing.T) {
	m := newManager(t)
	gate := filepath.Join(t.TempDir(), "gate")
	info := startSh(t, m, `while [ ! -e `+gate+` ]; do sleep 0.01; done; exit 3`)
	got, out, err := m.Wait(context.Background(), sid, info.ID, 20*time.Millisecond)
	if err != nil || out != WaitTimedOut || got.Status != Running {
		t.Errorf("Wait = %v, %v, %v; want timed out, running", got.Status, out, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := m.Wait(ctx, sid, info.ID, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled ctx: %v", err)
	}
	os.WriteFile(gate, nil, 0o644)
	end := waitEnd(t, m, info.ID)
	if end.Status != Exited || end.ExitCode != 3 {
		t.Errorf("end: %+v", end)
	}
	if m.HasNotices(sid) {
		t.Errorf("an end seen through Wait left a notice: %+v", m.TakeNotices(sid))
	}
}

func TestEnd_leaves_a_notice_unless_it_was_seen(t *testing.T) {
	var noticed atomic.Int32
	m := newManager(t, func(c *Config) { c.OnNotice = func(Info) { noticed.Add(1) } })
	var ends []string
	var mu sync.Mutex
	m.SetOnEnd(func(i Info) {
		mu.Lock()
		ends = append(ends, i.ID+":"+string(i.Status))
		mu.Unlock()
	})
	unseen := startSh(t, m, `echo done`)
	testutil.Eventually(t, 10*time.Second, "a notice", func() bool { return m.HasNotices(sid) })
	killed := startSh(t, m, `sleep 100`)
	if _, err := m.Kill(sid, killed.ID); err != nil {
		t.Fatal(err)
	}
	ns := m.TakeNotices(sid)
	if len(ns) != 1 || ns[0].ID != unseen.ID || ns[0].Status != Exited || ns[0].Notice != "" || TailText(ns[0], 5) != "done" {
		t.Fatalf("notices = %+v", ns)
	}
	if m.HasNotices(sid) || noticed.Load() != 1 {
		t.Errorf("after take: HasNotices %v, OnNotice calls %d", m.HasNotices(sid), noticed.Load())
	}
	testutil.Eventually(t, 10*time.Second, "two ends told", func() bool { mu.Lock(); defer mu.Unlock(); return len(ends) == 2 })
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(ends) // the two ends are told from their own goroutines
	if strings.Join(ends, " ") != "1:exited 2:killed" {
		t.Errorf("OnEnd told %q", ends)
	}
}

func TestReturnNotices_go_back_first_in_order_unless_superseded(t *testing.T) {
	m := newManager(t)
	for range 3 {
		info := startSh(t, m, `true`)
		waitEnd(t, m, info.ID) // seen: no notice
	}
	taken := []Info{{ID: "1", SessionID: sid}, {ID: "2", SessionID: sid}}
	// Fabricated end notices of tasks whose end was seen are dropped...
	m.ReturnNotices(sid, taken)
	if m.HasNotices(sid) {
		t.Fatalf("returned notices of seen ends: %+v", m.TakeNotices(sid))
	}
	// ...running notices are kept, before newer ones, unless the task left a
	// newer notice meanwhile.
	gate := filepath.Join(t.TempDir(), "gate")
	step := make(chan string)
	w := start(t, m, Spec{Kind: "watch", Run: func(ctx context.Context, out io.Writer, r Reporter) (int, error) {
		for text := range step {
			r.Notify(text)
		}
		return 0, nil
	}})
	n := startSh(t, m, `while [ ! -e `+gate+` ]; do sleep 0.01; done`)
	step <- "first"
	testutil.Eventually(t, 10*time.Second, "first notice", func() bool { return m.HasNotices(sid) })
	first := m.TakeNotices(sid)
	os.WriteFile(gate, nil, 0o644)
	testutil.Eventually(t, 10*time.Second, "end notice", func() bool { return m.HasNotices(sid) })
	m.ReturnNotices(sid, first)
	got := m.TakeNotices(sid)
	if len(got) != 2 || got[0].ID != w.ID || got[0].Notice != "first" || got[1].ID != n.ID {
		t.Fatalf("after return: %+v", got)
	}
	step <- "second"
	testutil.Eventually(t, 10*time.Second, "second notice", func() bool { return m.HasNotices(sid) })
	m.ReturnNotices(sid, first)
	got = m.TakeNotices(sid)
	if len(got) != 1 || got[0].Notice != "second" {
		t.Errorf("superseded notice came back: %+v", got)
	}
	close(step)
	waitEnd(t, m, w.ID)
	m.ReturnNotices(sid, got)
	if m.HasNotices(sid) {
		t.Errorf("a report of an ended task came back: %+v", m.TakeNotices(sid))
	}
}

func TestFunction_task_reports_and_Wait_sees_updates(t *testing.T) {
	m := newManager(t)
	next := make(chan struct{})
	info := start(t, m, Spec{Kind: "watch", Summary: "watch", Run: func(ctx context.Context, out io.Writer, r Reporter) (int, error) {
		for i := 1; ; i++ {
			select {
			case <-ctx.Done():
				return 1, nil
			case <-next:
			}
			io.WriteString(out, "run\n")
			r.Count("runs", i)
			r.Label("last", "ok")
			r.Notify("result changed")
			r.Progress("run done")
		}
	}})
	type result struct {
		info Info
		out  WaitOutcome
		err  error
	}
	res := make(chan result, 1)
	go func() {
		i, o, err := m.Wait(context.Background(), sid, info.ID, 10*time.Second)
		res <- result{i, o, err}
	}()
	// Progress wakes a Wait in progress; be sure this one is.
	testutil.Eventually(t, 10*time.Second, "a waiter", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.sessions[sid].byID[info.ID].waiters == 1
	})
	next <- struct{}{}
	r := <-res
	got, out, err := r.info, r.out, r.err
	if err != nil || out != WaitUpdated || got.Notice != "result changed" || got.Progress != "run done" ||
		got.Counters["runs"] != 1 || got.Labels["last"] != "ok" {
		t.Fatalf("Wait = %+v, %v, %v", got, out, err)
	}
	if m.HasNotices(sid) {
		t.Error("the notice Wait took is still pending")
	}
	end, err := m.Kill(sid, info.ID)
	if err != nil || end.Status != Killed || end.Lines != 1 {
		t.Errorf("Kill = %+v, %v", end, err)
	}
}

func TestFunction_task_error_marks_it_failed(t *testing.T) {
	m := newManager(t)
	info := start(t, m, Spec{Run: func(ctx context.Context, out io.Writer, r Reporter) (int, error) {
		return 2, errors.New("boom")
	}})
	end := waitEnd(t, m, info.ID)
	if end.Status != Failed || end.Error != "boom" || end.ExitCode != 2 || end.Kind != "func" {
		t.Errorf("end: %+v", end)
	}
}

func TestMaxRunning_refuses_more_per_session(t *testing.T) {
	m := newManager(t, func(c *Config) { c.Limits.MaxRunning = 1 })
	startSh(t, m, `sleep 100`)
	if _, err := m.Start(bg, Spec{Cmd: sh(`true`)}); !errors.Is(err, ErrTooManyRunning) {
		t.Errorf("second Start: %v, want ErrTooManyRunning", err)
	}
	if _, err := m.Start(WithSession(context.Background(), "other"), Spec{Cmd: sh(`true`)}); err != nil {
		t.Errorf("another session was refused: %v", err)
	}
	if got := m.KillSession(sid); len(got) != 1 || got[0].Status != Killed {
		t.Errorf("KillSession = %+v", got)
	}
}

func TestMaxDuration_times_the_task_out_and_says_so(t *testing.T) {
	m := newManager(t, func(c *Config) { c.Limits.MaxDuration = 300 * time.Millisecond })
	info := startSh(t, m, `sleep 100`)
	end := waitEnd(t, m, info.ID)
	if end.Status != TimedOut {
		t.Errorf("status %s, want timed_out", end.Status)
	}
	if got := lastLine(t, info.Path); got != "[tasks] ended: ran past the time limit (300ms)" {
		t.Errorf("last line = %q", got)
	}
}

func TestOverdue_fires_once_per_threshold(t *testing.T) {
	m := newManager(t)
	var calls []Info
	var mu sync.Mutex
	m.SetOnOverdue(func(i Info) {
		mu.Lock()
		calls = append(calls, i)
		mu.Unlock()
	})
	info := start(t, m, Spec{Cmd: sh(`sleep 100`), Expected: 50 * time.Millisecond})
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(calls) }
	testutil.Eventually(t, 10*time.Second, "two overdue calls", func() bool { return count() >= 2 })
	if _, err := m.Kill(sid, info.ID); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls[0].Status != Running || calls[0].ID != info.ID || calls[1].Duration() < 100*time.Millisecond {
		t.Errorf("overdue calls: %+v", calls)
	}
}

func TestRunTasks_tells_whether_a_runs_commands_are_gone(t *testing.T) {
	m := newManager(t)
	if st, _ := m.RunTasks(sid, "r1"); st != ChildUnknown {
		t.Errorf("unseen run: %v", st)
	}
	a := start(t, m, Spec{Cmd: sh(`sleep 100`), RunID: "r1"})
	start(t, m, Spec{Cmd: sh(`true`), RunID: "r2"})
	if st, infos := m.RunTasks(sid, "r1"); st != ChildRunning || len(infos) != 1 {
		t.Errorf("r1 while running: %v %+v", st, infos)
	}
	m.Kill(sid, a.ID)
	if st, _ := m.RunTasks(sid, "r1"); st != ChildGone {
		t.Errorf("r1 after kill: %v", st)
	}
	m.Restore([]Info{{ID: "7", SessionID: sid, Status: Running, RunID: "r3"}})
	if st, _ := m.RunTasks(sid, "r3"); st != ChildUnknown {
		t.Errorf("run of a lost task: %v", st)
	}
}

func TestRestore_marks_running_tasks_lost_and_continues_ids(t *testing.T) {
	var noticed []Info
	m := newManager(t, func(c *Config) { c.OnNotice = func(i Info) { noticed = append(noticed, i) } })
	got := m.Restore([]Info{
		{ID: "4", SessionID: sid, Status: Running, Summary: "make"},
		{ID: "2", SessionID: sid, Status: Exited},
	})
	if len(got) != 2 || got[0].Status != Lost || got[1].Status != Exited {
		t.Fatalf("Restore = %+v", got)
	}
	ns := m.TakeNotices(sid)
	if len(ns) != 1 || ns[0].ID != "4" || ns[0].Status != Lost || len(noticed) != 1 {
		t.Errorf("notices = %+v (OnNotice %d)", ns, len(noticed))
	}
	if info := startSh(t, m, `true`); info.ID != "5" {
		t.Errorf("next id = %s, want 5", info.ID)
	}
	if _, out, _ := m.Wait(context.Background(), sid, "4", time.Second); out != WaitEnded {
		t.Errorf("Wait on a lost task: %v", out)
	}
}

func TestHundred_concurrent_tasks_all_end_with_their_output(t *testing.T) {
	m := newManager(t, func(c *Config) { c.Limits.MaxRunning = 100 })
	var wg sync.WaitGroup
	ids := make([]string, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := m.Start(bg, Spec{Cmd: sh(`echo hello $0; exit $(($0 % 7))`)})
			if err != nil {
				t.Error(err)
				return
			}
			info.Summary = ""
			ids[i] = info.ID
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("id %s given twice", id)
		}
		seen[id] = true
		end := waitEnd(t, m, id)
		if end.Status != Exited || end.Lines != 1 || !strings.HasPrefix(end.Tail[0], "hello") {
			t.Errorf("task %s: %+v", id, end)
		}
	}
}
