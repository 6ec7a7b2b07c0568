package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"jetway/internal/testutil"
)

// stopTimeout bounds how long a process may take to exit after a signal.
const stopTimeout = 15 * time.Second

// jetwayBinary returns the jetway binary to run: $JETWAY_BIN when set (make
// chaos builds bin/jetway first), otherwise the build every package's
// tests share.
func jetwayBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("JETWAY_BIN"); bin != "" {
		abs, err := filepath.Abs(bin)
		if err != nil {
			t.Fatalf("JETWAY_BIN %q: %v", bin, err)
		}
		return abs
	}
	return testutil.JetwayBinary(t)
}

// hasCommand reports whether the jetway binary knows a subcommand.
func hasCommand(bin, name string) bool {
	out, err := exec.Command(bin, name, "--help").CombinedOutput()
	return err == nil && !strings.Contains(string(out), "unknown command")
}

// logLevel is the runners' log level: CHAOS_LOG_LEVEL (e.g. debug, to
// follow a missing event decision by decision), else info.
func logLevel() string {
	if v := os.Getenv("CHAOS_LOG_LEVEL"); v != "" {
		return v
	}
	return "info"
}

// proc is one long-lived jetway process (a runner) that the suite kills and
// starts again under the same identity. Its output goes to a log file that
// survives restarts, shown when the test fails.
type proc struct {
	name string
	args []string
	env  []string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// newProc prepares a process and makes sure it is gone when the test ends.
func newProc(t *testing.T, name string, args, env []string) *proc {
	dir := os.Getenv("CHAOS_LOGS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("CHAOS_LOGS: %v", err)
	}
	p := &proc{name: name, args: args, env: env, log: filepath.Join(dir, name+".log")}
	t.Cleanup(func() {
		if err := p.stop(syscall.SIGTERM); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("%s log (last lines):\n%s", name, p.tail(60))
		}
	})
	return p
}

// start starts the process; it must not be running.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running", p.name)
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: log: %w", p.name, err)
	}
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Should the test binary die, the process dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: start: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// running reports whether the process is started and has not exited.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends sig and waits for the exit; a process that ignores anything
// but SIGKILL for stopTimeout is killed. Stopping a stopped process does
// nothing.
func (p *proc) stop(sig syscall.Signal) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd, p.done = nil, nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: signal %v: %w", p.name, sig, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
		return fmt.Errorf("%s: did not exit within %s of %v; killed", p.name, stopTimeout, sig)
	case <-time.After(stopTimeout):
		return fmt.Errorf("%s: still alive %s after SIGKILL", p.name, stopTimeout)
	}
}

// signal sends sig to the running process and waits for nothing: SIGSTOP
// and SIGCONT freeze and resume it.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s: not running", p.name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: signal %v: %w", p.name, sig, err)
	}
	return nil
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
