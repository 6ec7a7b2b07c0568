package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/events"
	"jetway/pkg/handover"
	"jetway/pkg/tasks"
	"jetway/pkg/tasks/proctree"
	"jetway/pkg/workspace"
	"jetway/services/jobs"
	"jetway/services/jobs/jobsapi"
)

func TestExit_event_carries_the_exact_headline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	sub := e.subscribe(tenant, session)

	j := e.start("sh -c 'exit 0'")
	if j.ID != "1" || j.Program != "sh" || j.Status != tasks.Running {
		t.Fatalf("started job = %+v", j)
	}
	ev, msg := sub.next()
	if got := headline(t, ev); got != "job 1 (sh) exited 0 after 0s" {
		t.Errorf("headline = %q", got)
	}
	if ev.Type != events.TypeJobExited || !ev.FromJobs || ev.Source != "jetway/jobs/w1" {
		t.Errorf("event type %s from jobs %v source %s", ev.Type, ev.FromJobs, ev.Source)
	}
	if id := msg.Header.Get(nats.MsgIdHdr); id == "" || id != ev.ID {
		t.Errorf("Nats-Msg-Id %q, CE id %q: want the same stable id", id, ev.ID)
	}
	// Nobody can know the id ahead of the exit: it carries the task's
	// random key, not only tenant, session and job number.
	if predictable := "jetway.job/" + tenant + "/" + session + "/1/exited"; ev.ID == predictable || !strings.HasSuffix(ev.ID, "/exited") {
		t.Errorf("exit event id %q: want jetway.job/<tenant>/<session>/1/<random key>/exited", ev.ID)
	}
	first := ev.ID

	e.start("echo about to fail; false")
	ev, _ = sub.next()
	key := func(id string) string { // the token before /exited
		rest := strings.TrimSuffix(id, "/exited")
		return rest[strings.LastIndex(rest, "/")+1:]
	}
	if key(ev.ID) == key(first) {
		t.Errorf("jobs 1 and 2 share an event key: %q, %q", first, ev.ID)
	}
	if got := headline(t, ev); got != "job 2 (echo) exited 1 after 0s" {
		t.Errorf("headline = %q", got)
	}
	if x := ev.Payload.(events.JobExited); x.Tail != "about to fail" || x.Status != events.StatusExited {
		t.Errorf("payload = %+v", x)
	}
}

func TestNo_exit_event_when_the_model_saw_the_end(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	sub := e.subscribe(tenant, session)

	waited := e.start("sleep 0.2")
	res, err := e.cli.Status(bg, tenant, session, waited.ID, 10*time.Second)
	if err != nil || res.Outcome != "ended" || res.Job.Status != tasks.Exited {
		t.Fatalf("status = %+v, %v", res, err)
	}
	killed := e.start("sleep 100")
	if j, err := e.cli.Kill(bg, tenant, session, killed.ID); err != nil || j.Status != tasks.Killed {
		t.Fatalf("kill = %+v, %v", j, err)
	}
	ran, err := e.cli.Run(bg, req("echo hi"))
	if err != nil || !ran.Ended {
		t.Fatalf("run = %+v, %v", ran, err)
	}
	// Events go out in order: had any of the ends above been published,
	// it would come before this one's.
	e.start("true")
	ev, _ := sub.next()
	if got := headline(t, ev); got != "job 4 (true) exited 0 after 0s" {
		t.Errorf("first event: %q, want only the unseen end of job 4", got)
	}
}

func TestStatus_times_out_while_the_job_runs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	j := e.start("sleep 100")
	res, err := e.cli.Status(bg, tenant, session, j.ID, 50*time.Millisecond)
	if err != nil || res.Outcome != "timed out" || res.Job.Status != tasks.Running {
		t.Fatalf("status = %+v, %v", res, err)
	}
	if !strings.HasPrefix(res.Job.Line, "t1 running for ") || !strings.Contains(res.Job.Line, "sleep 100") {
		t.Errorf("line = %q", res.Job.Line)
	}
	_, err = e.cli.Status(bg, tenant, session, "99", 0)
	wantCode(t, err, jobsapi.CodeNotFound, jobsapi.ErrNotFound)
	_, err = e.cli.Status(bg, tenant, session, "../1", 0)
	wantCode(t, err, jobsapi.CodeBadRequest, jobsapi.ErrBadRequest)
}

func TestOverdue_is_published_once_per_threshold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	sub := e.subscribe(tenant, session)
	r := req("sleep 100")
	r.ExpectedMS = 100
	res, err := e.cli.Start(bg, r)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := sub.next()
	second, _ := sub.next()
	for _, ev := range []events.HostEvent{first, second} {
		if got := headline(t, ev); got != "job 1 (sleep) still running after 0s" {
			t.Errorf("overdue headline = %q", got)
		}
	}
	if first.ID == second.ID {
		t.Errorf("two thresholds share the event id %s", first.ID)
	}
	if n, ok := first.Notice(); !ok || !strings.Contains(n, "shell_job_status") {
		t.Errorf("notice = %q", n)
	}
	if _, err := e.cli.Kill(bg, tenant, session, res.Job.ID); err != nil {
		t.Fatal(err)
	}
}

func TestOutput_reads_and_greps_while_the_job_runs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	j := e.start(`for i in 1 2 3; do echo line $i; done; echo "export GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789"; echo done; sleep 100`)
	jr := jobsapi.JobRequest{SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session}, ID: j.ID}
	var out jobsapi.OutputResponse
	testutil.Eventually(t, 15*time.Second, "five lines of output", func() bool {
		var err error
		out, err = e.cli.Output(bg, jobsapi.OutputRequest{JobRequest: jr})
		return err == nil && out.Total == 5
	})
	if out.Job.Status != tasks.Running || out.Lines[0] != "line 1" || out.More {
		t.Errorf("output = %+v", out)
	}
	if strings.Contains(out.Lines[3], "abcdefghij") || !strings.Contains(out.Lines[3], "[REDACTED]") {
		t.Errorf("secret not redacted: %q", out.Lines[3])
	}
	page, err := e.cli.Output(bg, jobsapi.OutputRequest{JobRequest: jr, Offset: 2, Limit: 2})
	if err != nil || strings.Join(page.Lines, ",") != "line 2,line 3" || !page.More || page.Offset != 2 {
		t.Errorf("page = %+v, %v", page, err)
	}
	g, err := e.cli.Output(bg, jobsapi.OutputRequest{JobRequest: jr, Grep: `line [23]`, Limit: 1})
	if err != nil || g.Matched != 2 || len(g.Lines) != 1 || g.Lines[0] != "2: line 2" {
		t.Errorf("grep = %+v, %v", g, err)
	}
	tail, err := e.cli.Output(bg, jobsapi.OutputRequest{JobRequest: jr, Tail: 1})
	if err != nil || len(tail.Lines) != 1 || tail.Lines[0] != "done" {
		t.Errorf("tail = %+v, %v", tail, err)
	}
	_, err = e.cli.Output(bg, jobsapi.OutputRequest{JobRequest: jr, Grep: `(`})
	if ae := wantCode(t, err, jobsapi.CodeBadRequest, jobsapi.ErrBadRequest); !strings.Contains(ae.Message, "grep pattern") {
		t.Errorf("bad pattern message = %q", ae.Message)
	}
}

func TestKill_ends_the_whole_tree(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	j := e.start(`setsid sleep 100 & echo pid $!; nohup sleep 100 >/dev/null 2>&1 & echo pid $!; sh -c 'trap "" TERM; echo pid $$; exec sleep 100' & echo pid $$; wait`)
	pids := e.outputPids(j.ID, 4)
	k, err := e.cli.Kill(bg, tenant, session, j.ID)
	if err != nil || k.Status != tasks.Killed {
		t.Fatalf("kill = %+v, %v", k, err)
	}
	checkGone(t, pids)
	if !strings.HasPrefix(k.Line, "t1 killed after ") {
		t.Errorf("line = %q", k.Line)
	}
}

func TestKill_session_ends_every_running_job(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	e.start("sleep 100")
	e.start("sleep 100")
	got, err := e.cli.KillSession(bg, tenant, session)
	if err != nil || len(got) != 2 || got[0].Status != tasks.Killed || got[1].Status != tasks.Killed {
		t.Fatalf("kill session = %+v, %v", got, err)
	}
	list, err := e.cli.List(bg, tenant, session)
	if err != nil || len(list) != 2 || list[0].ID != "1" || list[1].ID != "2" {
		t.Errorf("list = %+v, %v", list, err)
	}
}

func TestOutput_past_the_limit_is_dropped_and_the_job_says_so(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1", func(c *jobs.Config) { c.Limits.MaxOutputBytes = 1000 })
	res, err := e.cli.Run(bg, req("seq 1 10000"))
	if err != nil || !res.Ended || !res.Job.Truncated || res.Job.Lines > 300 || !strings.Contains(res.Job.Line, "(truncated)") {
		t.Fatalf("run = %+v, %v", res.Job, err)
	}
	if !strings.HasSuffix(res.Output, "output truncated: past the 1000 B limit") {
		t.Errorf("output ends %q", res.Output[max(0, len(res.Output)-80):])
	}
}

func TestProcess_limit_contains_a_fork_bomb_and_says_so(t *testing.T) {
	t.Parallel()
	if f := proctree.Detect(); !f.V2Pids && f.PidsV1 == "" {
		t.Skipf("no process limit on this host: %s", f)
	}
	e := newEnv(t)
	e.startWorker("w1", func(c *jobs.Config) { c.Limits.Tree.Processes = 16 })
	res, err := e.cli.Run(bg, req(`i=0; while [ $i -lt 200 ]; do sleep 100 & i=$((i+1)); done; echo all spawned`))
	if err != nil || !res.Ended {
		t.Fatalf("run = %+v, %v", res, err)
	}
	if res.Job.Limit != "process limit (16)" || strings.Contains(res.Output, "all spawned") ||
		!strings.HasSuffix(res.Output, "[tasks] ended by the process limit (16)") {
		t.Errorf("limit %q, output ends %q", res.Job.Limit, res.Output[max(0, len(res.Output)-80):])
	}
}

func TestStopping_the_worker_ends_a_waiting_call(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w, err := jobs.New(jobs.Config{NC: e.nc, WorkerID: "w1", Root: e.root, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := e.run(w)
	t.Cleanup(stop)
	j := e.start("sleep 100")
	got := make(chan error, 1)
	go func() {
		_, err := e.cli.Status(bg, tenant, session, j.ID, 10*time.Minute)
		got <- err
	}()
	testutil.Eventually(t, 15*time.Second, "the status call to wait", func() bool {
		g, err := e.cli.Get(bg, tenant, session, j.ID)
		return err == nil && g.Status == tasks.Running
	})
	stop()
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("status answered without error after the worker stopped")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a waiting status call kept the worker from stopping")
	}
	st, err := e.cli.ChildState(bg, tenant, session, "r1")
	if st != handover.ChildUnknown || !errors.Is(err, jobsapi.ErrUnavailable) {
		t.Errorf("child state with the bound worker gone = %v, %v; want unknown and unavailable", st, err)
	}
}

func TestRunning_limit_is_a_409(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1", func(c *jobs.Config) { c.Limits.MaxRunning = 2 })
	e.start("sleep 100")
	e.start("sleep 100")
	_, err := e.cli.Start(bg, req("sleep 100"))
	wantCode(t, err, jobsapi.CodeConflict, jobsapi.ErrConflict)
	// A foreground command counts too: it may outlive its wait and run on.
	_, err = e.cli.Run(bg, req("echo fine"))
	wantCode(t, err, jobsapi.CodeConflict, jobsapi.ErrConflict)
	_, err = e.cli.Start(bg, req("  "))
	if ae := wantCode(t, err, jobsapi.CodeBadRequest, jobsapi.ErrBadRequest); ae.Message != "command is empty" {
		t.Errorf("message = %q", ae.Message)
	}
}

func TestRun_hands_a_slow_command_over_to_the_background(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	sub := e.subscribe(tenant, session)
	// The gate is in the workspace: nothing outside exists for the job.
	gate := filepath.Join(e.root, tenant, session, "gate")
	r := req("echo started; while [ ! -e gate ]; do sleep 0.01; done; echo finished")
	r.TimeoutMS = 100
	r.Run = "r1"
	res, err := e.cli.Run(bg, r)
	if err != nil || !res.Backgrounded || res.Ended || res.Job.Status != tasks.Running || res.Job.ID != "1" {
		t.Fatalf("run = %+v, %v", res, err)
	}
	if st, err := e.cli.ChildState(bg, tenant, session, "r1"); err != nil || st != handover.ChildGone {
		t.Errorf("child state after hand-off = %v, %v; a background job is no foreground child", st, err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ev, _ := sub.next()
	if got := headline(t, ev); got != "job 1 (echo) exited 0 after 0s" {
		t.Errorf("headline = %q", got)
	}
	if x := ev.Payload.(events.JobExited); x.Tail != "started\nfinished" {
		t.Errorf("tail = %q", x.Tail)
	}
}

func TestRun_answers_with_the_output_of_a_quick_command(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	res, err := e.cli.Run(bg, req("echo out; echo err >&2; exit 3"))
	if err != nil || !res.Ended || res.Job.ExitCode != 3 || res.Output != "out\nerr" || res.OmittedLines != 0 {
		t.Fatalf("run = %+v, %v", res, err)
	}
	res, err = e.cli.Run(bg, req("seq 1 5000"))
	if err != nil || res.OmittedLines != 3000 || !strings.HasPrefix(res.Output, "3001\n") || !strings.HasSuffix(res.Output, "\n5000") {
		t.Errorf("long run: omitted %d, output %.20q…, %v", res.OmittedLines, res.Output, err)
	}
}

func TestChild_state_is_alive_while_a_run_waits_and_gone_after(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	if st, err := e.cli.ChildState(bg, tenant, session, "r1"); err != nil || st != handover.ChildGone {
		t.Errorf("unbound session: %v, %v", st, err)
	}
	r := req("echo pid $$; sleep 100")
	r.Run = "r1"
	done := make(chan jobsapi.StartResponse, 1)
	go func() {
		res, _ := e.cli.Run(bg, r)
		done <- res
	}()
	e.outputPids("1", 1)
	if st, err := e.cli.ChildState(bg, tenant, session, "r1"); err != nil || st != handover.ChildAlive {
		t.Errorf("while running: %v, %v", st, err)
	}
	if st, err := e.cli.ChildState(bg, tenant, session, "r2"); err != nil || st != handover.ChildGone {
		t.Errorf("another run: %v, %v", st, err)
	}
	if _, err := e.cli.Kill(bg, tenant, session, "1"); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if !res.Ended || res.Job.Status != tasks.Killed {
			t.Errorf("run after kill = %+v", res)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not answer after the kill")
	}
	if st, err := e.cli.ChildState(bg, tenant, session, "r1"); err != nil || st != handover.ChildGone {
		t.Errorf("after the end: %v, %v", st, err)
	}
}

func TestSessions_are_bound_to_one_worker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	e.startWorker("w2")
	workers := map[string]bool{}
	for i := range 8 {
		s := fmt.Sprintf("s%d", i)
		w, err := e.cli.Worker(bg, tenant, s)
		if err != nil {
			t.Fatal(err)
		}
		workers[w] = true
		kv, err := e.js.KeyValue(bg, bus.BucketWorkers)
		if err != nil {
			t.Fatal(err)
		}
		entry, err := kv.Get(bg, tenant+"."+s)
		if err != nil || string(entry.Value()) != w {
			t.Fatalf("binding of %s: %v, %v; want %s", s, entry, err, w)
		}
	}
	if len(workers) == 0 {
		t.Fatal("no worker bound")
	}
	w, err := e.cli.Worker(bg, tenant, session)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.Write(bg, tenant, session, workspace.WriteRequest{Path: "a.txt", Content: "x"}); err != nil {
		t.Fatal(err)
	}
	other := map[string]string{"w1": "w2", "w2": "w1"}[w]
	body, _ := json.Marshal(jobsapi.StartRequest{SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session}, Command: "true"})
	msg, err := e.nc.Request(jobsapi.Subject(other, jobsapi.OpStart), body, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "409" || !strings.Contains(msg.Header.Get(micro.ErrorHeader), "bound to worker "+w) {
		t.Errorf("the other worker answered %s %q", code, msg.Header.Get(micro.ErrorHeader))
	}
}

func TestPath_escapes_are_refused_over_the_wire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	if _, err := e.cli.Write(bg, tenant, session, workspace.WriteRequest{Path: "dir/ok.txt", Content: "inside\n"}); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(e.root, tenant, session, "link")
	if err := os.Symlink(filepath.Dir(outside), link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"../../other/s1/x", outside, "link/secret", "dir/../../x"} {
		_, err := e.cli.Read(bg, tenant, session, workspace.ReadRequest{Path: path})
		if ae := wantCode(t, err, jobsapi.CodeBadRequest, jobsapi.ErrBadRequest); !strings.Contains(ae.Message, "outside the workspace") {
			t.Errorf("read %s: %q", path, ae.Message)
		}
		_, err = e.cli.Write(bg, tenant, session, workspace.WriteRequest{Path: path, Content: "x"})
		wantCode(t, err, jobsapi.CodeBadRequest, jobsapi.ErrBadRequest)
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret\n" {
		t.Errorf("outside file changed: %q", b)
	}
	r, err := e.cli.Read(bg, tenant, session, workspace.ReadRequest{Path: "dir/ok.txt"})
	if err != nil || r.TotalLines != 1 || !strings.Contains(r.Content, "inside") {
		t.Errorf("read inside = %+v, %v", r, err)
	}
	_, err = e.cli.Read(bg, tenant, session, workspace.ReadRequest{Path: "missing.txt"})
	wantCode(t, err, jobsapi.CodeNotFound, jobsapi.ErrNotFound)
	_, err = e.cli.Read(bg, "bad.tenant", session, workspace.ReadRequest{Path: "x"})
	wantCode(t, err, jobsapi.CodeBadRequest, jobsapi.ErrBadRequest)
}

func TestFile_tools_edit_glob_and_grep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	if _, err := e.cli.Write(bg, tenant, session, workspace.WriteRequest{Path: "src/main.go", Content: "package main\n// hello\n// hello\n"}); err != nil {
		t.Fatal(err)
	}
	_, err := e.cli.Edit(bg, tenant, session, workspace.EditRequest{Path: "src/main.go", Old: "hello", New: "bye"})
	if ae := wantCode(t, err, jobsapi.CodeBadRequest, jobsapi.ErrBadRequest); !strings.Contains(ae.Message, "2 times") {
		t.Errorf("ambiguous edit: %q", ae.Message)
	}
	if ed, err := e.cli.Edit(bg, tenant, session, workspace.EditRequest{Path: "src/main.go", Old: "hello", New: "bye", All: true}); err != nil || ed.Replacements != 2 {
		t.Errorf("edit all = %+v, %v", ed, err)
	}
	if g, err := e.cli.Glob(bg, tenant, session, workspace.GlobRequest{Pattern: "**/*.go"}); err != nil || strings.Join(g.Paths, ",") != "src/main.go" {
		t.Errorf("glob = %+v, %v", g, err)
	}
	if g, err := e.cli.Grep(bg, tenant, session, workspace.GrepRequest{Pattern: "bye"}); err != nil || g.Total != 2 {
		t.Errorf("grep = %+v, %v", g, err)
	}
	// Commands run in the same workspace.
	if res, err := e.cli.Run(bg, req("cat src/main.go | grep -c bye")); err != nil || res.Output != "2" {
		t.Errorf("command in the workspace = %+v, %v", res, err)
	}
}

func TestWorker_restart_reports_unfinished_jobs_lost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	child := e.childWorker("wr")
	sub := e.subscribe(tenant, session)
	j := e.start(`setsid sleep 100 & echo pid $!; echo pid $$; wait`)
	if j.ID != "1" {
		t.Fatalf("job = %+v", j)
	}
	pids := e.outputPids(j.ID, 2)
	fg := req("echo pid $$; sleep 100")
	fg.Run = "r1"
	go func() { _, _ = e.cli.Run(bg, fg) }()
	pids = append(pids, e.outputPids("2", 1)...)
	kv, err := e.js.KeyValue(bg, bus.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	var key2 string
	testutil.Eventually(t, 15*time.Second, "the foreground command's record", func() bool {
		entry, err := kv.Get(bg, tenant+"."+session+".2")
		var rec jobs.Record
		if err != nil || json.Unmarshal(entry.Value(), &rec) != nil {
			return false
		}
		key2 = rec.EventKey
		return rec.Foreground && key2 != ""
	})

	// The worker dies the hard way: nothing is closed or recorded.
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	w := e.startWorker("wr")
	lost := map[string]bool{}
	for range 2 {
		ev, _ := sub.next()
		x, ok := ev.Payload.(events.JobExited)
		if !ok || x.Status != events.StatusLost {
			t.Fatalf("event %s: %+v, want a lost exit", ev.Type, ev.Payload)
		}
		h, _, _ := strings.Cut(headline(t, ev), " after")
		lost[h] = true
		// The restarted worker reports under the key the record kept, so
		// an end the old worker may have reported is the same event.
		if x.ID == 2 && ev.ID != "jetway.job/"+tenant+"/"+session+"/2/"+key2+"/exited" {
			t.Errorf("lost job 2 reported as %q, want the event key %q from its record", ev.ID, key2)
		}
	}
	if !lost["job 1 (setsid) was lost"] || !lost["job 2 (echo) was lost"] {
		t.Errorf("lost events: %v", lost)
	}
	checkGone(t, pids)

	list, err := e.cli.List(bg, tenant, session)
	if err != nil || len(list) != 2 || list[0].Status != tasks.Lost || list[1].Status != tasks.Lost {
		t.Fatalf("list after restart = %+v, %v", list, err)
	}
	if st, err := e.cli.ChildState(bg, tenant, session, "r1"); err != nil || st != handover.ChildUnknown {
		t.Errorf("child state of a run whose command was lost = %v, %v", st, err)
	}
	if next := e.start("true"); next.ID != "3" {
		t.Errorf("id after restart = %s, want 3 (ids are never reused)", next.ID)
	}
	out, err := e.cli.Output(bg, jobsapi.OutputRequest{JobRequest: jobsapi.JobRequest{
		SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session}, ID: "1"}})
	if err != nil || out.Total != 2 {
		t.Errorf("output of the lost job = %+v, %v", out, err)
	}
	_ = w
}

func TestStopping_the_worker_kills_and_reports_its_jobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w, err := jobs.New(jobs.Config{NC: e.nc, WorkerID: "w1", Root: e.root, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := e.run(w)
	t.Cleanup(stop)
	sub := e.subscribe(tenant, session)
	j := e.start("echo pid $$; sleep 100")
	pids := e.outputPids(j.ID, 1)
	stop()
	checkGone(t, pids)
	ev, _ := sub.next()
	if got := headline(t, ev); got != "job 1 (echo) was killed after 0s" {
		t.Errorf("headline = %q", got)
	}
	kv, err := e.js.KeyValue(bg, bus.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(bg, tenant+"."+session+".1")
	if err != nil {
		t.Fatal(err)
	}
	var rec jobs.Record
	if err := json.Unmarshal(entry.Value(), &rec); err != nil || rec.Status != tasks.Killed || rec.Worker != "w1" || rec.Program != "echo" {
		t.Errorf("record = %+v, %v", rec, err)
	}
}

func TestFunction_task_notices_are_numbered_so_newer_ones_supersede(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.startWorker("w1")
	sub := e.subscribe(tenant, session)
	_, err := w.StartFunc(bg, tenant, session, tasks.Spec{Kind: "watch", Summary: "watch ci", Run: func(ctx context.Context, out io.Writer, r tasks.Reporter) (int, error) {
		fmt.Fprintln(out, "checking")
		r.Notify("ci is red")
		r.Notify("ci is green")
		return 0, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	var refs []events.TaskRef
	var texts []string
	for range 3 {
		ev, _ := sub.next()
		switch p := ev.Payload.(type) {
		case events.JobNotice:
			refs, texts = append(refs, p.TaskRef), append(texts, p.Text)
		case events.JobExited:
			refs, texts = append(refs, p.TaskRef), append(texts, headline(t, ev))
		}
	}
	if len(refs) != 3 || !refs[1].Supersedes(refs[0]) || !refs[2].Supersedes(refs[1]) || refs[0].Task != "1" {
		t.Errorf("refs = %+v", refs)
	}
	if strings.Join(texts, "|") != "ci is red|ci is green|job 1 (watch) exited 0 after 0s" {
		t.Errorf("texts = %q", texts)
	}
}

func TestHundred_concurrent_commands_through_the_service(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1", func(c *jobs.Config) { c.Limits.MaxRunning = 100 })
	var wg sync.WaitGroup
	ids := make([]string, 100)
	errs := make(chan error, 100)
	for n := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := req(fmt.Sprintf("echo job %d", n))
			var res jobsapi.StartResponse
			var err error
			if n%2 == 0 {
				res, err = e.cli.Run(bg, r)
				if err == nil && (!res.Ended || res.Output != fmt.Sprintf("job %d", n)) {
					err = fmt.Errorf("run %d = %+v", n, res)
				}
			} else {
				res, err = e.cli.Start(bg, r)
				if err == nil {
					var wr jobsapi.WaitResponse
					wr, err = e.cli.Status(bg, tenant, session, res.Job.ID, 15*time.Second)
					if err == nil && (wr.Outcome != "ended" || wr.Job.ExitCode != 0) {
						err = fmt.Errorf("status of %d = %+v", n, wr)
					}
				}
			}
			if err != nil {
				errs <- err
				return
			}
			ids[n] = res.Job.ID
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" || seen[id] {
			t.Fatalf("ids %v: want 100 distinct", ids)
		}
		seen[id] = true
	}
	list, err := e.cli.List(bg, tenant, session)
	if err != nil || len(list) != 100 {
		t.Errorf("list: %d jobs, %v", len(list), err)
	}
}

func TestMicro_service_is_discoverable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	info := serviceInfo(t, e)
	if info.Name != jobsapi.ServiceName || info.Metadata[jobsapi.MetadataWorker] != "w1" {
		t.Errorf("info = %+v", info.ServiceIdentity)
	}
	subjects := map[string]bool{}
	for _, ep := range info.Endpoints {
		subjects[ep.Subject] = true
	}
	for _, op := range jobsapi.Ops {
		if !subjects[jobsapi.Subject("w1", op)] {
			t.Errorf("no endpoint %s in %v", jobsapi.Subject("w1", op), subjects)
		}
	}
	if ws, err := e.cli.Workers(bg); err != nil || len(ws) != 1 || ws[0] != "w1" {
		t.Errorf("workers = %v, %v", ws, err)
	}
}

func TestBad_requests_name_what_was_wrong(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	msg, err := e.nc.Request(jobsapi.Subject("w1", jobsapi.OpStart), []byte("{not json"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get(micro.ErrorCodeHeader) != "400" || !strings.Contains(msg.Header.Get(micro.ErrorHeader), "invalid JSON") {
		t.Errorf("answer %s %q", msg.Header.Get(micro.ErrorCodeHeader), msg.Header.Get(micro.ErrorHeader))
	}
	body, _ := json.Marshal(jobsapi.StartRequest{SessionRequest: jobsapi.SessionRequest{Tenant: "a b", Session: "s"}, Command: "true"})
	msg, err = e.nc.Request(jobsapi.Subject("w1", jobsapi.OpStart), body, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get(micro.ErrorCodeHeader) != "400" || !strings.Contains(msg.Header.Get(micro.ErrorHeader), "tenant") {
		t.Errorf("answer %s %q", msg.Header.Get(micro.ErrorCodeHeader), msg.Header.Get(micro.ErrorHeader))
	}
}
