package jobs_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"jetway/internal/testutil"
	"jetway/pkg/tasks/proctree"
	"jetway/pkg/workspace"
	"jetway/services/jobs"
	"jetway/services/jobs/jobsapi"
)

// The secrets the escapes go after. Each is a distinct word, so finding
// it in an output proves what leaked.
const (
	workerSecret  = "worker-nats-password-0xC0FFEE"
	otherSession  = "other-session-secret-0xBEEF"
	otherTenant   = "victim-tenant-secret-0xDEAD"
	tokensSecret  = "jw_admin_token_0xF00D"
	outsideSecret = "outside-file-secret-0xFACE"
)

// sandboxEnv is a dev-like layout: DATA/tokens.json and DATA/nats beside
// the worker's root DATA/jobs, which holds the session under attack
// (acme/s1), a sibling session (acme/other) and another tenant
// (victim/v1).
type sandboxEnv struct {
	*env
	data string
}

func newSandboxEnv(t *testing.T, mods ...func(*jobs.Config)) *sandboxEnv {
	t.Helper()
	if v := proctree.LandlockABI(); v < proctree.MinLandlockABI {
		t.Skipf("kernel Landlock ABI %d; confinement needs %d", v, proctree.MinLandlockABI)
	}
	e := newEnv(t)
	data := t.TempDir()
	e.root = filepath.Join(data, "jobs")
	files := map[string]string{
		"tokens.json":                      `{"admin":"` + tokensSecret + `"}`,
		"nats/jetstream/meta.inf":          "store",
		"jobs/acme/other/secret.txt":       otherSession,
		"jobs/victim/v1/victim_secret.txt": otherTenant,
		"outside.txt":                      outsideSecret,
	}
	for name, content := range files {
		p := filepath.Join(data, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.startWorker("w1", mods...)
	return &sandboxEnv{env: e, data: data}
}

// run runs script in acme/s1 through the worker and returns its output.
func (e *sandboxEnv) run(script string) jobsapi.StartResponse {
	e.t.Helper()
	r := req(script)
	// Generous: a first go build compiles the standard library into the
	// workspace's empty cache, which takes a while on a busy machine.
	r.TimeoutMS = 300_000
	res, err := e.cli.Run(bg, r)
	if err != nil || !res.Ended {
		e.t.Fatalf("run %q = %+v, %v", script, res, err)
	}
	return res
}

// noSecret fails the test if out holds any secret, forwards or reversed.
func noSecret(t *testing.T, what, out string) {
	t.Helper()
	for _, s := range []string{workerSecret, otherSession, otherTenant, tokensSecret, outsideSecret} {
		if strings.Contains(out, s) || strings.Contains(out, reverse(s)) {
			t.Errorf("%s leaked %q:\n%s", what, s, out)
		}
	}
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

func TestJob_cannot_read_the_workers_environment_or_proc(t *testing.T) {
	t.Parallel()
	e := newSandboxEnv(t)
	worker := strconv.Itoa(os.Getpid())
	res := e.run(`
env
cat /proc/$PPID/environ || echo refused-parent-environ
tr '\0' '\n' < /proc/` + worker + `/environ > env.txt || echo refused-worker-environ
rev env.txt
cat /proc/` + worker + `/cmdline || echo refused-worker-cmdline
cat /proc/` + worker + `/mem || echo refused-worker-mem
p=$$; while [ "$p" -gt 1 ]; do
  cat /proc/$p/environ >/dev/null 2>&1 && echo "read environ of $p"
  n=$(cut -d' ' -f4 /proc/$p/stat 2>/dev/null) || break
  [ -n "$n" ] || break; p=$n
done; echo walk-ended
ls /proc/` + worker + `/fd || echo refused-worker-fds
kill -0 ` + worker + ` || echo refused-signal-worker
`)
	noSecret(t, "the worker's /proc", res.Output)
	want := []string{"refused-parent-environ", "refused-worker-environ", "refused-worker-cmdline",
		"refused-worker-mem", "walk-ended", "refused-worker-fds"}
	if proctree.LandlockABI() >= 6 {
		want = append(want, "refused-signal-worker")
	}
	for _, w := range want {
		if !strings.Contains(res.Output, w) {
			t.Errorf("output lacks %q:\n%s", w, res.Output)
		}
	}
	if strings.Contains(res.Output, "read environ of") || strings.Contains(res.Output, "NATS_") {
		t.Errorf("the job saw an environment not its own:\n%s", res.Output)
	}
}

func TestJob_cannot_reach_a_sibling_jobs_proc(t *testing.T) {
	t.Parallel()
	e := newSandboxEnv(t)
	sib := req(`echo pid $$; exec env SIBLING_SECRET=` + otherSession + ` sleep 60`)
	sib.Session = "other"
	started, err := e.cli.Start(bg, sib)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.cli.Kill(bg, tenant, "other", started.Job.ID)
	})
	var pid int
	testutil.Eventually(t, 15*time.Second, "the sibling's pid", func() bool {
		out, err := e.cli.Output(bg, jobsapi.OutputRequest{JobRequest: jobsapi.JobRequest{SessionRequest: sib.SessionRequest, ID: started.Job.ID}})
		if err != nil {
			return false
		}
		for _, l := range out.Lines {
			if m := pidLine.FindStringSubmatch(l); m != nil {
				pid, _ = strconv.Atoi(m[1])
			}
		}
		return pid > 0
	})
	p := strconv.Itoa(pid)
	res := e.run(`
cat /proc/` + p + `/environ || echo refused-sibling-environ
cat /proc/` + p + `/cmdline || echo refused-sibling-cmdline
ls /proc/` + p + `/cwd/ || echo refused-sibling-cwd
kill -0 ` + p + ` || echo refused-sibling-signal
`)
	noSecret(t, "a sibling's /proc", res.Output)
	want := []string{"refused-sibling-environ", "refused-sibling-cmdline", "refused-sibling-cwd"}
	if proctree.LandlockABI() >= 6 {
		want = append(want, "refused-sibling-signal")
	}
	for _, w := range want {
		if !strings.Contains(res.Output, w) {
			t.Errorf("output lacks %q:\n%s", w, res.Output)
		}
	}
	if !running(pid) {
		t.Error("the sibling job died")
	}
}

func TestJob_cannot_reach_other_workspaces_the_root_or_the_data_directory(t *testing.T) {
	t.Parallel()
	e := newSandboxEnv(t)
	res := e.run(`
cat ../other/secret.txt || echo refused-other-session
cat ../../victim/v1/victim_secret.txt || echo refused-other-tenant
cat ../../../tokens.json || echo refused-tokens
cat ../../../outside.txt || echo refused-outside
ls ../../../nats || echo refused-nats-store
ls .. || echo refused-list-tenant
ls ../.. || echo refused-list-root
ls ../../.jobs || echo refused-list-outputs
echo planted > ../other/planted.txt || echo refused-write-other
rm ../other/secret.txt || echo refused-remove-other
truncate -s 0 ../../../tokens.json || echo refused-truncate-tokens
mv ../other ../gone || echo refused-move-other
cat /etc/shadow || echo refused-shadow
ls /root || echo refused-home
echo hi > /tmp/jetway-escape-$$ || echo refused-tmp
`)
	noSecret(t, "another workspace or the data directory", res.Output)
	for _, w := range []string{"refused-other-session", "refused-other-tenant", "refused-tokens", "refused-outside",
		"refused-nats-store", "refused-list-tenant", "refused-list-root", "refused-list-outputs", "refused-write-other",
		"refused-remove-other", "refused-truncate-tokens", "refused-move-other", "refused-shadow", "refused-home", "refused-tmp"} {
		if !strings.Contains(res.Output, w) {
			t.Errorf("output lacks %q:\n%s", w, res.Output)
		}
	}
	if b, err := os.ReadFile(filepath.Join(e.data, "tokens.json")); err != nil || !strings.Contains(string(b), tokensSecret) {
		t.Errorf("tokens.json changed: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(e.root, "acme", "other", "secret.txt")); err != nil || !strings.Contains(string(b), otherSession) {
		t.Errorf("the other session's file changed: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(e.root, "acme", "other", "planted.txt")); err == nil {
		t.Error("the job planted a file in another session's workspace")
	}
}

func TestLinks_do_not_lead_out_of_the_workspace(t *testing.T) {
	t.Parallel()
	e := newSandboxEnv(t)
	res := e.run(`
ln ../../../tokens.json hl.json || echo refused-hard-link
ln -s ../../../tokens.json sl.json && { cat sl.json || echo refused-symlink-read; }
ln -s ../other other-link && { cat other-link/secret.txt || echo refused-symlink-dir; }
`)
	noSecret(t, "a link", res.Output)
	for _, w := range []string{"refused-hard-link", "refused-symlink-read", "refused-symlink-dir"} {
		if !strings.Contains(res.Output, w) {
			t.Errorf("output lacks %q:\n%s", w, res.Output)
		}
	}
	// A hard link made by something other than a job (the job could not)
	// is refused by the file tools, which run with the worker's reach.
	ws := filepath.Join(e.root, tenant, session)
	if err := os.Link(filepath.Join(e.data, "tokens.json"), filepath.Join(ws, "planted-hl.json")); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"planted-hl.json", "sl.json"} {
		_, err := e.cli.Read(bg, tenant, session, workspace.ReadRequest{Path: path})
		ae := wantCode(t, err, jobsapi.CodeBadRequest, jobsapi.ErrBadRequest)
		noSecret(t, "read_file of "+path, ae.Message)
	}
	g, err := e.cli.Grep(bg, tenant, session, workspace.GrepRequest{Pattern: "jw_admin"})
	if err != nil {
		t.Fatal(err)
	}
	if g.Total != 0 {
		t.Errorf("grep found the tokens through a link: %+v", g)
	}
}

func TestOrdinary_work_runs_confined(t *testing.T) {
	t.Parallel()
	e := newSandboxEnv(t)
	res := e.run(`
set -e
echo hello > a.txt && cat a.txt | tr a-z A-Z
mkdir -p d/e && echo nested > d/e/f.txt && mv d/e/f.txt d/g.txt && cat d/g.txt
t=$(mktemp) && echo in-tmp > "$t" && cat "$t" && case "$t" in "$TMPDIR"/*) echo tmp-is-own;; esac
(cd d && echo "subshell in $(basename "$PWD")")
sh -c 'echo nested shell'
sleep 0.1 & wait $! && echo background-done
echo "home is workspace: $([ "$HOME" = "$PWD" ] && echo yes)"
`)
	for _, w := range []string{"HELLO", "nested", "in-tmp", "tmp-is-own", "subshell in d", "nested shell", "background-done", "home is workspace: yes"} {
		if !strings.Contains(res.Output, w) {
			t.Errorf("output lacks %q:\n%s", w, res.Output)
		}
	}
	if res.Job.ExitCode != 0 {
		t.Errorf("exit %d:\n%s", res.Job.ExitCode, res.Output)
	}
	t.Run("git", func(t *testing.T) {
		if _, err := exec.LookPath("git"); err != nil {
			t.Skip("no git")
		}
		res := e.run(`set -e; git init -q repo && cd repo && git config user.email a@b && git config user.name a &&
echo x > f && git add f && git commit -qm first && echo y >> f && git commit -qam second && git log --oneline | wc -l`)
		if res.Job.ExitCode != 0 || !strings.HasSuffix(strings.TrimSpace(res.Output), "2") {
			t.Errorf("git: exit %d:\n%s", res.Job.ExitCode, res.Output)
		}
	})
	t.Run("cc", func(t *testing.T) {
		if _, err := exec.LookPath("cc"); err != nil {
			t.Skip("no cc")
		}
		res := e.run(`set -e; printf '#include <stdio.h>\nint main(void){puts("compiled-c");return 0;}\n' > m.c && cc -o m m.c && ./m`)
		if res.Job.ExitCode != 0 || !strings.Contains(res.Output, "compiled-c") {
			t.Errorf("cc: exit %d:\n%s", res.Job.ExitCode, res.Output)
		}
	})
	t.Run("go build", func(t *testing.T) {
		if testing.Short() {
			t.Skip("go build takes a few seconds")
		}
		if _, err := exec.LookPath("go"); err != nil {
			t.Skip("no go")
		}
		res := e.run(`set -e; mkdir -p gp && cd gp && printf 'module gp\n\ngo 1.21\n' > go.mod &&
printf 'package main\nimport "fmt"\nfunc main(){fmt.Println("compiled-go")}\n' > main.go &&
GOTOOLCHAIN=local GOFLAGS=-mod=mod go build -o gp . && ./gp`)
		if res.Job.ExitCode != 0 || !strings.Contains(res.Output, "compiled-go") {
			t.Errorf("go build: exit %d:\n%s", res.Job.ExitCode, res.Output)
		}
	})
}

func TestWorker_without_confinement_refuses_jobs_and_says_why(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1", func(c *jobs.Config) { c.NoLandlock = true })
	_, err := e.cli.Run(bg, req("echo should-not-run > ran.txt"))
	ae := wantCode(t, err, jobsapi.CodeUnavailable, jobsapi.ErrUnavailable)
	for _, w := range []string{"refuses to run commands", "cannot confine", "--allow-unconfined-jobs"} {
		if !strings.Contains(ae.Message, w) {
			t.Errorf("refusal %q lacks %q", ae.Message, w)
		}
	}
	if _, err := e.cli.Start(bg, req("true")); err == nil {
		t.Error("a background job started on a worker that cannot confine it")
	}
	if _, err := os.Stat(filepath.Join(e.root, tenant, session, "ran.txt")); err == nil {
		t.Error("the refused command ran")
	}
	if got := confinementMetadata(t, e); got != "none" {
		t.Errorf("metadata confinement = %q, want none", got)
	}

	// The operator who accepts the risk gets jobs, and the metadata says so.
	e2 := newEnv(t)
	e2.startWorker("w2", func(c *jobs.Config) { c.NoLandlock, c.AllowUnconfined = true, true })
	if res, err := e2.cli.Run(bg, req("echo ran")); err != nil || res.Output != "ran" {
		t.Errorf("allowed unconfined run = %+v, %v", res, err)
	}
	if got := confinementMetadata(t, e2); got != "none (unconfined jobs allowed)" {
		t.Errorf("metadata confinement = %q", got)
	}
}

func TestWorker_says_how_it_confines_in_its_service_info(t *testing.T) {
	t.Parallel()
	e := newSandboxEnv(t)
	if got, want := confinementMetadata(t, e.env), "landlock-v"+strconv.Itoa(proctree.LandlockABI()); got != want {
		t.Errorf("metadata confinement = %q, want %q", got, want)
	}
	want := "none (unix sockets refused)"
	if ok, _ := proctree.ViewAvailable(); ok {
		want = "mount namespace"
	}
	if got := serviceInfo(t, e.env).Metadata[jobs.MetadataView]; got != want {
		t.Errorf("metadata view = %q, want %q", got, want)
	}
	// How the default limits hold: a root worker makes cgroups where the
	// host has them.
	limits := serviceInfo(t, e.env).Metadata[jobs.MetadataLimits]
	f := proctree.Detect()
	if !strings.HasPrefix(limits, "memory 2 GiB: ") || !strings.Contains(limits, "; processes 1024: ") || !strings.Contains(limits, "; CPU time 1h0m0s: ") ||
		os.Geteuid() == 0 && (f.V2Pids || f.PidsV1 != "") && strings.Contains(limits, "NOT ENFORCED") {
		t.Errorf("metadata limits = %q", limits)
	}
}

func TestWorker_makes_itself_non_dumpable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	// The worker runs in this process: once it is ready, processes of the
	// same user can no longer read this process's /proc/<pid>/environ.
	if v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || v != 0 {
		t.Errorf("dumpable = %d, %v; want 0", v, err)
	}
}

func confinementMetadata(t *testing.T, e *env) string {
	t.Helper()
	return serviceInfo(t, e).Metadata[jobs.MetadataConfinement]
}

func TestDefault_limits_stop_a_fork_bomb_and_a_memory_hog_with_clear_words(t *testing.T) {
	t.Parallel()
	f := proctree.Detect()
	e := newEnv(t)
	e.startWorker("w1") // jobs.DefaultTreeLimits
	t.Run("fork bomb", func(t *testing.T) {
		if !f.V2Pids && f.PidsV1 == "" {
			t.Skipf("no process limit on this host: %s", f)
		}
		// The shell itself forks until the limit refuses it, so the limit
		// is reached whatever the machine's speed; the tree's kill at the
		// end (and the test's) takes the sleepers with it.
		r := req(`i=0; while [ $i -lt 5000 ]; do sleep 300 & i=$((i+1)); done; echo survived`)
		r.TimeoutMS = 60_000
		res, err := e.cli.Run(bg, r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = e.cli.Kill(bg, tenant, session, res.Job.ID)
		})
		t.Logf("limit %q, output ends %q", res.Job.Limit, tail(res.Output))
		want := "process limit (" + strconv.Itoa(jobs.DefaultTreeLimits.Processes) + ")"
		if !res.Ended || res.Job.Limit != want || strings.Contains(res.Output, "survived") ||
			!strings.Contains(res.Output, "fork") || !strings.Contains(res.Output, "[tasks] ended by the "+want) {
			t.Errorf("fork bomb: ended %v, limit %q, output ends %q", res.Ended, res.Job.Limit, tail(res.Output))
		}
	})
	t.Run("memory hog", func(t *testing.T) {
		if !f.V2Memory && f.MemoryV1 == "" {
			t.Skipf("no memory limit on this host: %s", f)
		}
		// tail keeps every byte of a line until its end, and zeros have
		// none: it grows until the tree limit of 2 GiB stops it, well
		// before the 4 GiB it is fed.
		r := req(`head -c 4294967296 /dev/zero | tail -n 1 > /dev/null && echo survived`)
		r.TimeoutMS = 60_000
		res, err := e.cli.Run(bg, r)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("limit %q, output ends %q", res.Job.Limit, tail(res.Output))
		want := "memory limit (" + proctree.Bytes(jobs.DefaultTreeLimits.Memory) + ")"
		if !res.Ended || res.Job.Limit != want || strings.Contains(res.Output, "survived") ||
			!strings.Contains(res.Output, "[tasks] ended by the "+want) {
			t.Errorf("memory hog: ended %v, limit %q, output ends %q", res.Ended, res.Job.Limit, tail(res.Output))
		}
	})
}

func tail(s string) string { return s[max(0, len(s)-200):] }

func TestWorker_refuses_to_start_when_jobs_could_read_its_workspaces(t *testing.T) {
	t.Parallel()
	if v := proctree.LandlockABI(); v < proctree.MinLandlockABI {
		t.Skipf("kernel Landlock ABI %d; confinement needs %d", v, proctree.MinLandlockABI)
	}
	e := newEnv(t)
	tenantDir := filepath.Join(e.root, tenant)
	if err := os.MkdirAll(tenantDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []string{tenantDir, filepath.Dir(e.root)} {
		w, err := jobs.New(jobs.Config{NC: e.nc, WorkerID: "w1", Root: e.root, ReadOnly: []string{ro}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(bg, 20*time.Second)
		err = w.Run(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "every job may read") {
			t.Errorf("--job-read %s: Run = %v, want a refusal to start", ro, err)
		}
	}
}

func TestTemporary_directories_are_cleared_when_the_worker_starts_again(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w, err := jobs.New(jobs.Config{NC: e.nc, WorkerID: "w1", Root: e.root, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := e.run(w)
	res, err := e.cli.Run(bg, req(`echo left > "$TMPDIR/left.txt" && echo "$TMPDIR"`))
	if err != nil || res.Job.ExitCode != 0 {
		t.Fatalf("run = %+v, %v", res, err)
	}
	left := filepath.Join(res.Output, "left.txt")
	if _, err := os.Stat(left); err != nil {
		t.Fatalf("the job's temporary file is not where TMPDIR said: %v", err)
	}
	if !strings.HasPrefix(res.Output, filepath.Join(e.root, ".jobs")) {
		t.Errorf("TMPDIR %s is not under the worker's .jobs", res.Output)
	}
	stop()
	e.startWorker("w1")
	if _, err := os.Stat(left); err == nil {
		t.Error("a temporary file of the previous run survived the restart")
	}
}
