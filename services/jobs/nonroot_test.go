package jobs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/tasks/proctree"
	"jetway/services/jobs"
)

// nobody is the ordinary user the worker runs as here (compose and k8s
// run it as one too).
const nobody = 65534

// The jobs worker run as an ordinary user, not root: its jobs run
// confined all the same (Landlock, the seccomp filter, no_new_privs, no
// capabilities, the helper's empty environment; the file system view
// through a user namespace where the kernel gives an ordinary user one,
// else no unix sockets at all), and it says what it cannot do as that
// user: no cgroups (the process limit is not enforced, the memory limit
// is each process's address space) and no disk cap. Nothing runs
// unconfined: a job the helper could not confine would not run.
func TestWorker_as_an_ordinary_user_runs_its_jobs_confined(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to become another user")
	}
	if v := proctree.LandlockABI(); v < proctree.MinLandlockABI {
		t.Skipf("kernel Landlock ABI %d; confinement needs %d", v, proctree.MinLandlockABI)
	}
	e := newEnv(t)
	// nobody must reach the test binary, the helper and the worker's
	// root: a fresh 0755 tree outside t.TempDir's private parent.
	base, err := os.MkdirTemp("", "jetway-jobs-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	bin := filepath.Join(base, "jobs.test")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	// The helper as this checkout builds it, where nobody's cache
	// directory will look for it (it has no C compiler's output of its
	// own and no home to build one in).
	helper, err := proctree.HelperFile()
	if err != nil {
		t.Fatal(err)
	}
	rootCache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(rootCache, helper)
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(base, "cache")
	helperBytes, err := os.ReadFile(helper)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "root")
	secret := filepath.Join(base, "outside.txt")
	for _, step := range []error{
		os.Chmod(base, 0o755),
		os.WriteFile(bin, self, 0o755),
		os.MkdirAll(filepath.Dir(filepath.Join(cache, rel)), 0o755),
		os.WriteFile(filepath.Join(cache, rel), helperBytes, 0o755),
		os.Mkdir(root, 0o755),
		os.Chown(root, nobody, nobody),
		os.WriteFile(secret, []byte(outsideSecret+"\n"), 0o644),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}

	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(proctree.MinimalEnv(), childURL+"="+e.url, childID+"=nobody", childRoot+"="+root, childDiskCap+"=1",
		"XDG_CACHE_HOME="+cache, "HOME="+base)
	if cc := os.Getenv("CC"); cc != "" {
		cmd.Env = append(cmd.Env, "CC="+cc) // part of the helper's cache key
	}
	var log lockedLog
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	testutil.Eventually(t, 30*time.Second, "the worker run as nobody to answer", func() bool {
		ws, _ := e.cli.Workers(bg)
		for _, w := range ws {
			if w == "nobody" {
				return true
			}
		}
		return false
	})

	meta := serviceInfo(t, e).Metadata // the only worker
	if got, want := meta[jobs.MetadataConfinement], "landlock-v"+strconv.Itoa(proctree.LandlockABI()); got != want {
		t.Errorf("as nobody, metadata confinement = %q, want %q", got, want)
	}
	view := meta[jobs.MetadataView]
	if view != "mount namespace" && view != "none (unix sockets refused)" {
		t.Errorf("as nobody, metadata view = %q", view)
	}
	if got, want := meta[jobs.MetadataDiskCap], "none (the worker is not root: mounting a loop device needs it)"; got != want {
		t.Errorf("as nobody, metadata disk_cap = %q, want %q", got, want)
	}
	limits := meta[jobs.MetadataLimits]
	t.Logf("as nobody: confinement %q, view %q, disk cap %q, limits %q", meta[jobs.MetadataConfinement], view, meta[jobs.MetadataDiskCap], limits)

	r := req(`id -u
echo written > f && cat f
cat ` + secret + ` || echo outside-refused
echo x > ` + filepath.Join(base, "planted") + ` || echo write-outside-refused
env | grep -c NATS_ || true
python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.bind("here.sock"); print("listen-here ok")' 2>/dev/null || echo listen-here refused`)
	r.TimeoutMS = 60_000
	res, err := e.cli.Run(bg, r)
	if err != nil || !res.Ended {
		t.Fatalf("run as nobody = %+v, %v\nworker's log:\n%s", res, err, log.String())
	}
	out := res.Output
	t.Logf("a job of the worker run as nobody:\n%s", out)
	for _, want := range []string{"65534\n", "written\n", "outside-refused", "write-outside-refused", "\n0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("as nobody, the job's output lacks %q:\n%s", want, out)
		}
	}
	noSecret(t, "a job of the worker run as nobody", out)
	if _, err := os.Stat(filepath.Join(base, "planted")); err == nil {
		t.Error("a job of the worker run as nobody wrote outside its workspace")
	}
	if _, err := exec.LookPath("python3"); err == nil {
		if got := strings.Contains(out, "listen-here ok"); got != (view == "mount namespace") {
			t.Errorf("as nobody with view %q, a unix socket in the workspace: %t\n%s", view, got, out)
		}
	}

	// What the job cannot look at itself (its /proc/self is outside its
	// rule set), seen from here: no_new_privs, the seccomp filter, no
	// capability left to it or to what it execs, and the default limits
	// as an ordinary user has them: RLIMIT_AS for the memory limit (no
	// memory cgroup), RLIMIT_CPU.
	job := e.start(`echo pid $$; exec sleep 60`)
	pid := e.outputPids(job.ID, 1)[0]
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Uid:\t65534\t65534\t65534\t65534", "NoNewPrivs:\t1", "Seccomp:\t2",
		"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "CapAmb:\t0000000000000000"} {
		if !strings.Contains(string(status), want+"\n") {
			t.Errorf("a job of the worker run as nobody: its status lacks %q:\n%s", want, status)
		}
	}
	procLimits, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	// Without a memory cgroup the memory limit is each process's address
	// space, and the metadata says which it is.
	want := map[string]string{"Max cpu time": strconv.Itoa(int(jobs.DefaultTreeLimits.CPUTime.Seconds()))}
	if strings.Contains(limits, "RLIMIT_AS") {
		want["Max address space"] = strconv.FormatInt(jobs.DefaultTreeLimits.Memory, 10)
	}
	for name, value := range want {
		if !hasLimit(string(procLimits), name, value) {
			t.Errorf("a job of the worker run as nobody (limits %q): %s is not %s:\n%s", limits, name, value, procLimits)
		}
	}
	if env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); err != nil || strings.Contains(string(env), "NATS_") {
		t.Errorf("a job of the worker run as nobody holds the worker's credentials (%v)", err)
	}
	// Where nobody can make no pids cgroup, the metadata says the process
	// limit does not hold.
	if cg, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup"); err == nil && !strings.Contains(string(cg), "jetway-") &&
		!strings.Contains(limits, "processes 1024: NOT ENFORCED") {
		t.Errorf("the job is in no cgroup of the worker's, yet its limits say %q", limits)
	}
}

// hasLimit reports whether /proc/<pid>/limits sets name's soft limit to
// value.
func hasLimit(limits, name, value string) bool {
	for _, l := range strings.Split(limits, "\n") {
		if rest, ok := strings.CutPrefix(l, name); ok {
			f := strings.Fields(rest)
			return len(f) > 0 && f[0] == value
		}
	}
	return false
}

// lockedLog is the worker's output, written by the process's copying
// goroutine and read by the test.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
