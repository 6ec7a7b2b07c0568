package jobtools_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/control/sessionrec"
	"jetway/pkg/handover"
	"jetway/services/jobs"
	"jetway/services/jobs/client"
	"jetway/services/jobs/jobtools"
)

// setup serves a worker on a real JetStream server and returns the tools
// of run r1 of acme/s1 in a registry, with the client.
func setup(t *testing.T) (*tool.Registry, *client.Client) {
	t.Helper()
	reg, cli, _ := setupRoot(t)
	return reg, cli
}

// setupRoot is setup that also returns the worker's root directory, under
// which acme/s1 is the session's workspace.
func setupRoot(t *testing.T) (*tool.Registry, *client.Client, string) {
	t.Helper()
	root := t.TempDir()
	srv := bustest.StartServerWith(t, 1)
	nc, js := bustest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	// r1 is the session's live run, as its runner's claim would say: the
	// worker acts only for the live run (its fence).
	sessions, err := bus.OpenBucket(ctx, js, bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionrec.Put(ctx, sessions, sessionrec.Record{Tenant: "acme", Session: "s1", State: sessionrec.StateRunning, Run: "r1", Runner: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	w, err := jobs.New(jobs.Config{NC: nc, WorkerID: "w1", Root: root, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("worker did not stop")
		}
	})
	select {
	case <-w.Ready():
	case err := <-done:
		t.Fatalf("worker: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("worker not ready")
	}
	cli, err := client.New(client.Config{NC: nc})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry(jobtools.Tools(cli, "acme", "s1", "r1", "")...)
	if err != nil {
		t.Fatalf("the tools do not register: %v", err)
	}
	return reg, cli, root
}

// call runs one tool as the agent loop would: input checked against the
// schema, then Run.
func call(t *testing.T, reg *tool.Registry, name string, input any) tool.Result {
	t.Helper()
	raw, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Validate(name, raw); err != nil {
		t.Fatalf("%s input %s refused by its schema: %v", name, raw, err)
	}
	tl, _ := reg.Get(name)
	res, err := tl.Run(context.Background(), tool.Call{ID: "c1", Input: raw, Progress: func(string) {}})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

var taskLine = regexp.MustCompile(`^t\d+ (running for|exited \(exit \d+\) after|killed after) \S+ · `)

func TestTools_run_commands_and_jobs_end_to_end(t *testing.T) {
	reg, cli := setup(t)
	want := []string{"shell", "shell_job_status", "shell_job_output", "shell_job_kill", "shell_job_list",
		"read_file", "write_file", "edit_file", "glob", "grep"}
	if got := strings.Join(reg.Names(), ","); got != strings.Join(want, ",") {
		t.Errorf("names = %s", got)
	}
	readOnly := map[string]bool{"shell_job_status": true, "shell_job_output": true, "shell_job_list": true,
		"read_file": true, "glob": true, "grep": true}
	for _, n := range want {
		tl, _ := reg.Get(n)
		if tl.ReadOnly(nil) != readOnly[n] {
			t.Errorf("%s ReadOnly = %v", n, tl.ReadOnly(nil))
		}
	}

	res := call(t, reg, "shell", map[string]any{"command": "echo hello; exit 2"})
	if res.IsError || !taskLine.MatchString(res.Content) || !strings.Contains(res.Content, "(exit 2)") || !strings.HasSuffix(res.Content, "\nhello") {
		t.Errorf("foreground shell = %+v", res)
	}

	res = call(t, reg, "shell", map[string]any{"command": "echo waiting; sleep 100", "timeout": 1})
	if res.IsError || !strings.HasPrefix(res.Content, "Still running after 1s: it goes on in the background as job 2.") {
		t.Errorf("handed-off shell = %+v", res)
	}
	if st, err := cli.ChildState(context.Background(), "acme", "s1", "r1"); err != nil || st != handover.ChildGone {
		t.Errorf("child state after hand-off = %v, %v", st, err)
	}

	res = call(t, reg, "shell", map[string]any{"command": "for i in 1 2 3; do echo n$i; done; sleep 100", "background": true})
	if res.IsError || !strings.HasPrefix(res.Content, "Started background job 3.") {
		t.Errorf("background shell = %+v", res)
	}
	var out tool.Result
	testutil.Eventually(t, 15*time.Second, "two lines of the job's output to match", func() bool {
		out = call(t, reg, "shell_job_output", map[string]any{"id": 3, "grep": "n[23]"})
		return strings.Contains(out.Content, "2 matching lines")
	})
	if !strings.HasSuffix(out.Content, "2 matching lines:\n2: n2\n3: n3") {
		t.Errorf("grep output = %q", out.Content)
	}
	out = call(t, reg, "shell_job_output", map[string]any{"id": 3, "limit": 1})
	if !strings.HasSuffix(out.Content, "lines 1-1 of 3 (more: offset 2):\nn1") {
		t.Errorf("paged output = %q", out.Content)
	}

	st := call(t, reg, "shell_job_status", map[string]any{"id": 3, "wait": 0})
	if !strings.HasPrefix(st.Content, "t3 running for ") || !strings.Contains(st.Content, "Last output:\nn1\nn2\nn3") {
		t.Errorf("status = %q", st.Content)
	}
	k := call(t, reg, "shell_job_kill", map[string]any{"id": 3})
	if !strings.HasPrefix(k.Content, "t3 killed after ") {
		t.Errorf("kill = %q", k.Content)
	}
	list := call(t, reg, "shell_job_list", map[string]any{})
	if lines := strings.Split(list.Content, "\n"); len(lines) != 3 || !strings.HasPrefix(lines[1], "t2 running for ") {
		t.Errorf("list = %q", list.Content)
	}
	missing := call(t, reg, "shell_job_status", map[string]any{"id": 42})
	if !missing.IsError || !strings.Contains(missing.Content, "unknown task") {
		t.Errorf("unknown job = %+v", missing)
	}
}

func TestFile_tools_end_to_end(t *testing.T) {
	reg, _ := setup(t)
	w := call(t, reg, "write_file", map[string]any{"path": "notes/a.txt", "content": "one\ntwo\ntwo\n"})
	if w.IsError || w.Content != "created notes/a.txt (12 bytes)" {
		t.Errorf("write = %+v", w)
	}
	r := call(t, reg, "read_file", map[string]any{"path": "notes/a.txt", "offset": 2, "limit": 1})
	if r.IsError || !strings.Contains(r.Content, "two") || !strings.HasSuffix(r.Content, "(lines 2-2 of 3)") {
		t.Errorf("read = %+v", r)
	}
	e := call(t, reg, "edit_file", map[string]any{"path": "notes/a.txt", "old_string": "two", "new_string": "2"})
	if !e.IsError || !strings.Contains(e.Content, "occurs 2 times") {
		t.Errorf("ambiguous edit = %+v", e)
	}
	e = call(t, reg, "edit_file", map[string]any{"path": "notes/a.txt", "old_string": "two", "new_string": "2", "replace_all": true})
	if e.IsError || e.Content != "edited notes/a.txt (2 replacements)" {
		t.Errorf("edit = %+v", e)
	}
	g := call(t, reg, "glob", map[string]any{"pattern": "**/*.txt"})
	if g.Content != "notes/a.txt" {
		t.Errorf("glob = %+v", g)
	}
	gr := call(t, reg, "grep", map[string]any{"pattern": "^2$"})
	if gr.IsError || strings.Count(gr.Content, "notes/a.txt:") != 2 {
		t.Errorf("grep = %+v", gr)
	}
	esc := call(t, reg, "read_file", map[string]any{"path": "../../etc/passwd"})
	if !esc.IsError || !strings.Contains(esc.Content, "outside the workspace") {
		t.Errorf("escape = %+v", esc)
	}
	sh := call(t, reg, "shell", map[string]any{"command": "cat notes/a.txt"})
	if !strings.HasSuffix(sh.Content, "\none\n2\n2") {
		t.Errorf("shell sees the workspace: %q", sh.Content)
	}
}

func TestInstructions_are_read_whole_when_present_nothing_when_absent_and_cut_when_oversized(t *testing.T) {
	_, cli, root := setupRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if got, err := jobtools.ReadInstructions(ctx, cli, "acme", "s1", "AGENTS.md", 1000); err != nil || got.Found {
		t.Fatalf("absent: %+v, %v", got, err)
	}
	body := "# House rules\n\n\tTabs stay.\nRun make test.\n"
	writeFile(t, root, "AGENTS.md", body)
	got, err := jobtools.ReadInstructions(ctx, cli, "acme", "s1", "AGENTS.md", 1000)
	if err != nil || !got.Found || got.Cut || got.Text != body {
		t.Fatalf("present: %+v, %v; want the file as it is", got, err)
	}
	writeFile(t, root, "AGENTS.md", strings.Repeat("0123456789\n", 200))
	got, err = jobtools.ReadInstructions(ctx, cli, "acme", "s1", "AGENTS.md", 100)
	if err != nil || !got.Found || !got.Cut || len(got.Text) != 100 || !strings.HasPrefix(got.Text, "0123456789\n0123") {
		t.Fatalf("oversized: found %v cut %v, %d bytes, %v", got.Found, got.Cut, len(got.Text), err)
	}
}

func writeFile(t *testing.T, root, name, body string) {
	t.Helper()
	p := root + "/acme/s1/" + name
	if err := os.MkdirAll(p[:strings.LastIndex(p, "/")], 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
