package proctree

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runConfined runs script under sh confined to a fresh read-write
// directory plus the system part, and returns its combined output. The
// output goes through a pipe, as a worker's does, so the tree starts
// through the fork server unless the host's config says otherwise.
func runConfined(t *testing.T, h *Host, dir, script string, env []string) string {
	t.Helper()
	c := SystemConfinement()
	c.ReadWrite = []string{dir}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = w, w
	tr, err := h.StartConfined(cmd, Limits{}, &c)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tr.KillNow()
		tr.Close()
	})
	out := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		out <- b
	}()
	done := make(chan struct{})
	go func() { _ = tr.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%q did not end", script)
	}
	// Whatever the script left running would hold the pipe open.
	_ = tr.KillNow()
	select {
	case b := <-out:
		return string(b)
	case <-time.After(20 * time.Second):
		t.Fatalf("%q: its output did not end", script)
		return ""
	}
}

func needLandlock(t *testing.T) {
	t.Helper()
	if v := LandlockABI(); v < MinLandlockABI {
		t.Skipf("kernel Landlock ABI %d, confinement needs %d", v, MinLandlockABI)
	}
}

func TestConfined_tree_reaches_its_directory_and_the_system_but_nothing_else(t *testing.T) {
	needLandlock(t)
	h := newHost(t, Config{NoCgroups: true})
	base := t.TempDir()
	dir := filepath.Join(base, "ws")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "outside.txt"), []byte("SECRET-OUTSIDE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runConfined(t, h, dir, `
echo inside > a.txt && cat a.txt
mkdir -p sub && mv a.txt sub/b.txt && cat sub/b.txt
echo piped | tr a-z A-Z
echo to-null > /dev/null && echo null-ok
cat ../outside.txt || echo outside-refused
echo x > ../new.txt || echo write-outside-refused
ls .. >/dev/null 2>&1 || echo list-outside-refused
cat /proc/1/environ >/dev/null 2>&1 || echo proc-refused
cat /etc/shadow >/dev/null 2>&1 || echo shadow-refused
kill -0 $PPID 2>/dev/null || echo signal-refused
head -c 4 /etc/passwd; echo
`, MinimalEnv())
	for _, want := range []string{"inside", "PIPED", "null-ok", "outside-refused", "write-outside-refused",
		"list-outside-refused", "proc-refused", "shadow-refused", "root"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "SECRET-OUTSIDE") {
		t.Errorf("the confined tree read a file outside its directory:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(base, "new.txt")); err == nil {
		t.Error("the confined tree wrote outside its directory")
	}
	if LandlockABI() >= 6 && !strings.Contains(out, "signal-refused") {
		t.Errorf("the confined tree could signal its parent (ABI %d scopes signals):\n%s", LandlockABI(), out)
	}
}

func TestConfined_root_has_no_capabilities(t *testing.T) {
	needLandlock(t)
	if os.Geteuid() != 0 {
		t.Skip("runs as root only")
	}
	if _, err := exec.LookPath("hostname"); err != nil {
		t.Skip("no hostname tool")
	}
	h := newHost(t, Config{NoCgroups: true})
	// Setting the host name (to the one it has) needs CAP_SYS_ADMIN and
	// touches no file: only the dropped capabilities refuse it.
	script := `hostname "$(hostname)" && echo sethostname-allowed || echo sethostname-refused`
	if out, err := exec.Command("/bin/sh", "-c", script).CombinedOutput(); err != nil || !strings.Contains(string(out), "sethostname-allowed") {
		t.Fatalf("control: an unconfined root cannot set the host name either: %v\n%s", err, out)
	}
	out := runConfined(t, h, t.TempDir(), script, MinimalEnv())
	if !strings.Contains(out, "sethostname-refused") {
		t.Errorf("a confined root could set the host name:\n%s", out)
	}
}

func TestCommand_without_an_env_gets_the_minimal_one_not_the_hosts(t *testing.T) {
	t.Setenv("JETWAY_TEST_SECRET", "do-not-leak")
	h := newHost(t, Config{NoCgroups: true})
	var out bytes.Buffer
	cmd := exec.Command("/bin/sh", "-c", "env")
	cmd.Stdout = &out
	// A limit sends the command through the shim too, whose environment
	// must not add anything.
	tr, err := h.Start(cmd, Limits{CPUTime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	_ = tr.Wait()
	if strings.Contains(out.String(), "do-not-leak") {
		t.Errorf("the command's environment holds the host's:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "PATH=") {
		t.Errorf("the command has no PATH:\n%s", out.String())
	}
}

// confinedHelperEnv makes the test binary start one confined command in
// the directory it names, with the default limits, and exit with its
// status: TestConfined_tree_works_for_an_ordinary_user runs it as nobody.
const confinedHelperEnv = "JETWAY_TEST_CONFINED_HELPER"

// helperFileEnv names the prebuilt helper such a child runs: as nobody it
// has no cache to build one in.
const helperFileEnv = "JETWAY_TEST_HELPER_FILE"

func runConfinedHelper(dir string) int {
	useHelperFile(os.Getenv(helperFileEnv))
	// Where this user may have a user namespace, the tree gets its view
	// through one; elsewhere it goes without (and without unix sockets).
	if ok, why := ViewAvailable(); ok {
		fmt.Println("view: through a user namespace")
	} else {
		fmt.Println("view: none:", why)
	}
	h, err := NewHost(Config{Grace: 200 * time.Millisecond})
	if err != nil {
		return 3
	}
	defer h.Close()
	c := SystemConfinement()
	c.ReadWrite = []string{dir}
	cmd := exec.Command("/bin/sh", "-c", `echo written > f && cat f && { cat ../outside.txt || echo outside-refused; }`)
	cmd.Dir = dir
	cmd.Env = MinimalEnv()
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	tr, err := h.StartConfined(cmd, Limits{Memory: 2 << 30, Processes: 1024, CPUTime: time.Hour}, &c)
	if err != nil {
		fmt.Println(err)
		return 4
	}
	defer tr.Close()
	if err := tr.Wait(); err != nil {
		return 5
	}
	// The unix socket probe (helper_test.go), aimed at a socket the test
	// listens on in a directory of its own.
	self, _ := os.Executable()
	if err := c.AddReadOnly(filepath.Dir(self)); err != nil {
		return 6
	}
	probe := exec.Command(self, unixProbeArg, os.Getenv(outsideSockEnv))
	probe.Dir, probe.Env = dir, MinimalEnv()
	probe.Stdout, probe.Stderr = os.Stdout, os.Stderr
	pt, err := h.StartConfined(probe, Limits{}, &c)
	if err != nil {
		fmt.Println(err)
		return 7
	}
	defer pt.Close()
	if err := pt.Wait(); err != nil {
		return 8
	}
	return 0
}

// outsideSockEnv names the socket runConfinedHelper's probe aims at.
const outsideSockEnv = "JETWAY_TEST_OUTSIDE_SOCK"

func TestConfined_tree_works_for_an_ordinary_user(t *testing.T) {
	needLandlock(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to become another user")
	}
	// nobody must reach the binary and the directories: a fresh 0755 tree
	// outside t.TempDir's private parent.
	base, err := os.MkdirTemp("", "jetway-confined-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	bin := filepath.Join(base, "proctree.test")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	helper, err := HelperFile()
	if err != nil {
		t.Fatal(err)
	}
	helperBytes, err := os.ReadFile(helper)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "ws")
	for _, step := range []error{
		os.WriteFile(filepath.Join(base, "jetway-confine"), helperBytes, 0o755),
		os.Chmod(base, 0o755),
		os.WriteFile(bin, self, 0o755),
		os.Mkdir(dir, 0o755),
		os.Chown(dir, 65534, 65534),
		os.WriteFile(filepath.Join(base, "outside.txt"), []byte("SECRET-OUTSIDE\n"), 0o644),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	// A socket nobody could connect to, were it reachable.
	other, err := os.MkdirTemp("", "jw-nb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(other) })
	sock := listenUnix(t, filepath.Join(other, "s.sock"))
	for _, p := range []string{other, sock} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(MinimalEnv(), confinedHelperEnv+"="+dir, helperFileEnv+"="+filepath.Join(base, "jetway-confine"), outsideSockEnv+"="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("confined command as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "written") || !strings.Contains(string(out), "outside-refused") || strings.Contains(string(out), "SECRET-OUTSIDE") {
		t.Errorf("as nobody:\n%s", out)
	}
	t.Logf("as nobody:\n%s", out)
	if !strings.Contains(string(out), "connect-outside refused") || !strings.Contains(string(out), "socketpair ok") {
		t.Errorf("as nobody, a unix socket outside was reachable:\n%s", out)
	}
	if strings.Contains(string(out), "view: through") != strings.Contains(string(out), "listen-here ok") {
		t.Errorf("as nobody, a socket in the workspace works exactly when there is a view:\n%s", out)
	}
}

// Rule sets are reused between starts (ruleset.go), but they hold inodes:
// a workspace removed and made again under the same name must be writable
// by the next job, not refused by a rule set made for the old one.
func TestConfined_tree_writes_a_directory_made_anew_under_the_same_name(t *testing.T) {
	needLandlock(t)
	h := newHost(t, Config{NoCgroups: true})
	dir := filepath.Join(t.TempDir(), "ws")
	for i := range 3 {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		out := runConfined(t, h, dir, "echo x > f && echo wrote", MinimalEnv())
		if !strings.Contains(out, "wrote") {
			t.Fatalf("round %d: a job could not write its directory made anew: %s", i, out)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
}
