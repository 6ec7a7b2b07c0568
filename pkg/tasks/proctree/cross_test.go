package proctree

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"jetway/pkg/tasks/proctree/confspec"
)

// requireArm64Env makes the arm64 test fail, not skip, where its cross
// compiler or emulator is missing: .ci/run sets it once it installed them.
const requireArm64Env = "JETWAY_TEST_REQUIRE_ARM64"

// firstTool is the first of names found on PATH, "" for none.
func firstTool(names ...string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// The helper's system calls are written per architecture (confine.c), and
// this machine is amd64: the arm64 ones are compiled here with a cross
// compiler, with the flags of a real build, and the binary is run under
// qemu's user-mode emulator, which hands the system calls to this kernel.
// The emulator (7.2) implements neither landlock_restrict_self nor
// seccomp, so a confined program is seen to refuse to run there; the
// rest (the program's parsing, chdir, the rlimits, no_new_privs, the
// capability drop, the exec with the command's own environment) is seen
// to work.
func TestHelper_for_arm64_builds_and_runs_its_steps(t *testing.T) {
	required := os.Getenv(requireArm64Env) == "1"
	missing := func(what string) {
		t.Helper()
		if required {
			t.Fatalf("%s is not installed (%s=1)", what, requireArm64Env)
		}
		t.Skipf("%s is not installed (Debian: apt-get install gcc-aarch64-linux-gnu qemu-user-static)", what)
	}
	cc := firstTool("aarch64-linux-gnu-gcc")
	if cc == "" {
		missing("an arm64 cross compiler (aarch64-linux-gnu-gcc)")
	}
	_, self, _, _ := runtime.Caller(0)
	helper := filepath.Join(t.TempDir(), helperName)
	if out, err := exec.Command(cc, helperCFlags(helper, filepath.Join(filepath.Dir(self), "confiner", "confine.c"))...).CombinedOutput(); err != nil {
		t.Fatalf("compile the helper for arm64: %v\n%s", err, out)
	}
	f, err := elf.Open(helper)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AARCH64 || f.Type != elf.ET_EXEC {
		t.Errorf("the arm64 helper is %v %v, want a static EM_AARCH64 executable", f.Machine, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the arm64 helper asks for a program interpreter: it must be static")
		}
	}

	qemu := firstTool("qemu-aarch64-static", "qemu-aarch64")
	if qemu == "" {
		missing("qemu's arm64 user-mode emulator (qemu-aarch64-static)")
	}
	run := func(prog *program) (stdout, stderr string, code int) {
		t.Helper()
		spec, err := specFile(prog.b)
		if err != nil {
			t.Fatal(err)
		}
		defer spec.Close()
		defer prog.close()
		var o, e bytes.Buffer
		cmd := exec.Command(qemu, helper)
		cmd.Env = []string{}
		cmd.ExtraFiles = append([]*os.File{spec}, prog.files...)
		cmd.Stdout, cmd.Stderr = &o, &e
		err = cmd.Run()
		code = cmd.ProcessState.ExitCode()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatal(err)
		}
		return o.String(), e.String(), code
	}

	// The steps that work under the emulator, then the exec of a host
	// shell (the emulator hands execve to the kernel).
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := &program{}
	p.step(programMagic)
	p.step("chdir", dir)
	p.rlimit(unix.RLIMIT_CPU, 7, 8)
	p.rlimit(unix.RLIMIT_FSIZE, 1<<20, 1<<20)
	p.step("nnp")
	p.step("caps")
	p.step("exec", "/bin/sh")
	p.list([]string{"sh", "-c", `ulimit -t; ulimit -f; pwd; env; grep -E '^(NoNewPrivs|CapEff)' /proc/self/status; cd /proc/$$/fd && echo fds *`})
	p.list([]string{"A=1", "B=two words"})
	out, errOut, code := run(p)
	want := "7\n2048\n" + dir + "\nA=1\nB=two words\nPWD=" + dir + "\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nfds 0 1 2 3\n"
	if code != 0 || out != want {
		t.Errorf("the arm64 helper's steps: exit %d, output\n%s\nwant\n%s\nstderr: %s", code, out, want, errOut)
	}

	// A program it cannot read is refused, and nothing runs.
	bad := &program{}
	bad.step(programMagic)
	bad.step("no-such-step")
	if out, errOut, code := run(bad); code != 127 || out != "" || !strings.Contains(errOut, "unknown step no-such-step") {
		t.Errorf("a bad program under the arm64 helper: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// A confinement the emulator cannot apply is not skipped: the
	// command does not run.
	if LandlockABI() < MinLandlockABI {
		return
	}
	c := SystemConfinement()
	c.ReadWrite = []string{dir}
	conf, err := compile(confspec.Spec{Path: "/bin/sh", Args: []string{"sh", "-c", "echo ran-unconfined"}, Env: []string{}, Dir: dir, Confine: &c})
	if err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := run(conf); code != 127 || strings.Contains(out, "ran-unconfined") || !strings.Contains(errOut, "so it does not run") {
		t.Errorf("a confined program under the emulator: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
