package jobs_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/tasks"
	"jetway/services/jobs"
	"jetway/services/jobs/jobsapi"
)

// The bypass: foreground calls that outlived their timeout became
// background jobs nobody counted, 10 running against a limit of 4. Every
// live tree counts now: of 10 foreground calls at once that all time out
// under --max-running 4, 4 start (each leaves a marker file when it does,
// and none ends during the test) and run on in the background, and 6 are
// refused before they start, in words that say why and what to do.
func TestTen_foreground_calls_timing_out_under_max_running_4_start_at_most_4(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1", func(c *jobs.Config) { c.Limits.MaxRunning = 4 })
	var wg sync.WaitGroup
	var mu sync.Mutex
	var backgrounded int
	var refusals []string
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := req("mkdir -p started && touch started/$$ && exec sleep 120")
			r.TimeoutMS = 300
			res, err := e.cli.Run(bg, r)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && res.Backgrounded:
				backgrounded++
			case err != nil:
				refusals = append(refusals, wantCode(t, err, jobsapi.CodeConflict, jobsapi.ErrConflict).Message)
			default:
				t.Errorf("run = %+v", res)
			}
		}()
	}
	wg.Wait()
	if backgrounded != 4 || len(refusals) != 6 {
		t.Fatalf("%d handed to the background, %d refused; want 4 and 6", backgrounded, len(refusals))
	}
	// A command handed over may not have reached its marker yet on a
	// loaded machine; none of the refused ever will.
	markers := func() int {
		started, _ := os.ReadDir(filepath.Join(e.root, tenant, session, "started"))
		return len(started)
	}
	testutil.Eventually(t, 15*time.Second, "the 4 commands to leave their markers", func() bool { return markers() >= 4 })
	for _, m := range refusals {
		if !strings.Contains(m, "already runs 4 commands") || !strings.Contains(m, "--max-running") || !strings.Contains(m, "shell_job_kill") {
			t.Errorf("refusal %q does not say the count, the limit and what to do", m)
		}
	}
	if n := markers(); n != 4 {
		t.Errorf("%d commands started, want 4", n)
	}
	running := 0
	for _, j := range mustList(t, e) {
		if j.Status == tasks.Running {
			running++
		}
	}
	if running != 4 {
		t.Errorf("%d jobs running, want 4", running)
	}

	// A background start counts the same trees; a place freed is taken.
	_, err := e.cli.Start(bg, req("true"))
	wantCode(t, err, jobsapi.CodeConflict, jobsapi.ErrConflict)
	if _, err := e.cli.Kill(bg, tenant, session, "1"); err != nil {
		t.Fatal(err)
	}
	if res, err := e.cli.Run(bg, req("echo fits")); err != nil || res.Output != "fits" {
		t.Errorf("a run after a kill = %+v, %v", res, err)
	}
}

// Commands that end in the foreground give their place back: far more
// than the limit run one after another.
func TestForeground_commands_that_end_give_their_place_back(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1", func(c *jobs.Config) { c.Limits.MaxRunning = 1 })
	for k := range 6 {
		if res, err := e.cli.Run(bg, req("echo ok")); err != nil || !res.Ended || res.Output != "ok" {
			t.Fatalf("run %d = %+v, %v", k, res, err)
		}
	}
}
