package main

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"jetway/internal/testutil"
)

// testVersion is stamped into the test binary, as `make build` does.
const testVersion = testutil.JetwayVersion

// jetwayBinary is cmd/jetway built from this checkout, the build every
// package's tests share.
func jetwayBinary(t *testing.T) string { return testutil.JetwayBinary(t) }

// process is a running jetway whose stdout lines can be awaited.
type process struct {
	cmd    *exec.Cmd
	lines  chan string
	mu     sync.Mutex
	stdout []string
	stderr strings.Builder
	done   chan struct{}
}

func start(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{lines: make(chan string, 256), done: make(chan struct{})}
	p.cmd = exec.Command(jetwayBinary(t), args...)
	p.cmd.Stderr = &syncWriter{mu: &p.mu, b: &p.stderr}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start jetway: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.stdout = append(p.stdout, sc.Text())
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitLine waits for a stdout line starting with prefix and returns the rest.
func (p *process) waitLine(t *testing.T, prefix string, d time.Duration) string {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l := <-p.lines:
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
		case <-p.done:
			t.Fatalf("jetway exited before printing %q\n%s", prefix, p.output())
		case <-timeout:
			t.Fatalf("no line starting %q after %s\n%s", prefix, d, p.output())
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *process) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("jetway still running after %s\n%s", d, p.output())
		return -1
	}
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return "stdout:\n" + strings.Join(p.stdout, "\n") + "\nstderr:\n" + p.stderr.String()
}

type syncWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

var _ io.Writer = (*syncWriter)(nil)
