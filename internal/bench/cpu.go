package bench

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// FigRunnerCPUPerEvent names the CPU the bench process spends per event
// in the one-runner sustained run, beside what it spent per message on
// the floor. Where the cores are the limit, the ratio of the two rates
// is about the inverse of the ratio of these two: one runner reaches
// half the floor's rate only at no more than twice its CPU per event.
const FigRunnerCPUPerEvent = "runner process CPU per event, 1 runner sustained"

// cpuClock measures the CPU time this process used, user and system over
// all its threads, and the wall time, from when it was started.
type cpuClock struct {
	cpu  time.Duration
	wall time.Time
	err  error
}

// startCPU starts a cpuClock now.
func startCPU() cpuClock {
	cpu, err := processCPU()
	return cpuClock{cpu: cpu, wall: time.Now(), err: err}
}

// cpuSpan is what a cpuClock measured: CPU time and the wall time it was
// spent in.
type cpuSpan struct {
	cpu, wall time.Duration
}

// perItem is the CPU per item in microseconds.
func (s cpuSpan) perItem(n int) float64 {
	return float64(s.cpu.Microseconds()) / float64(n)
}

// cores is how many cores were busy on average over the span.
func (s cpuSpan) cores() float64 {
	if s.wall <= 0 {
		return 0
	}
	return s.cpu.Seconds() / s.wall.Seconds()
}

func (c cpuClock) stop() (cpuSpan, error) {
	if c.err != nil {
		return cpuSpan{}, c.err
	}
	cpu, err := processCPU()
	if err != nil {
		return cpuSpan{}, err
	}
	return cpuSpan{cpu: cpu - c.cpu, wall: time.Since(c.wall)}, nil
}

// processCPU is the CPU time this process has used so far.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// cpuPerEvent reports the process's CPU per event over a one-runner
// sustained run, beside the floor's per message. With --nats the server
// is another process, whose CPU this one cannot see, so the two would not
// compare.
func (e *env) cpuPerEvent(span cpuSpan, err error, total int) {
	const goal = "≤ 2× the floor's, for half its rate"
	if e.srv == nil {
		err = errors.New("the server's CPU counts only when it is embedded in the bench's process; not available with --nats")
	}
	if err != nil {
		e.skip(FigRunnerCPUPerEvent, "µs/event", goal, err)
		return
	}
	v := span.perItem(total)
	r := figure(FigRunnerCPUPerEvent, "µs/event", v).info(goal)
	if e.base.floorCPU > 0 {
		r = r.vs("floor's CPU per message", e.base.floorCPU)
	}
	e.add(r.note("user and system CPU of the whole bench process (the embedded server, the runner, the fake model and the publisher) from the first publish until the last run ended, over %d events: %.2f of the machine's cores busy over %s; the floor's run kept %.2f busy. While the cores are the limit a rate follows the inverse of its CPU per event, so the runner reaches half the floor's rate only if this ratio is 2 or less; the model's side of each call (here the fake model, on the same cores) counts in it",
		total, span.cores(), span.wall.Round(time.Millisecond), e.base.floorCores))
}

// floorCPUNote says what CPU the floor's run took, when it was read.
func floorCPUNote(b baselines) string {
	if b.floorCPU == 0 {
		return ""
	}
	return fmt.Sprintf("; the process (server, consumers, publisher) used %.1f µs of CPU per message, %.2f cores busy", b.floorCPU, b.floorCores)
}
