package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"jetway/pkg/redact"
	"jetway/pkg/tasks"
	"jetway/pkg/tasks/proctree"
)

// GroupJobs is the jobs service: task start latency, output capture and
// the worker's memory.
const GroupJobs = "jobs"

// Names of the jobs figures.
const (
	FigTaskStartP50     = "jobs task start p50 (pkg/tasks)"
	FigTaskStartP99     = "jobs task start p99 (pkg/tasks)"
	FigJobStartNATSP50  = "jobs start over NATS p50 (jetway jobs-worker)"
	FigJobStartNATSP99  = "jobs start over NATS p99 (jetway jobs-worker)"
	FigCapture          = "jobs output capture (pkg/tasks)"
	FigCaptureWorker    = "jobs output capture (jetway jobs-worker)"
	FigWorkerPeakRSS    = "jobs worker peak RSS while a task writes"
	FigWorkerPeakAnon   = "jobs worker RssAnon at its peak RSS"
	FigJobRunNATSP50    = "jobs confined run over NATS p50 (jetway jobs-worker)"
	FigJobRunNATSP99    = "jobs confined run over NATS p99 (jetway jobs-worker)"
	runGoalText         = "≤ 2× (bare run + one NATS round trip)"
	peakAnonGoalText    = "≤ 24 MiB"
	startGoalText       = "within 2× bare + one NATS round trip"
	captureGoalText     = "≥ half of cat >file"
	peakRSSGoalText     = "< 64 MiB"
	benchLine           = "the quick brown fox jumps over the lazy dog while the build prints another ordinary line of output"
	benchTaskSession    = "bench"
	benchCaptureCommand = "yes '%s' | head -c %d"
)

func init() {
	AllGroups = append(AllGroups, GroupJobs)
	measures[GroupJobs] = (*env).measureJobs
}

func (e *env) measureJobs(ctx context.Context) {
	dir := filepath.Join(e.dir, "jobs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.skip(FigTaskStartP99, "ms", startGoalText, err)
		return
	}
	bare, ok := e.taskStarts(ctx, dir)
	base, ok2 := e.catCapture(ctx, dir)
	e.taskCapture(ctx, dir, base, ok2)
	if !ok {
		bare = nil
	}
	e.workerFigures(ctx, dir, bare, base)
}

// bareRun times one start and wait of `/bin/sh -c true`, the command a
// confined run of `true` runs: the cost of running it with nothing around.
func bareRun(ctx context.Context) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "true")
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("bare run: %w", err)
	}
	return time.Since(t0), nil
}

// bareStart times one exec.Cmd.Start of /bin/true: the cost of a process
// start with nothing around it. The start figures take one right before
// each sample of their own, so that both see the same machine: on a shared
// VM the cost of a process start moves by several times within seconds,
// and a baseline measured apart from its figure could say anything.
func bareStart(ctx context.Context) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "true")
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("bare start: %w", err)
	}
	d := time.Since(t0)
	_ = cmd.Wait()
	return d, nil
}

// newManager is a tasks.Manager set up as the jobs worker sets up its own:
// the worker's line cleaner, default containment.
func newManager(dir string, maxOutput int64) *tasks.Manager {
	limits := tasks.DefaultLimits
	if maxOutput > 0 {
		limits.MaxOutputBytes = maxOutput
	}
	return tasks.NewManager(tasks.Config{
		Limits:      limits,
		Output:      tasks.Files{Dir: filepath.Join(dir, "out")}.Output,
		AppendClean: redact.AppendCleanLine,
		Unchanged:   redact.Unchanged,
		Proc:        proctree.Config{},
	})
}

// taskStarts times Manager.Start of the same /bin/true, each right after a
// bare start (bareStart), and returns the bare samples.
func (e *env) taskStarts(ctx context.Context, dir string) (samples, bool) {
	m := newManager(dir, 0)
	defer m.Close()
	n := e.sizes.TaskStarts
	e.progress("jobs: %d task starts through pkg/tasks, each after a bare os/exec start", n)
	tctx := tasks.WithSession(ctx, benchTaskSession)
	var bare, s samples
	for i := range n + n/10 {
		b, err := bareStart(ctx)
		if err != nil {
			e.skip(FigTaskStartP99, "ms", startGoalText, err)
			return nil, false
		}
		// Built before the clock starts, as the bare start's is: resolving
		// "true" in PATH is not part of starting it.
		cmd := exec.Command("true")
		t0 := time.Now()
		info, err := m.Start(tctx, tasks.Spec{Kind: "shell", Summary: "true", Cmd: cmd})
		d := time.Since(t0)
		if err != nil {
			e.skip(FigTaskStartP99, "ms", startGoalText, fmt.Errorf("task start: %w", err))
			return nil, false
		}
		if _, _, err := m.Wait(ctx, benchTaskSession, info.ID, e.patience()); err != nil {
			e.skip(FigTaskStartP99, "ms", startGoalText, fmt.Errorf("task wait: %w", err))
			return nil, false
		}
		if i >= n/10 {
			bare = append(bare, b)
			s = append(s, d)
		}
	}
	// In process there is no NATS hop: the goal is plain 2× bare.
	p50, p99 := s.pct(50), s.pct(99)
	e.add(figure(FigTaskStartP50, "ms", p50).vs("bare os/exec start p50", bare.pct(50)).goal("≤ 2× bare (in process, no hop)", p50 <= 2*bare.pct(50)).
		note("%d starts of /bin/true: Manager.Start returning the id (own process group, subreaper, cgroup where available, output file) vs exec.Cmd.Start, each taken right after a bare start", len(s)))
	e.add(figure(FigTaskStartP99, "ms", p99).vs("bare os/exec start p99", bare.pct(99)).goal("≤ 2× bare (in process, no hop)", p99 <= 2*bare.pct(99)))
	return bare, true
}

// captureCommand writes n bytes of ordinary 100-byte lines to stdout.
func captureCommand(n int64) string {
	return fmt.Sprintf(benchCaptureCommand, benchLine, n)
}

func (e *env) captureSize() string {
	return fmt.Sprintf("%d MB", e.sizes.CaptureBytes/1_000_000)
}

// catCapture times the same output written by the shell to a file.
func (e *env) catCapture(ctx context.Context, dir string) (float64, bool) {
	n := e.sizes.CaptureBytes
	e.progress("jobs: %s of lines through cat >file", e.captureSize())
	rate, err := catRate(ctx, dir, n)
	if err != nil {
		e.skip(FigCapture, "MB/s", captureGoalText, err)
		return 0, false
	}
	return rate, true
}

// catRate is the rate of n bytes of lines through `| cat >file`, in MB/s.
func catRate(ctx context.Context, dir string, n int64) (float64, error) {
	out := filepath.Join(dir, "cat.out")
	// Scratch space in the bench's directory, which goes as a whole.
	defer func() { _ = os.Remove(out) }()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", captureCommand(n)+" | cat >"+out)
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("cat >file: %w", err)
	}
	return float64(n) / 1e6 / time.Since(t0).Seconds(), nil
}

// bracket is the mean of the cat >file rate measured before a capture
// figure and the one measured right after it, the baseline of that figure:
// the machine's speed moves between runs of a few seconds, and a baseline
// from either side alone favours or hurts the figure by chance.
func bracket(ctx context.Context, dir string, n int64, before float64) float64 {
	after, err := catRate(ctx, dir, n)
	if err != nil {
		return before
	}
	return (before + after) / 2
}

// taskCapture times a task writing the same output through pkg/tasks: read
// from the pipe, cleaned and redacted line by line, written to its file.
func (e *env) taskCapture(ctx context.Context, dir string, base float64, ok bool) {
	if !ok {
		return
	}
	n := e.sizes.CaptureBytes
	m := newManager(dir, 2*n)
	defer m.Close()
	e.progress("jobs: %s of lines captured by a task", e.captureSize())
	tctx := tasks.WithSession(ctx, benchTaskSession)
	t0 := time.Now()
	info, err := m.Start(tctx, tasks.Spec{Kind: "shell", Summary: "yes | head", Cmd: exec.Command("/bin/sh", "-c", captureCommand(n))})
	if err != nil {
		e.skip(FigCapture, "MB/s", captureGoalText, err)
		return
	}
	info, outcome, err := m.Wait(ctx, benchTaskSession, info.ID, 10*time.Minute)
	elapsed := time.Since(t0)
	if err != nil || outcome != tasks.WaitEnded {
		e.skip(FigCapture, "MB/s", captureGoalText, fmt.Errorf("task did not end: %v %v", outcome, err))
		return
	}
	// Scratch space in the bench's directory, which goes as a whole.
	defer func() { _ = os.Remove(info.Path) }()
	if info.Bytes < n*9/10 {
		e.skip(FigCapture, "MB/s", captureGoalText, fmt.Errorf("captured %d of %d bytes", info.Bytes, n))
		return
	}
	v := float64(n) / 1e6 / elapsed.Seconds()
	r := figure(FigCapture, "MB/s", v).vs("cat >file, mean of before and after", bracket(ctx, dir, n, base))
	e.add(r.goal(captureGoalText, r.Ratio != nil && *r.Ratio >= 0.5).
		note("%s of 100-byte lines (%d lines captured, cleaned and redacted line by line, to the output file); cat >file timed right before and right after", e.captureSize(), info.Lines))
}

// vmHWM reads a process's peak resident set size in bytes.
func vmHWM(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }() // read only: a failed close loses nothing
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmHWM %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no VmHWM in /proc status")
}
