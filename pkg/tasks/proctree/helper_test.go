package proctree

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The helper is held at the read of its spec (a pipe the test writes
// later), so its own process can be looked at before it does anything:
// its environment is empty and its argv names only itself, though the
// command's environment holds a loader variable and a secret. So it is
// whether the helper was exec'd by this process or forked by the fork
// server.
func TestHelper_process_has_an_empty_environment_before_it_execs(t *testing.T) {
	needLandlock(t)
	for _, cfg := range []Config{{NoCgroups: true, NoForkServer: true}, {NoCgroups: true}} {
		t.Run(fmt.Sprintf("fork server %t", !cfg.NoForkServer), func(t *testing.T) {
			helperHeldAtItsRead(t, newHost(t, cfg), !cfg.NoForkServer)
		})
	}
}

func helperHeldAtItsRead(t *testing.T, h *Host, viaServer bool) {
	ViewAvailable() // its probe reads a spec of its own
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var held []byte
	specSource = func(prog []byte) (*os.File, error) {
		held = prog
		return r, nil
	}
	t.Cleanup(func() { specSource = specFile })
	dir := t.TempDir()
	c := SystemConfinement()
	c.ReadWrite = []string{dir}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	cmd := exec.Command("/bin/sh", "-c", "echo ran; env")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LD_AUDIT=/nonexistent/evil.so", "GCONV_PATH=/nonexistent", "SECRET_OF_THE_COMMAND=x"}
	cmd.Stdout, cmd.Stderr = outW, outW
	tr, err := h.StartConfined(cmd, Limits{}, &c)
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tr.KillNow()
		tr.Close()
	})
	if (tr.proc != nil) != viaServer {
		t.Fatalf("started by the fork server: %t, want %t", tr.proc != nil, viaServer)
	}
	pid := strconv.Itoa(tr.Pid())
	environ, err := os.ReadFile("/proc/" + pid + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if len(environ) != 0 {
		t.Errorf("the helper's environment before exec = %q, want empty", environ)
	}
	argv, _ := os.ReadFile("/proc/" + pid + "/cmdline")
	if string(argv) != helperName+"\x00" {
		t.Errorf("the helper's argv = %q, want only its name", argv)
	}
	if exe, _ := os.Readlink("/proc/" + pid + "/exe"); !strings.HasPrefix(exe, "/memfd:"+helperName) {
		t.Errorf("the helper runs from %q, want its sealed memfd", exe)
	}
	out := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(outR)
		out <- b
	}()
	// Now let it go: the command runs with its own environment.
	if _, err := w.Write(held); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- tr.Wait() }()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the command did not end")
	}
	b := <-out
	if err != nil || !strings.Contains(string(b), "ran") || !strings.Contains(string(b), "SECRET_OF_THE_COMMAND=x") {
		t.Errorf("the command after the helper: %v\n%s", err, b)
	}
}

// A descriptor this process inherited without close-on-exec (from a
// service manager, a shell, a test harness) is not passed on to a
// command through the helper, whether exec.Cmd or the fork server
// started it: the command has its three standard streams and nothing
// else.
func TestHelper_command_gets_its_streams_and_no_other_descriptor(t *testing.T) {
	const leak = 100
	if err := syscall.Dup2(int(os.Stdin.Fd()), leak); err != nil { // no O_CLOEXEC
		t.Fatal(err)
	}
	defer syscall.Close(leak)
	for _, cfg := range []Config{{NoCgroups: true, NoForkServer: true}, {NoCgroups: true}} {
		h := newHost(t, cfg)
		// The glob reads the directory through a descriptor of the
		// shell's own, the lowest free one: 3.
		tr, lines := start(t, h, limited, `cd /proc/$$/fd && echo *`)
		if (tr.proc != nil) == cfg.NoForkServer {
			t.Fatalf("fork server %t: started through it: %t", !cfg.NoForkServer, tr.proc != nil)
		}
		if !lines.Scan() || lines.Text() != "0 1 2 3" {
			t.Errorf("fork server %t: the command's descriptors are %q, want 0 1 2 and the glob's 3 (not %d)", !cfg.NoForkServer, lines.Text(), leak)
		}
	}
}

// The memfd the helper runs from is sealed: not even this process can
// change it after loading.
func TestHelper_memfd_is_sealed(t *testing.T) {
	exe, err := helperPath()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(exe, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.Write([]byte("x"))
		f.Close()
	}
	if err == nil {
		t.Error("the helper's memfd could be written")
	}
}

// The helper is a static program: no dynamic loader runs before it, so no
// loader variable is read by anything before the command is confined.
func TestHelper_is_static_with_no_loader(t *testing.T) {
	path, err := HelperFile()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the helper has a %v program header: it is not static", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the helper imports %v", libs)
	}
}

// unixProbeArg makes the test binary try unix sockets (TestMain): a
// connect to the path it is given, a listener in its directory, and a
// socketpair; one line each, "ok" or "refused: <error>".
const unixProbeArg = "unixprobe"

func unixProbe(outside string) int {
	say := func(what string, err error) {
		if err != nil {
			fmt.Printf("%s refused: %v\n", what, err)
		} else {
			fmt.Printf("%s ok\n", what)
		}
	}
	c, err := net.Dial("unix", outside)
	if err == nil {
		c.Close()
	}
	say("connect-outside", err)
	l, err := net.Listen("unix", "here.sock")
	if err == nil {
		l.Close()
	}
	say("listen-here", err)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
	}
	say("socketpair", err)
	return 0
}

// A unix socket listening outside the tree's directory: with a view it
// does not exist for the tree, while one in its directory works; without
// (a host that refuses the namespaces) unix sockets cannot be made at
// all, socketpair still works.
func TestConfined_tree_reaches_no_unix_socket_outside_with_or_without_a_view(t *testing.T) {
	needLandlock(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.MkdirTemp("", "jw-ux-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(other) })
	sock := listenUnix(t, filepath.Join(other, "s.sock"))
	if c, err := net.Dial("unix", sock); err != nil {
		t.Fatalf("control: the socket cannot be reached from outside the confinement: %v", err)
	} else {
		c.Close()
	}
	for _, noView := range []bool{false, true} {
		if ok, why := ViewAvailable(); !noView && !ok {
			t.Logf("no view on this host (%s): only the fallback is tested", why)
			continue
		}
		h := newHost(t, Config{NoCgroups: true, NoView: noView})
		dir := t.TempDir()
		c := SystemConfinement()
		c.ReadWrite = []string{dir}
		if err := c.AddReadOnly(filepath.Dir(self)); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd := exec.Command(self, unixProbeArg, sock)
		cmd.Dir, cmd.Env = dir, MinimalEnv()
		cmd.Stdout, cmd.Stderr = &out, &out
		tr, err := h.StartConfined(cmd, Limits{}, &c)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = tr.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = tr.KillNow()
			t.Fatal("the probe did not end")
		}
		tr.Close()
		want := []string{"connect-outside refused", "listen-here ok", "socketpair ok"}
		if noView {
			want[1] = "listen-here refused"
		}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("view %v: want %q in:\n%s", !noView, w, out.String())
			}
		}
	}
}

// listenUnix listens on a pathname unix socket at path, accepting and
// closing every connection, until the test ends; it returns path.
func listenUnix(t *testing.T, path string) string {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return path
}

// The helper runs only a program it can read whole: a step it does not
// know, or a program cut short, ends it with status 127 and a line naming
// what was wrong, and nothing is executed.
func TestHelper_refuses_a_bad_program_and_runs_nothing(t *testing.T) {
	exe, err := HelperFile()
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	for name, prog := range map[string]string{
		"unknown step": programMagic + "\x00teleport\x00exec\x00/bin/touch\x002\x00touch\x00" + marker + "\x000\x00",
		"cut short":    programMagic + "\x00exec\x00/bin/touch\x005\x00touch\x00" + marker + "\x00",
		"no magic":     "exec\x00/bin/touch\x002\x00touch\x00" + marker + "\x000\x00",
		"bad number":   programMagic + "\x00rlimit\x00x\x001\x001\x00exec\x00/bin/touch\x002\x00touch\x00" + marker + "\x000\x00",
	} {
		f, err := specFile([]byte(prog))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(exe)
		cmd.Env = []string{}
		cmd.ExtraFiles = []*os.File{f}
		out, err := cmd.CombinedOutput()
		f.Close()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 127 || !strings.HasPrefix(string(out), "jetway confine: cannot confine the command") {
			t.Errorf("%s: exit %v, output %q; want 127 and the refusal", name, err, out)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%s: the command ran", name)
		}
	}
}
