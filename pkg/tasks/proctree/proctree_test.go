package proctree

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == unixProbeArg {
		os.Exit(unixProbe(os.Args[2]))
	}
	if dir := os.Getenv(confinedHelperEnv); dir != "" {
		os.Exit(runConfinedHelper(dir))
	}
	if os.Getenv(forkServerOrphanEnv) != "" {
		os.Exit(runForkServerOrphan())
	}
	os.Exit(m.Run())
}

func newHost(t *testing.T, cfg Config) *Host {
	t.Helper()
	if cfg.Grace == 0 {
		cfg.Grace = 200 * time.Millisecond
	}
	h, err := NewHost(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// start runs script under sh with its output in a pipe read line by line.
func start(t *testing.T, h *Host, lim Limits, script string) (*Tree, *bufio.Scanner) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	// Every read in these tests is bounded.
	if err := r.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdout, cmd.Stderr = w, w
	tr, err := h.Start(cmd, lim)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tr.KillNow()
		_ = tr.Wait()
		tr.Close()
	})
	return tr, bufio.NewScanner(r)
}

// markerPids lists live processes on the machine carrying the tree's marker.
func markerPids(marker string) []int {
	var out []int
	for pid := range scanProcs() {
		if hasEnv(pid, MarkerEnv+"="+marker) {
			out = append(out, pid)
		}
	}
	return out
}

func readPidLines(t *testing.T, sc *bufio.Scanner, n int) []int {
	t.Helper()
	var pids []int
	for len(pids) < n && sc.Scan() {
		if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) < n {
		t.Fatalf("got %d pids, want %d", len(pids), n)
	}
	return pids
}

func TestKill_leaves_no_escapee_without_cgroups(t *testing.T) {
	h := newHost(t, Config{NoCgroups: true})
	if h.Features().V2Dir != "" {
		t.Fatal("NoCgroups host uses a cgroup")
	}
	tr, sc := start(t, h, Limits{}, `
		setsid sh -c 'echo $$; trap "" TERM; exec sleep 100' &
		nohup sh -c 'echo $$; exec sleep 100' 2>&1 &
		sh -c 'sh -c "echo \$\$; exec sleep 100" &' 
		sleep 100`)
	pids := readPidLines(t, sc, 3)
	if err := tr.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = tr.Wait()
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("pid %d survived Kill", pid)
		}
	}
	if left := markerPids(tr.Marker()); len(left) > 0 {
		t.Errorf("marked processes left: %v", left)
	}
}

func TestShim_sets_file_size_limit(t *testing.T) {
	h := newHost(t, Config{})
	dir := t.TempDir()
	tr, sc := start(t, h, Limits{FileSize: 4096}, `exec head -c 100000 /dev/zero > `+filepath.Join(dir, "f"))
	for sc.Scan() {
	}
	_ = tr.Wait()
	st, err := os.Stat(filepath.Join(dir, "f"))
	if err != nil || st.Size() > 4096 {
		t.Fatalf("file grew past the limit: %v %v", st, err)
	}
	if got := tr.LimitHit(); got != "file size limit (4 KiB)" {
		t.Errorf("LimitHit = %q, want the file size limit", got)
	}
}

func TestTree_in_cgroup_dies_by_cgroup_kill(t *testing.T) {
	h := newHost(t, Config{})
	if h.Features().V2Dir == "" {
		t.Skip("no cgroup v2 here: " + h.Features().String())
	}
	t.Log(h.Features())
	tr, sc := start(t, h, Limits{}, `env -u JETWAY_TASK setsid sh -c 'echo $$; exec sleep 100' & wait`)
	pids := readPidLines(t, sc, 1)
	if err := tr.Kill(); err != nil {
		t.Fatal(err)
	}
	err := tr.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("root ended with %v, want SIGTERM", err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pids[0])); err == nil {
		t.Errorf("pid %d survived", pids[0])
	}
}

func TestShim_with_address_space_limit_starts_reliably(t *testing.T) {
	h := newHost(t, Config{})
	// RLIMIT_AS set before the Go shim execs once crashed it about 1% of
	// the time; the limit now goes last with nothing allocated after it.
	// Kept short: under -race every shim start initialises the race runtime.
	for i := range 10 {
		cmd := exec.Command("sh", "-c", "exit 7")
		tr, err := h.Start(cmd, Limits{AddressSpace: 256 << 20, CPUTime: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		err = tr.Wait()
		tr.Close()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
			t.Fatalf("run %d: %v, want exit 7 from sh", i, err)
		}
	}
}

func TestNewHost_kills_what_a_dead_hosts_cgroup_still_holds(t *testing.T) {
	f := Detect()
	if f.V2Dir == "" {
		t.Skip("no cgroup v2 here")
	}
	// 4194305 is above the largest pid Linux hands out: that host is dead.
	stale := filepath.Join(f.V2Dir, "jetway-4194305-1")
	dir := filepath.Join(stale, "t1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroup(stale) })
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "100")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: fd}
	startMu.RLock()
	err = cmd.Start()
	if err == nil {
		// This test waits for it: the host's reaper must leave it alone,
		// as it leaves the trees the host starts itself.
		track(cmd.Process.Pid)
	}
	startMu.RUnlock()
	syscall.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); untrack(cmd.Process.Pid) })
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	newHost(t, Config{})
	select {
	case err := <-waited:
		if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("stale process ended with %v, want SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stale cgroup's process is still running")
	}
	if _, err := os.Stat(stale); err == nil {
		// rmdir may lag the reaping by a moment.
		if !waitFor(time.Second, func() bool { return removeCgroup(stale) == nil }) {
			t.Error("stale cgroup left in place")
		}
	}
}

func TestDetect_names_what_it_found(t *testing.T) {
	f := Detect()
	s := f.String()
	if !strings.Contains(s, "process limit:") || !strings.Contains(s, "subreaper:") {
		t.Errorf("Features.String() = %q", s)
	}
}

func TestBytes_is_in_binary_units(t *testing.T) {
	for n, want := range map[int64]string{512: "512 B", 4096: "4 KiB", 64 << 20: "64 MiB", 1536: "1.5 KiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestStart_keeps_a_callers_new_session(t *testing.T) {
	h := newHost(t, Config{})
	cmd := exec.Command("sh", "-c", "exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	tr, err := h.Start(cmd, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Errorf("Wait: %v", err)
	}
	tr.Close()
}
