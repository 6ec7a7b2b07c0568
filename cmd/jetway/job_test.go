package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"jetway/internal/testutil"
)

// The job table shows a running job's live figures, and `jetway job`
// reads its output (all, tail, follow) and kills it.
func TestJobs_shows_a_running_jobs_live_figures_and_job_output_and_kill_reach_it(t *testing.T) {
	marker := fmt.Sprintf("jobcli-%d", time.Now().UnixNano())
	script := fmt.Sprintf(`{"turns": [
	  {"text": "Starting.", "tool_calls": [{"name": "shell", "input": {"command": "for i in 1 2 3 4 5; do echo line$i; done; sleep 600; : %s", "background": true}}]},
	  {"text": "It runs."},
	  {"when": {"notice_contains": "[background job notice]"}, "text": "Ended."}
	]}`, marker)
	path := filepath.Join(t.TempDir(), "job.json")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JETWAY_SCRIPT", path)
	d := startDev(t)
	cf := []string{"--url", d.url, "--tokens-file", d.tokens}
	if out, err := runCLI(t, append([]string{"send", "s", "start it"}, cf...)...); err != nil {
		t.Fatalf("send: %v\n%s", err, out)
	}
	// The stored record was written when the job started, before its
	// output; the table shows what the job has written since.
	waitCLI(t, "job 1 running with its 5 lines", func(s string) bool {
		return regexp.MustCompile(`(?m)^1\s+running\s.*t1 running for \S+ · \d+ B / 5 lines`).MatchString(s)
	}, append([]string{"jobs", "s"}, cf...)...)

	out, err := runCLI(t, append([]string{"job", "output", "s", "1"}, cf...)...)
	if err != nil || out != "line1\nline2\nline3\nline4\nline5\n" {
		t.Fatalf("job output: %v\n%q", err, out)
	}
	out, err = runCLI(t, append([]string{"job", "output", "s", "1", "--tail", "2"}, cf...)...)
	if err != nil || out != "line4\nline5\n" {
		t.Fatalf("job output --tail 2: %v\n%q", err, out)
	}
	if out, err := runCLI(t, append([]string{"job", "output", "s", "9"}, cf...)...); err == nil || !strings.Contains(err.Error(), `no job "9"`) {
		t.Fatalf("job output of a job that is not there: %v\n%s", err, out)
	}

	// --follow prints what is there, then how the job ended when it is
	// killed.
	type result struct {
		out string
		err error
	}
	followed := make(chan result, 1)
	follow := prepareCLI("", append([]string{"job", "output", "s", "1", "--follow", "--every", "50ms"}, cf...)...)
	go func() {
		out, err := follow()
		followed <- result{out, err}
	}()
	out, err = runCLI(t, append([]string{"job", "kill", "s", "1"}, cf...)...)
	if err != nil || !strings.HasPrefix(out, "job 1 killed: t1 killed") {
		t.Fatalf("job kill: %v\n%s", err, out)
	}
	select {
	case r := <-followed:
		if r.err != nil || !strings.HasPrefix(r.out, "line1\n") || !strings.Contains(r.out, "job 1 ended: t1 killed") {
			t.Fatalf("job output --follow: %v\n%s", r.err, r.out)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("job output --follow did not end with the job")
	}
	if pids := testutil.ProcessesWith(marker); len(pids) != 0 {
		t.Errorf("processes of the killed job still run: %v", pids)
	}
}
