package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"jetway/pkg/bus"
	"jetway/services/jobs/client"
	"jetway/services/jobs/jobsapi"
)

// workerFigures measures a real `jetway jobs-worker` process over NATS:
// job start latency through the client, output capture, and the process's
// peak RSS while a task writes Sizes.CaptureBytes.
func (e *env) workerFigures(ctx context.Context, dir string, bare samples, catBefore float64) {
	skipAll := func(err error) {
		e.skip(FigJobStartNATSP99, "ms", startGoalText, err)
		e.skip(FigCaptureWorker, "MB/s", captureGoalText, err)
		e.skip(FigWorkerPeakRSS, "MiB", peakRSSGoalText, err)
		e.skip(FigWorkerPeakAnon, "MiB", peakAnonGoalText, err)
		e.skip(FigJobRunNATSP99, "ms", runGoalText, err)
	}
	if e.cfg.JetwayBinary == "" {
		skipAll(errNoBinary)
		return
	}
	if len(bare) == 0 || !e.base.measured {
		skipAll(errors.New("no bare os/exec or raw NATS baseline in this run"))
		return
	}
	pctx, cancel := deadline(ctx, time.Minute)
	err := bus.Provision(pctx, e.js, bus.ProvisionConfig{})
	cancel()
	if err != nil {
		skipAll(fmt.Errorf("provision: %w", err))
		return
	}

	n := e.sizes.CaptureBytes
	id := "bench-jobs-" + uid()
	root := filepath.Join(dir, "worker")
	e.progress("jobs: starting a `jetway jobs-worker` process")
	bin, err := installed(e.cfg.JetwayBinary, dir)
	if err != nil {
		skipAll(err)
		return
	}
	// Scratch space in the bench's directory, which goes as a whole.
	defer func() { _ = os.Remove(bin) }()
	cmd := exec.Command(bin, "jobs-worker", "--nats", e.url, "--id", id, "--root", root,
		"--max-output", strconv.FormatInt(2*n, 10), "--log-format", "json", "--log-level", "warn")
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		skipAll(fmt.Errorf("start jobs-worker: %w", err))
		return
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	mem := sampleMem(cmd.Process.Pid, 20*time.Millisecond)
	// Stops the sampler on an early return; the figure's own path reads
	// the peak (and its error) before this runs.
	defer func() { _, _ = mem.stop() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	fail := func(err error) {
		select {
		case <-exited:
			err = fmt.Errorf("%w (the worker exited: %s)", err, oneLine(out.String()))
		default:
		}
		skipAll(err)
	}

	c, err := client.New(client.Config{NC: e.nc})
	if err != nil {
		fail(err)
		return
	}
	wctx, cancel := deadline(ctx, e.patience())
	for {
		ws, err := c.Workers(wctx)
		if err == nil && slices.Contains(ws, id) {
			break
		}
		if wctx.Err() != nil {
			cancel()
			fail(fmt.Errorf("worker %s never answered discovery within %s", id, e.patience()))
			return
		}
	}
	cancel()
	// A session bound to this worker (on a shared cluster another worker
	// may be chosen: try other names).
	tenant, session := "jobs-"+uid(), ""
	for i := range 20 {
		s := fmt.Sprintf("s%d", i)
		w, err := c.Worker(ctx, tenant, s)
		if err != nil {
			fail(fmt.Errorf("bind a session: %w", err))
			return
		}
		if w == id {
			session = s
			break
		}
	}
	if session == "" {
		fail(errors.New("no session could be bound to the bench's worker"))
		return
	}
	sr := jobsapi.SessionRequest{Tenant: tenant, Session: session}

	// Start latency: the client's Start returning the job, one at a time.
	// Beside each, a bare start and a round trip to the worker process
	// itself (its micro PING, which does no work): the "one NATS round
	// trip" of the goal. The raw request/reply baseline has its responder
	// in this process, whose threads are awake; a request to another
	// process that sleeps between calls costs 0.25–0.3 ms here, not 0.05.
	ping, err := workerPing(ctx, e.nc, id)
	if err != nil {
		fail(err)
		return
	}
	starts := e.sizes.TaskStarts
	e.progress("jobs: %d job starts over NATS", starts)
	var s, rtt samples
	bare = nil // taken here again, each right before its sample (bareStart)
	for i := range starts + starts/10 {
		b, err := bareStart(ctx)
		if err != nil {
			fail(err)
			return
		}
		t0 := time.Now()
		if _, err := e.nc.RequestWithContext(ctx, ping, nil); err != nil {
			fail(fmt.Errorf("ping the worker: %w", err))
			return
		}
		r := time.Since(t0)
		t0 = time.Now()
		resp, err := c.Start(ctx, jobsapi.StartRequest{SessionRequest: sr, Command: "true"})
		d := time.Since(t0)
		if err != nil {
			fail(fmt.Errorf("start: %w", err))
			return
		}
		if _, err := c.Status(ctx, tenant, session, resp.Job.ID, e.patience()); err != nil {
			fail(fmt.Errorf("status: %w", err))
			return
		}
		if i >= starts/10 {
			bare, rtt, s = append(bare, b), append(rtt, r), append(s, d)
		}
	}
	p50, p99 := s.pct(50), s.pct(99)
	lim50, lim99 := 2*bare.pct(50)+rtt.pct(50), 2*bare.pct(99)+rtt.pct(99)
	raw50 := 2*bare.pct(50) + e.base.rttP50
	e.add(figure(FigJobStartNATSP50, "ms", p50).vs("bare os/exec start p50", bare.pct(50)).
		goal(fmt.Sprintf("%s (≤ %s ms)", startGoalText, num(lim50)), p50 <= lim50).
		note("%d client Start calls of `true` (sh -c) answered by a jetway jobs-worker process, each right after a bare start and a round trip to the worker (micro PING, p50 %s ms, p99 %s ms); limit = 2 × bare + that round trip; with the in-process raw request/reply (%s ms) instead, the p50 limit would be %s ms",
			len(s), num(rtt.pct(50)), num(rtt.pct(99)), num(e.base.rttP50), num(raw50)))
	e.add(figure(FigJobStartNATSP99, "ms", p99).vs("bare os/exec start p99", bare.pct(99)).
		goal(fmt.Sprintf("%s (≤ %s ms)", startGoalText, num(lim99)), p99 <= lim99))

	// Confined start: a foreground run of `true`, answered once the
	// command ran and ended, so the helper, the view, Landlock and seccomp
	// are all inside the figure; beside each, a bare run of the same
	// `sh -c true` and a round trip to the worker.
	e.progress("jobs: %d confined runs over NATS", starts)
	var runs, bareRuns, runRTT samples
	for i := range starts + starts/10 {
		b, err := bareRun(ctx)
		if err != nil {
			fail(err)
			return
		}
		t0 := time.Now()
		if _, err := e.nc.RequestWithContext(ctx, ping, nil); err != nil {
			fail(fmt.Errorf("ping the worker: %w", err))
			return
		}
		r := time.Since(t0)
		t0 = time.Now()
		resp, err := c.Run(ctx, jobsapi.StartRequest{SessionRequest: sr, Command: "true", TimeoutMS: 60_000})
		d := time.Since(t0)
		if err != nil || !resp.Ended || resp.Job.ExitCode != 0 {
			fail(fmt.Errorf("confined run: %+v, %v", resp.Job, err))
			return
		}
		if i >= starts/10 {
			bareRuns, runRTT, runs = append(bareRuns, b), append(runRTT, r), append(runs, d)
		}
	}
	for _, q := range []struct {
		name string
		pct  float64
	}{{FigJobRunNATSP50, 50}, {FigJobRunNATSP99, 99}} {
		v, base := runs.pct(q.pct), bareRuns.pct(q.pct)+runRTT.pct(q.pct)
		f := figure(q.name, "ms", v).vs(fmt.Sprintf("bare run + round trip p%.0f", q.pct), base).
			goal(fmt.Sprintf("%s (≤ %s ms)", runGoalText, num(2*base)), v <= 2*base)
		if q.pct == 50 {
			f = f.note("%d client Run calls of `true`, each answered after the command ran confined (the helper from its memfd, the mount namespace view, Landlock, seccomp, the default limits) and ended; baseline: `sh -c true` run by exec.Cmd (bare run p50 %s ms, p99 %s ms) plus a micro PING of the worker (p50 %s ms, p99 %s ms), each taken right before its sample",
				len(runs), num(bareRuns.pct(50)), num(bareRuns.pct(99)), num(runRTT.pct(50)), num(runRTT.pct(99)))
		}
		e.add(f)
	}

	// Capture and memory: one task writes n bytes of lines.
	e.progress("jobs: a task writes %s through the worker", e.captureSize())
	t0 := time.Now()
	resp, err := c.Start(ctx, jobsapi.StartRequest{SessionRequest: sr, Command: captureCommand(n)})
	if err != nil {
		fail(fmt.Errorf("start capture: %w", err))
		return
	}
	var job jobsapi.Job
	for {
		wr, err := c.Status(ctx, tenant, session, resp.Job.ID, 5*time.Minute)
		if err != nil {
			fail(fmt.Errorf("wait for capture: %w", err))
			return
		}
		if wr.Outcome == "ended" {
			job = wr.Job
			break
		}
		if time.Since(t0) > 20*time.Minute {
			fail(errors.New("capture task still running after 20 minutes"))
			return
		}
	}
	elapsed := time.Since(t0)
	split, splitErr := mem.stop()
	huge := filePmdMapped(cmd.Process.Pid)
	peak, err := vmHWM(cmd.Process.Pid)
	if err != nil {
		e.skip(FigWorkerPeakRSS, "MiB", peakRSSGoalText, err)
	}
	size := e.captureSize()
	if e.cfg.Quick {
		size += " (--quick; the full run writes 1 GB)"
	}
	if job.Bytes < n*9/10 {
		e.skip(FigCaptureWorker, "MB/s", captureGoalText, fmt.Errorf("the worker captured %d of %d bytes (%s)", job.Bytes, n, job.Line))
	} else {
		v := float64(n) / 1e6 / elapsed.Seconds()
		r := figure(FigCaptureWorker, "MB/s", v).vs("cat >file, mean of before and after", bracket(ctx, dir, n, catBefore))
		e.add(r.goal(captureGoalText, r.Ratio != nil && *r.Ratio >= 0.5).
			note("%s through a jetway jobs-worker process, timed from Start to the end seen by Status; cat >file timed right before the first capture figure and right after this one", size))
	}
	if splitErr == nil {
		anon := float64(split.Anon) / (1 << 20)
		e.add(figure(FigWorkerPeakAnon, "MiB", anon).goal(peakAnonGoalText, anon <= 24).
			note("RssAnon (heap, stacks: the worker's private memory) in the /proc/PID/status reading with the highest VmRSS, sampled every 20 ms over the worker's life; RssFile beside it %s MiB (pages of the jetway binary)", num(float64(split.File)/(1<<20))))
	} else {
		e.skip(FigWorkerPeakAnon, "MiB", peakAnonGoalText, splitErr)
	}
	if err == nil {
		mib := float64(peak) / (1 << 20)
		e.add(figure(FigWorkerPeakRSS, "MiB", mib).goal(peakRSSGoalText, mib < 64).
			note("VmHWM of the jetway jobs-worker process (its whole life: start, %d job starts, then a task writing %s), run from a copy of the binary as a deployed worker is; %s; %s",
				starts+starts/10, size, split.describe(splitErr), huge))
	}
	_ = os.RemoveAll(root)
}

// workerPing returns the subject that pings one jobs worker process: its
// micro service instance, found by the worker id in its metadata (on a
// shared cluster other workers answer the discovery too).
func workerPing(ctx context.Context, nc *nats.Conn, worker string) (string, error) {
	all, err := micro.ControlSubject(micro.PingVerb, jobsapi.ServiceName, "")
	if err != nil {
		return "", err
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return "", fmt.Errorf("ping jobs workers: %w", err)
	}
	// A one-off inbox: a failed unsubscribe leaves a subscription nothing
	// publishes to, gone with the connection.
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(all, inbox, nil); err != nil {
		return "", fmt.Errorf("ping jobs workers: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return "", fmt.Errorf("worker %s did not answer a ping: %w", worker, err)
		}
		var p micro.Ping
		if json.Unmarshal(m.Data, &p) == nil && p.Metadata[jobsapi.MetadataWorker] == worker {
			return micro.ControlSubject(micro.PingVerb, jobsapi.ServiceName, p.ID)
		}
	}
}

// installed copies the jetway binary into dir, and the worker runs from
// the copy. A binary straight from the linker can sit in page cache as
// 2 MiB folios, which the kernel maps whole on first touch: the same worker
// then read 58–78 MiB instead of 47–49, depending on the build. A deployed
// binary (copied into an image, or read cold from disk) is held in small
// pages, and the figure is about the worker, not about the last link.
func installed(binary, dir string) (string, error) {
	src, err := os.Open(binary)
	if err != nil {
		return "", fmt.Errorf("copy the jetway binary: %w", err)
	}
	defer func() { _ = src.Close() }() // read only: a failed close loses nothing
	path := filepath.Join(dir, "jetway-installed")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return "", fmt.Errorf("copy the jetway binary: %w", err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close() // the copy error is the one to report
		return "", fmt.Errorf("copy the jetway binary to %s: %w", path, err)
	}
	if err := dst.Close(); err != nil {
		return "", fmt.Errorf("copy the jetway binary to %s: %w", path, err)
	}
	return path, nil
}

// filePmdMapped says how much of the process's file-backed memory is
// mapped as huge pages (FilePmdMapped in /proc/PID/smaps_rollup): not zero
// means whole page-cache folios inflated RssFile.
func filePmdMapped(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return "FilePmdMapped unknown: " + err.Error()
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "FilePmdMapped:"); ok {
			return "FilePmdMapped " + strings.Join(strings.Fields(rest), " ") + " at the end"
		}
	}
	return "FilePmdMapped not in smaps_rollup"
}

// memSplit is one reading of a process's resident memory from
// /proc/PID/status, in bytes. The split matters because the parts move for
// different reasons: RssAnon is the worker's heap and stacks, RssFile is
// mostly pages of its own executable mapped at start, whose count depends
// on the binary's size and on how the kernel holds the file in page cache.
type memSplit struct {
	RSS, Anon, File, Shmem int64
}

// readMemSplit reads the VmRSS line and its three parts.
func readMemSplit(pid int) (memSplit, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memSplit{}, err
	}
	defer func() { _ = f.Close() }() // read only: a failed close loses nothing
	var m memSplit
	fields := map[string]*int64{"VmRSS:": &m.RSS, "RssAnon:": &m.Anon, "RssFile:": &m.File, "RssShmem:": &m.Shmem}
	seen := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), "\t")
		dst := fields[name]
		if !ok || dst == nil {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil {
			return memSplit{}, fmt.Errorf("%s %q in /proc/%d/status: %w", name, rest, pid, err)
		}
		*dst = kb << 10
		seen++
	}
	if err := sc.Err(); err != nil {
		return memSplit{}, fmt.Errorf("read /proc/%d/status: %w", pid, err)
	}
	if seen != len(fields) {
		return memSplit{}, fmt.Errorf("/proc/%d/status lacks VmRSS, RssAnon, RssFile or RssShmem", pid)
	}
	return m, nil
}

// describe is the split for a figure's note, or why there is none.
func (m memSplit) describe(err error) string {
	if err != nil {
		return fmt.Sprintf("no RSS split: %v", err)
	}
	mib := func(b int64) string { return num(float64(b) / (1 << 20)) }
	s := fmt.Sprintf("at the highest sampled VmRSS (%s MiB): RssAnon %s MiB, RssFile %s MiB", mib(m.RSS), mib(m.Anon), mib(m.File))
	if m.Shmem > 0 {
		s += fmt.Sprintf(", RssShmem %s MiB", mib(m.Shmem))
	}
	return s
}

// memSampler polls a process's status and keeps the reading with the
// highest VmRSS, since VmHWM alone does not say which part peaked.
type memSampler struct {
	quit chan struct{}
	done chan struct{}
	once sync.Once

	peak memSplit
	err  error // the last failed read, kept only while no read has succeeded
}

// sampleMem starts polling pid every interval until stop.
func sampleMem(pid int, every time.Duration) *memSampler {
	s := &memSampler{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s.sample(pid)
			select {
			case <-s.quit:
				s.sample(pid)
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *memSampler) sample(pid int) {
	m, err := readMemSplit(pid)
	switch {
	case err != nil:
		if s.peak.RSS == 0 {
			s.err = err
		}
	case m.RSS > s.peak.RSS:
		s.peak, s.err = m, nil
	}
}

// stop ends the polling (taking one last reading) and returns the reading
// at the highest VmRSS; a second call returns the same.
func (s *memSampler) stop() (memSplit, error) {
	s.once.Do(func() { close(s.quit) })
	<-s.done
	if s.peak.RSS == 0 && s.err == nil {
		return memSplit{}, errors.New("no reading of the process's status")
	}
	return s.peak, s.err
}
