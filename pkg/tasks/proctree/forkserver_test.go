package proctree

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// limited is a limit that sends a tree through the helper, so the fork
// server can start it, and that nothing in these tests comes near.
var limited = Limits{CPUTime: time.Hour}

// A tree whose streams are files starts through the fork server, and its
// root is what an exec.Cmd start makes: this process's child, leading a
// process group of its own, born in its cgroup, with its command's exit
// status.
func TestForkServer_root_is_this_process_child_in_its_group_and_cgroup(t *testing.T) {
	h := newHost(t, Config{})
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	cmd := exec.Command("/bin/sh", "-c", `echo $$; cat /proc/self/cgroup; echo end; read x; exit 3`)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, outW
	tr, err := h.Start(cmd, limited)
	inR.Close()
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tr.KillNow()
		_ = tr.Wait()
		tr.Close()
	})
	if tr.proc == nil {
		t.Fatal("the tree did not start through the fork server")
	}
	lines := bufio.NewScanner(outR)
	var got []string
	for lines.Scan() && lines.Text() != "end" {
		got = append(got, lines.Text())
	}
	if len(got) == 0 || got[0] != strconv.Itoa(tr.Pid()) {
		t.Fatalf("the command's pid %q, want the root's %d", got, tr.Pid())
	}
	p, ok := readStat(tr.Pid())
	if !ok {
		t.Fatal("the root is gone")
	}
	if p.ppid != os.Getpid() || p.pgrp != tr.Pid() {
		t.Errorf("root's parent %d and group %d, want this process %d and its own %d", p.ppid, p.pgrp, os.Getpid(), tr.Pid())
	}
	// The command runs with the ordinary scheduling policy, as this
	// process's child would.
	if got := schedPolicy(t, tr.Pid()); got != "0" {
		t.Errorf("the command's scheduling policy is %s, want 0 (SCHED_OTHER)", got)
	}
	if dir := tr.Cgroup(); dir != "" {
		own := "/" + filepath.Base(filepath.Dir(dir)) + "/" + filepath.Base(dir)
		if !hasLine(got, func(l string) bool { return strings.HasPrefix(l, "0::") && strings.HasSuffix(l, own) }) {
			t.Errorf("the root's cgroups %q lack its tree's %s", got, dir)
		}
	}
	if _, err := inW.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	err = tr.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 3 {
		t.Errorf("Wait = %v (state %v), want exit status 3 as exec.Cmd reports it", err, cmd.ProcessState)
	}
}

// schedPolicy is field 41 of /proc/<pid>/stat, the scheduling policy.
func schedPolicy(t *testing.T, pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 39 {
		t.Fatalf("short /proc/%d/stat", pid)
	}
	return f[38]
}

func hasLine(lines []string, match func(string) bool) bool {
	for _, l := range lines {
		if match(l) {
			return true
		}
	}
	return false
}

// A command killed by a signal reads as exec.Cmd reports it, which the
// limits' reports rely on; one that exits 0 waits with no error.
func TestForkServer_root_ends_as_exec_cmd_reports_it(t *testing.T) {
	h := newHost(t, Config{NoCgroups: true})
	for _, c := range []struct {
		script string
		check  func(error) bool
	}{
		{"true", func(err error) bool { return err == nil }},
		{"kill -KILL $$", func(err error) bool {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				return false
			}
			ws, ok := ee.Sys().(syscall.WaitStatus)
			return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
		}},
	} {
		tr, _ := start(t, h, limited, c.script)
		if tr.proc == nil {
			t.Fatalf("%q did not start through the fork server", c.script)
		}
		if err := tr.Wait(); !c.check(err) {
			t.Errorf("%q: Wait = %v", c.script, err)
		}
	}
}

// The server holds nothing of this process: an empty environment, and no
// descriptor but its standard ones (on /dev/null) and its socket.
func TestForkServer_has_an_empty_environment_and_only_its_socket(t *testing.T) {
	h := newHost(t, Config{NoCgroups: true})
	tr, _ := start(t, h, limited, "true")
	if tr.proc == nil {
		t.Fatal("the tree did not start through the fork server")
	}
	fsrv.mu.Lock()
	pid := fsrv.pid
	fsrv.mu.Unlock()
	dir := "/proc/" + strconv.Itoa(pid)
	if env, err := os.ReadFile(dir + "/environ"); err != nil || len(env) != 0 {
		t.Errorf("the server's environment = %q (%v), want empty", env, err)
	}
	// Between requests: a request's descriptors are closed once it is
	// answered and its child let go, just after the answer.
	var fds []string
	if !waitFor(5*time.Second, func() bool {
		fds = serverFDs(t, dir)
		return len(fds) == 4 && fds[0] == "0="+os.DevNull && fds[1] == "1="+os.DevNull && fds[2] == "2="+os.DevNull &&
			strings.HasPrefix(fds[3], "4=socket:")
	}) {
		t.Errorf("the server's descriptors %v, want 0-2 on %s and its socket on 4", fds, os.DevNull)
	}
}

// serverFDs lists a process's descriptors as "N=target", in order.
func serverFDs(t *testing.T, dir string) []string {
	ents, err := os.ReadDir(dir + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range ents {
		target, _ := os.Readlink(filepath.Join(dir, "fd", e.Name()))
		fds = append(fds, e.Name()+"="+target)
	}
	slices.SortFunc(fds, func(a, b string) int {
		x, _ := strconv.Atoi(a[:strings.IndexByte(a, '=')])
		y, _ := strconv.Atoi(b[:strings.IndexByte(b, '=')])
		return x - y
	})
	return fds
}

// A server that died is replaced: the start that finds it gone goes
// through exec.Cmd, and a later one through a new server.
func TestForkServer_gone_is_replaced(t *testing.T) {
	h := newHost(t, Config{NoCgroups: true})
	tr, _ := start(t, h, limited, "true")
	if tr.proc == nil {
		t.Fatal("the tree did not start through the fork server")
	}
	defer func(d time.Duration) { forkServerRestartEvery = d }(forkServerRestartEvery)
	forkServerRestartEvery = 0
	fsrv.mu.Lock()
	old := fsrv.pid
	fsrv.mu.Unlock()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool {
		fsrv.mu.Lock()
		defer fsrv.mu.Unlock()
		return fsrv.pid != old
	}) {
		t.Fatal("the killed server was not noticed")
	}
	if !waitFor(10*time.Second, func() bool {
		tr, _ := start(t, h, limited, "true")
		return tr.proc != nil
	}) {
		t.Fatal("no new fork server started")
	}
}

// forkServerOrphanEnv makes the test binary start `sleep` through the fork
// server, print its pid and wait to be killed:
// TestForkServer_root_dies_with_its_host kills it.
const forkServerOrphanEnv = "JETWAY_TEST_FORK_SERVER_ORPHAN"

func runForkServerOrphan() int {
	useHelperFile(os.Getenv(helperFileEnv))
	h, err := NewHost(Config{NoCgroups: true})
	if err != nil {
		return 3
	}
	cmd := exec.Command("sleep", "60")
	cmd.Stdout = os.Stdout
	tr, err := h.Start(cmd, limited)
	if err != nil || tr.proc == nil {
		fmt.Println("not started through the fork server:", err)
		return 4
	}
	fmt.Println(tr.Pid())
	select {}
}

// A root the fork server started dies with the process that asked for it
// (the parent-death signal of an exec.Cmd start), even one killed
// without a chance to clean up.
func TestForkServer_root_dies_with_its_host(t *testing.T) {
	helper, err := HelperFile()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(MinimalEnv(), forkServerOrphanEnv+"=1", helperFileEnv+"="+helper)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		t.Fatalf("the host's child said %q (%v)", line, err)
	}
	if p, ok := readStat(pid); !ok || p.ppid != cmd.Process.Pid {
		t.Fatalf("the root %d is not the host's child (%+v)", pid, p)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !waitFor(10*time.Second, func() bool {
		p, ok := readStat(pid)
		return !ok || p.state == 'Z' && p.ppid != cmd.Process.Pid
	}) {
		t.Errorf("the root %d outlived the host that started it", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// It was handed to this process, a subreaper since its first host.
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
}

// A command given no directory runs in this process's current one, as
// an exec.Cmd start would run it, though the server started elsewhere.
func TestForkServer_command_without_a_directory_runs_in_the_current_one(t *testing.T) {
	h := newHost(t, Config{NoCgroups: true})
	start(t, h, limited, "true") // the server, started in the old directory
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	tr, lines := start(t, h, limited, "pwd")
	if tr.proc == nil {
		t.Fatal("the tree did not start through the fork server")
	}
	if !lines.Scan() || lines.Text() != dir {
		t.Errorf("the command ran in %q, want the current directory %s", lines.Text(), dir)
	}
}
