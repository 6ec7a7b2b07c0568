package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"jetway/pkg/auth"
)

// devStartTimeout bounds a `jetway dev` from its start to its API
// answering: an embedded server started and every stream provisioned, on
// a busy machine.
const devStartTimeout = 60 * time.Second

// devStopTimeout bounds a `jetway dev`'s clean stop after SIGTERM, after
// which its process group is killed.
const devStopTimeout = 15 * time.Second

// devProc is a real `jetway dev` process, as a person runs it: an
// embedded nats-server of its own and every service on one connection,
// with the model endpoint the bench gives it.
type devProc struct {
	url string // the HTTP API's root

	cmd    *exec.Cmd
	log    lockedBuffer // its services' log (stderr)
	mu     sync.Mutex
	lines  []string // stdout
	added  chan struct{}
	exited chan struct{}
}

// startDev starts `jetway dev` in a fresh data directory under dir, on
// free ports, in a process group of its own, with the Anthropic provider
// pointed at modelURL and tokens as its tokens file; it returns once the
// process says it is ready and its /readyz agrees.
func startDev(ctx context.Context, binary, dir, modelURL string, tokens auth.File) (*devProc, error) {
	data := filepath.Join(dir, ".jetway")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, fmt.Errorf("jetway dev: data dir: %w", err)
	}
	b, err := json.Marshal(tokens)
	if err != nil {
		return nil, fmt.Errorf("jetway dev: tokens: %w", err)
	}
	if err := os.WriteFile(filepath.Join(data, auth.DevTokensFile), b, 0o600); err != nil {
		return nil, fmt.Errorf("jetway dev: tokens: %w", err)
	}
	d := &devProc{added: make(chan struct{}), exited: make(chan struct{})}
	d.cmd = exec.Command(binary, "dev", "--data", data, "--nats", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--log-format", "json", "--log-level", "warn")
	d.cmd.Env = append(modelFreeEnv(),
		"ANTHROPIC_API_KEY=bench", "ANTHROPIC_BASE_URL="+modelURL, "ANTHROPIC_MODEL=claude-bench")
	d.cmd.Stderr = &d.log
	// Its own process group: the stop reaches whatever it started too.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("jetway dev: %w", err)
	}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s dev: %w", binary, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			d.mu.Lock()
			d.lines = append(d.lines, sc.Text())
			close(d.added)
			d.added = make(chan struct{})
			d.mu.Unlock()
		}
		_ = d.cmd.Wait() // how it ended is in its output, reported by fail
		close(d.exited)
	}()
	wctx, cancel := context.WithTimeout(ctx, devStartTimeout)
	defer cancel()
	fail := func(err error) (*devProc, error) {
		d.stop()
		return nil, fmt.Errorf("jetway dev: %w; stdout: %s; log: %s", err, oneLine(d.stdout()), oneLine(d.log.String()))
	}
	rest, err := d.line(wctx, "http: ")
	if err != nil {
		return fail(err)
	}
	d.url, _, _ = strings.Cut(rest, " ")
	if _, err := d.line(wctx, "ready;"); err != nil {
		return fail(err)
	}
	if err := waitReady(wctx, d.url); err != nil {
		return fail(err)
	}
	return d, nil
}

// modelFreeEnv is this process's environment without anything that would
// pick another model, point jetway elsewhere or change its tokens.
func modelFreeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "ANTHROPIC_") || strings.HasPrefix(k, "OPENAI_") ||
			strings.HasPrefix(k, "JETWAY_") || k == "NATS_URL" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// line waits for a stdout line starting with prefix and returns the rest.
func (d *devProc) line(ctx context.Context, prefix string) (string, error) {
	for seen := 0; ; {
		d.mu.Lock()
		lines, added := d.lines, d.added
		d.mu.Unlock()
		for ; seen < len(lines); seen++ {
			if rest, ok := strings.CutPrefix(lines[seen], prefix); ok {
				return rest, nil
			}
		}
		select {
		case <-added:
		case <-d.exited:
			return "", fmt.Errorf("exited before printing %q", prefix)
		case <-ctx.Done():
			return "", fmt.Errorf("printed no %q within %s: %w", prefix, devStartTimeout, ctx.Err())
		}
	}
}

func (d *devProc) stdout() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Join(d.lines, "\n")
}

// waitReady polls url's /readyz until it answers 200 or ctx ends.
func waitReady(ctx context.Context, url string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			_ = resp.Body.Close() // the status is all it says
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("/readyz: %w (last: %w)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// gone reports whether the process has exited, and if so what it said.
func (d *devProc) gone() error {
	select {
	case <-d.exited:
		return fmt.Errorf("jetway dev exited: %s", oneLine(d.log.String()))
	default:
		return nil
	}
}

// stop sends the process group SIGTERM, as Ctrl-C would, and kills it if
// it has not exited within devStopTimeout.
func (d *devProc) stop() {
	stopGroup(d.cmd, d.exited, devStopTimeout)
}

// stopGroup ends a process started with its own process group: SIGTERM to
// the group, then SIGKILL to it if the process has not exited within
// patience. exited is closed once the process is waited for.
func stopGroup(cmd *exec.Cmd, exited <-chan struct{}, patience time.Duration) {
	pgid := -cmd.Process.Pid
	select {
	case <-exited:
	default:
		if err := syscall.Kill(pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			_ = cmd.Process.Kill() // the group is out of reach: at least the process
		}
		select {
		case <-exited:
		case <-time.After(patience):
		}
	}
	// Whatever the group still holds (children of a process that exited
	// cleanly have no reason to live on).
	_ = syscall.Kill(pgid, syscall.SIGKILL)
	_ = cmd.Process.Kill() // gone already, or out of the group's reach
	<-exited
}
