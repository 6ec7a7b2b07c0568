package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/events"
	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
	"jetway/services/runner"
)

// GroupRunner is the distributed host event loop: latency, throughput,
// memory and failover of services/runner.
const GroupRunner = "runner"

// Names of the runner figures (the latency ones take the session count).
const (
	FigRunnerNoticeP50  = "runner job exit → notice in next request p50"
	FigRunnerNoticeP99  = "runner job exit → notice in next request p99"
	FigRunnerSustained1 = "runner sustained events/s, 1 runner"
	FigRunnerSustained3 = "runner sustained events/s, 3 runners"
	FigRunnerMemory     = "runner memory per idle session"
	FigRunnerFailover   = "runner SIGKILL → sessions running elsewhere"
	// FigRunnerLeaseOut is when the killed runner's lease ran out, counted
	// from the SIGKILL: the earliest any other runner may take over (its
	// last stored beat's stamp plus the lease the beat declared).
	FigRunnerLeaseOut = "runner SIGKILL → its lease out"
	// FigRunnerAfterLease is from the lease's end to the last session
	// running elsewhere: what the takeover itself costs (sweep, partition
	// move, recovery, the model call).
	FigRunnerAfterLease = "runner lease out → sessions running elsewhere"
)

// FigRunnerStart names the event → run start figure at n sessions.
func FigRunnerStart(pct string, n int) string {
	return fmt.Sprintf("runner event → run start %s @%d sessions", pct, n)
}

func init() {
	AllGroups = append(AllGroups, GroupRunner)
	measures[GroupRunner] = (*env).measureRunner
}

// warmBatch is how many sessions are started at once when a population is
// built: enough to go fast, few enough that the build is not itself a load
// test.
const warmBatch = 200

// noticeSessions is how many sessions the job-exit figure rotates over.
const noticeSessions = 20

// runnerBench holds what the runner figures share.
type runnerBench struct {
	e     *env
	front *modelFront
	model llm.Provider
	kv    jetstream.KeyValue
	// gate, when set, is what the wait_for_gate tool blocks on, so a run
	// is provably mid-tool when the bench publishes a job exit.
	gate atomic.Pointer[gate]
	// executed, when set, receives the moment each call of approved_call
	// starts: the approvals group's profile holds that tool for a person.
	executed atomic.Pointer[chan time.Time]
	// approvals offers approved_call (the approvals group only, so no
	// other figure's requests carry one more tool).
	approvals bool
}

type gate struct {
	entered, open chan struct{}
	once          sync.Once
}

func newGate() *gate { return &gate{entered: make(chan struct{}), open: make(chan struct{})} }

func (rb *runnerBench) tools(runner.SessionRef) []tool.Tool {
	var ts []tool.Tool
	if rb.approvals {
		ts = append(ts, rb.approvedCall())
	}
	return append(ts, tool.Func{Name: "wait_for_gate", Description: "waits for the bench", Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
		g := rb.gate.Load()
		if g == nil {
			return tool.Result{Content: "no gate"}, nil
		}
		g.once.Do(func() { close(g.entered) })
		select {
		case <-g.open:
			return tool.Result{Content: "gate opened"}, nil
		case <-ctx.Done():
			return tool.Result{}, ctx.Err()
		}
	}})
}

// startRunner runs an in-process runner on its own connection until the
// returned stop is called (a clean leave).
func (rb *runnerBench) startRunner(ctx context.Context, id string, model llm.Provider) (stop func(), err error) {
	nc, err := bus.Connect(ctx, bus.ConnConfig{URLs: []string{rb.e.url}, Name: "jetway-bench-" + id, InboxPrefix: benchRunnerInbox})
	if err != nil {
		return nil, fmt.Errorf("runner %s: connect: %w", id, err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r, err := runner.New(rctx, runner.Config{
		NC: nc, ID: id, Provider: model, Tools: rb.tools,
		// Idle sessions stay cached for the whole bench, so the memory
		// figure sees them (the worst case, before eviction).
		IdleEvict: time.Hour,
		Logger:    debugLog(id),
	})
	if err != nil {
		cancel()
		nc.Close()
		return nil, fmt.Errorf("runner %s: %w", id, err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(rb.e.patience()):
			rb.e.progress("runner %s did not stop within 30s", id)
		}
		nc.Close()
	}, nil
}

// publish sends one host event; async leaves the ack to PublishAsyncComplete.
func (e *env) publish(ctx context.Context, jobEvent bool, tenant, session string, p events.Payload, async bool) error {
	ev, err := events.New(tenant, session, "jetway/bench", p)
	if err != nil {
		return err
	}
	subj, err := events.EventsSubject(tenant, session)
	if jobEvent {
		subj, err = events.JobEventsSubject(tenant, session)
	}
	if err != nil {
		return err
	}
	msg, err := events.Encode(ctx, subj, ev)
	if err != nil {
		return err
	}
	if async {
		// A slow host is a result, not an error: wait for room.
		_, err = e.js.PublishMsgAsync(msg, jetstream.WithStallWait(e.patience()))
	} else {
		_, err = e.js.PublishMsg(ctx, msg)
	}
	if err != nil {
		return fmt.Errorf("publish to %s: %w", subj, err)
	}
	return nil
}

func (e *env) asyncDone(ctx context.Context) error {
	select {
	case <-e.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("async publishes not acked: %w", ctx.Err())
	}
}

// waitIdle waits until the session record says idle after at least runs
// runs: the actor has finished every step of its last run.
func (rb *runnerBench) waitIdle(ctx context.Context, tenant, session string, runs int) error {
	key := tenant + "." + session
	for {
		entry, err := rb.kv.Get(ctx, key)
		if err == nil {
			var rec runner.SessionRecord
			if json.Unmarshal(entry.Value(), &rec) == nil && rec.State == runner.StateIdle && rec.Runs >= runs {
				return nil
			}
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("session record %s: %w", key, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("session %s never went idle after %d runs: %w", key, runs, ctx.Err())
		case <-time.After(200 * time.Microsecond):
		}
	}
}

// newRunnerBench provisions jetway's streams and starts the fake model the
// runner figures share; done closes the model.
func (e *env) newRunnerBench(ctx context.Context) (rb *runnerBench, done func(), err error) {
	pctx, cancel := deadline(ctx, time.Minute)
	err = bus.Provision(pctx, e.js, bus.ProvisionConfig{})
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("provision: %w", err)
	}
	kv, err := e.js.KeyValue(ctx, bus.BucketSessions)
	if err != nil {
		return nil, nil, fmt.Errorf("sessions bucket: %w", err)
	}
	front, err := newModelFront(e.cfg.ModelLatency)
	if err != nil {
		return nil, nil, err
	}
	model, err := front.provider()
	if err != nil {
		front.close()
		return nil, nil, err
	}
	return &runnerBench{e: e, front: front, model: model, kv: kv}, front.close, nil
}

func (e *env) measureRunner(ctx context.Context) {
	rb, done, err := e.newRunnerBench(ctx)
	if err != nil {
		e.skip(FigRunnerStart("p99", 1), "ms", "≤ 5 ms", err)
		return
	}
	defer done()
	run := uid()

	r1 := "bench-r1-" + run
	stop, err := rb.startRunner(ctx, r1, rb.model)
	if err != nil {
		e.skip(FigRunnerStart("p99", 1), "ms", "≤ 5 ms", err)
		return
	}
	rb.latencyAndMemory(ctx, run)
	rb.notice(ctx, run)
	rb.sustained(ctx, FigRunnerSustained1, "s1-"+run, []string{r1})
	if kv, err := e.js.KeyValue(ctx, bus.BucketRunners); err != nil {
		e.skip(FigRunnerIdleMsgs, "msgs/s", "reported (the cost of P)", fmt.Errorf("runners bucket: %w", err))
	} else {
		e.idleCost(ctx, "jetway-bench-"+r1, heldBy(ctx, kv, r1))
	}
	stop()

	var stops []func()
	var ids []string
	for i := range 3 {
		id := fmt.Sprintf("bench-r3%d-%s", i+1, run)
		s, err := rb.startRunner(ctx, id, rb.model)
		if err != nil {
			e.skip(FigRunnerSustained3, "events/s", "≥ 25% of raw async publish", err)
			break
		}
		stops, ids = append(stops, s), append(ids, id)
	}
	if len(stops) == 3 {
		rb.sustained(ctx, FigRunnerSustained3, "s3-"+run, ids)
	}
	for _, s := range stops {
		s()
	}
	rb.balance(ctx, run)
	rb.failover(ctx, run)
}

// populate makes each of n sessions handle one event, warmBatch at a time,
// and returns once every run has ended.
func (rb *runnerBench) populate(ctx context.Context, w *runWatch, tenant string, from, to int) error {
	for start := from; start < to; start += warmBatch {
		end := min(start+warmBatch, to)
		for i := start; i < end; i++ {
			if err := rb.e.publish(ctx, false, tenant, sessionName(i), events.Input{Text: "hello"}, true); err != nil {
				return err
			}
		}
		wctx, cancel := deadline(ctx, 2*time.Minute)
		err := rb.e.asyncDone(wctx)
		if err == nil {
			err = w.wait(wctx, func(ended map[string]int) bool { return total(ended) >= end-from })
		}
		cancel()
		if err != nil {
			return fmt.Errorf("populate %s sessions %d–%d: %w", tenant, start, end, err)
		}
	}
	return nil
}

func sessionName(i int) string { return fmt.Sprintf("s%05d", i) }

// latencyAndMemory times host event → run start at each session count, then
// grows the population to Sizes.IdleSessions and weighs it.
func (rb *runnerBench) latencyAndMemory(ctx context.Context, run string) {
	e := rb.e
	const goal = "p99 ≤ 5 ms"
	var heap0 uint64
	grown := 0
	for i, n := range e.sizes.SessionCounts {
		tenant := fmt.Sprintf("lat%d-%s", n, run)
		w, err := watchRuns(e.url, tenant)
		if err != nil {
			e.skip(FigRunnerStart("p99", n), "ms", goal, err)
			continue
		}
		e.progress("runner: %d sessions, each handling one event", n)
		if err := rb.populate(ctx, w, tenant, 0, n); err != nil {
			w.stop()
			e.skip(FigRunnerStart("p99", n), "ms", goal, err)
			continue
		}
		e.progress("runner: %d events, one at a time, over %d sessions", e.sizes.Probes, n)
		s, calm, err := rb.probeStarts(ctx, tenant, n)
		w.stop()
		if err != nil {
			e.skip(FigRunnerStart("p99", n), "ms", goal, err)
			continue
		}
		p99 := s.pct(99)
		e.add(figure(FigRunnerStart("p50", n), "ms", s.pct(50)).vs("raw sync publish p50", e.base.syncP50).info("-").
			note("%d events, each published (sync) to an idle session and timed to its model request arriving at the local fake provider; each session's history grows by two messages per event (to %d messages at @%d)", len(s), 2*(1+(len(s)+n-1)/n), n))
		r := figure(FigRunnerStart("p99", n), "ms", p99).vs("raw sync publish p99", e.base.syncP99).goal(goal, p99 <= 5)
		if len(calm) > 0 && len(calm) < len(s) {
			r = r.note("%d of %d events saw a garbage collection begin in this process (server, runner and fake model) while they were under way; p50 / p99 of the %d that did not: %.2f / %.2f ms", len(s)-len(calm), len(s), len(calm), calm.pct(50), calm.pct(99))
		}
		e.add(r)
		if i == 0 {
			// The first population (one session) warmed the runner; weigh
			// from here.
			heap0 = liveHeap()
		} else {
			grown += n
		}
	}
	// Grow to IdleSessions and weigh.
	const memGoal = "≤ 16 KiB"
	tenant := "mem-" + run
	extra := e.sizes.IdleSessions - grown
	if extra > 0 {
		w, err := watchRuns(e.url, tenant)
		if err != nil {
			e.skip(FigRunnerMemory, "KiB", memGoal, err)
			return
		}
		e.progress("runner: %d more idle sessions for the memory figure", extra)
		err = rb.populate(ctx, w, tenant, 0, extra)
		w.stop()
		if err != nil {
			e.skip(FigRunnerMemory, "KiB", memGoal, err)
			return
		}
		grown += extra
	}
	if heap0 == 0 || grown == 0 {
		e.skip(FigRunnerMemory, "KiB", memGoal, errors.New("no session population was built"))
		return
	}
	heap1 := liveHeap()
	per := (float64(heap1) - float64(heap0)) / float64(grown) / 1024
	e.add(figure(FigRunnerMemory, "KiB", per).goal(memGoal, per <= 16).
		note("live heap growth over %d idle sessions (each handled at least once, all still cached) / %d; includes the embedded nats-server's per-subject state in this process, so it is an upper bound", grown, grown))
}

// liveHeap is the heap still in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// probeStarts publishes Sizes.Probes events one at a time, round robin over
// n idle sessions, and times each to its model request.
func (rb *runnerBench) probeStarts(ctx context.Context, tenant string, n int) (samples, samples, error) {
	runs := make([]int, n)
	for i := range runs {
		runs[i] = 1
	}
	var s, calm samples
	for k := range rb.e.sizes.Probes {
		i := k % n
		runs[i]++
		d, gc, err := rb.probe(ctx, tenant, sessionName(i), k, runs[i])
		if err != nil {
			return nil, nil, err
		}
		s = append(s, d)
		if !gc {
			calm = append(calm, d)
		}
	}
	return s, calm, nil
}

// probe publishes the k-th probe event to an idle session, times it to its
// model request, and waits until the session is idle again after runs
// runs. gc says whether a garbage collection began meanwhile.
func (rb *runnerBench) probe(ctx context.Context, tenant, session string, k, runs int) (d time.Duration, gc bool, err error) {
	e := rb.e
	tok := fmt.Sprintf("[start-%s-%d]", tenant, k)
	arrived := rb.front.expect(tok)
	gc0 := gcCycles()
	t0 := time.Now()
	if err := e.publish(ctx, false, tenant, session, events.Input{Text: "probe " + tok}, false); err != nil {
		rb.front.forget(tok)
		return 0, false, err
	}
	select {
	case t1 := <-arrived:
		d, gc = t1.Sub(t0), gcCycles() != gc0
	case <-time.After(e.patience()):
		rb.front.forget(tok)
		return 0, false, fmt.Errorf("event %d to %s reached no model request within %s", k, session, e.patience())
	case <-ctx.Done():
		return 0, false, ctx.Err()
	}
	wctx, cancel := deadline(ctx, e.patience())
	defer cancel()
	return d, gc, rb.waitIdle(wctx, tenant, session, runs)
}

// takeEveryPartition sends one event to a session of each work partition
// and waits for their runs to end, so the runners hold every partition.
func (rb *runnerBench) takeEveryPartition(ctx context.Context, tenant string) error {
	e := rb.e
	p, err := bus.Partitions(ctx, e.js)
	if err != nil {
		return err
	}
	w, err := watchRuns(e.url, tenant)
	if err != nil {
		return err
	}
	defer w.stop()
	sessions := onePerPartition(tenant, p)
	for _, session := range sessions {
		if err := e.publish(ctx, false, tenant, session, events.Input{Text: "warm"}, true); err != nil {
			return err
		}
	}
	wctx, cancel := deadline(ctx, 2*time.Minute)
	defer cancel()
	if err := e.asyncDone(wctx); err != nil {
		return err
	}
	return w.wait(wctx, func(ended map[string]int) bool { return total(ended) >= len(sessions) })
}

// onePerPartition names one session of tenant in each of p partitions.
func onePerPartition(tenant string, p int) []string {
	sessions := make([]string, p)
	for i, found := 0, 0; found < p; i++ {
		name := fmt.Sprintf("b%d", i)
		if n := bus.PartitionFor(tenant, name, p); sessions[n] == "" {
			sessions[n] = name
			found++
		}
	}
	return sessions
}

// runsOf is how many runs a session's record counts.
func (rb *runnerBench) runsOf(ctx context.Context, tenant, session string) (int, error) {
	entry, err := rb.kv.Get(ctx, tenant+"."+session)
	if err != nil {
		return 0, fmt.Errorf("session record %s.%s: %w", tenant, session, err)
	}
	var rec runner.SessionRecord
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		return 0, fmt.Errorf("session record %s.%s: %w", tenant, session, err)
	}
	return rec.Runs, nil
}

// gcCycles counts the garbage collections this process has begun. The
// bench's server, runner and fake model share the process, so a cycle
// begun while a probe is under way slowed that probe, whoever's garbage
// started it.
func gcCycles() uint64 {
	m := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(m)
	if m[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return m[0].Value.Uint64()
}

// notice times a job exit published while a run is mid-tool to the model
// request that carries its notice.
func (rb *runnerBench) notice(ctx context.Context, run string) {
	e := rb.e
	const goal = "p99 ≤ 10 ms"
	// Rotate over a few sessions so that no history grows long: a long
	// history is its own cost, which the @1 session figure already shows.
	tenant, sessions := "notice-"+run, noticeSessions
	n := max(10, e.sizes.Probes)
	e.progress("runner: %d job exits while a run is mid-tool, over %d sessions", n, sessions)
	defer rb.gate.Store(nil)
	var s samples
	for k := range n {
		session := sessionName(k % sessions)
		g := newGate()
		rb.gate.Store(g)
		rb.front.fake.Enqueue(
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: fmt.Sprintf("toolu_%d", k), Name: "wait_for_gate", Input: `{}`}}},
			llmtest.Reply{Text: "noted"},
		)
		if err := e.publish(ctx, false, tenant, session, events.Input{Text: fmt.Sprintf("build %d in the background", k)}, false); err != nil {
			e.skip(FigRunnerNoticeP99, "ms", goal, err)
			return
		}
		select {
		case <-g.entered:
		case <-time.After(rb.e.patience()):
			e.skip(FigRunnerNoticeP99, "ms", goal, fmt.Errorf("run %d never reached its tool call", k))
			return
		case <-ctx.Done():
			return
		}
		tok := fmt.Sprintf("[notice-%s-%d]", run, k)
		arrived := rb.front.expect(tok)
		t0 := time.Now()
		err := e.publish(ctx, true, tenant, session, events.JobExited{ID: uint64(k + 1), Program: "make", ExitStatus: 0, RunningForMS: 1500, Tail: "build ok " + tok, Status: events.StatusExited}, false)
		close(g.open)
		if err != nil {
			rb.front.forget(tok)
			e.skip(FigRunnerNoticeP99, "ms", goal, err)
			return
		}
		select {
		case t1 := <-arrived:
			s = append(s, t1.Sub(t0))
		case <-time.After(rb.e.patience()):
			rb.front.forget(tok)
			e.skip(FigRunnerNoticeP99, "ms", goal, fmt.Errorf("job exit %d reached no model request within %s", k, e.patience()))
			return
		case <-ctx.Done():
			return
		}
		wctx, cancel := deadline(ctx, rb.e.patience())
		err = rb.waitIdle(wctx, tenant, session, k/sessions+1)
		cancel()
		if err != nil {
			e.skip(FigRunnerNoticeP99, "ms", goal, err)
			return
		}
	}
	p99 := s.pct(99)
	e.add(figure(FigRunnerNoticeP50, "ms", s.pct(50)).vs("raw sync publish p50", e.base.syncP50).info("-").
		note("%d io.jetway.job.exited events on jetway.jobevents.… over %d sessions, each while a run was inside a tool call; the tool returns as the event is published; timed to the model request carrying the notice", len(s), sessions))
	e.add(figure(FigRunnerNoticeP99, "ms", p99).vs("raw sync publish p99", e.base.syncP99).goal(goal, p99 <= 10))
}

// sustainedGoal is the sustained figure's goal, as a share of raw async
// publish.
const sustainedGoal = 0.25

// sustained publishes Sizes.SustainedEvents events as fast as the client
// allows over Sizes.SustainedSessions sessions and reports how many per
// second reached the model, from the first publish to the last arrival.
func (rb *runnerBench) sustained(ctx context.Context, name, tenant string, ids []string) {
	e := rb.e
	const goal = "≥ 25% of raw async publish"
	if len(ids) > 1 {
		if _, err := rb.waitBalanced(ctx, ids); err != nil {
			e.skip(name, "events/s", goal, err)
			return
		}
	}
	total, sessions := e.sizes.SustainedEvents, e.sizes.SustainedSessions
	prefix := "[sev-" + tenant + "-"
	set := newTokenSet(prefix, total)
	w, err := watchRuns(e.url, tenant)
	if err != nil {
		e.skip(name, "events/s", goal, err)
		return
	}
	defer w.stop()
	rb.front.setScan(set.scan)
	defer rb.front.setScan(nil)
	e.progress("runner: %d events over %d sessions as fast as they go, %d runner(s)", total, sessions, len(ids))
	conns := make([]string, len(ids))
	for i, id := range ids {
		conns[i] = "jetway-bench-" + id
	}
	msgsBefore, msgsErr := e.connMsgs(conns...)
	clock := startCPU()
	t0 := time.Now()
	for k := range total {
		if err := e.publish(ctx, false, tenant, sessionName(k%sessions), events.Input{Text: fmt.Sprintf("event %s%d]", prefix, k)}, true); err != nil {
			e.skip(name, "events/s", goal, err)
			return
		}
	}
	wctx, cancel := deadline(ctx, 2*e.patience())
	defer cancel()
	if err := e.asyncDone(wctx); err != nil {
		e.skip(name, "events/s", goal, err)
		return
	}
	select {
	case <-set.done:
	case <-wctx.Done():
		rb.front.mu.Lock()
		got := len(set.seen)
		rb.front.mu.Unlock()
		e.skip(name, "events/s", goal, fmt.Errorf("%d of %d events reached the model: %w", got, total, wctx.Err()))
		return
	}
	rb.front.mu.Lock()
	elapsed := set.last.Sub(t0)
	rb.front.mu.Unlock()
	v := rate(total, elapsed)
	r := figure(name, "events/s", v).vs("raw async publish", e.base.asyncRate)
	ceiling := ""
	if e.base.floorRate > 0 && e.base.asyncRate > 0 {
		floor := e.base.floorRate / e.base.asyncRate
		ceiling = fmt.Sprintf("; the work shard alone (mapped publish, pinned pulls, acks, the log's copy), with no runner work, ran at %.0f msgs/s (%.0f%% of raw async publish) in this run, of which the runner reached %.0f%%",
			e.base.floorRate, 100*floor, 100*v/e.base.floorRate)
		if floor < sustainedGoal {
			// Said from this run's own figures, not assumed: on a faster
			// machine or a real cluster the floor may clear the goal.
			ceiling += fmt.Sprintf("; that floor is itself below the goal's %.0f%%, so no runner on this transport meets the goal on this machine", 100*sustainedGoal)
		}
	}
	e.add(r.goal(goal, r.Ratio != nil && *r.Ratio >= sustainedGoal).
		note("%d events over %d sessions, %s from the first publish to the last event in a model request; events for a busy session ride in as notices%s", total, sessions, elapsed.Round(time.Millisecond), ceiling))
	// Let the runs finish before the next figure.
	quietErr := w.quiet(wctx, sessions)
	span, cpuErr := clock.stop()
	if len(ids) == 1 {
		e.cpuPerEvent(span, errors.Join(quietErr, cpuErr), total)
		e.msgsPerEvent(conns, msgsBefore, msgsErr, total)
		rb.tapped(ctx, tenant, ids)
		return
	}
	e.fleetMsgsPerEvent(conns, msgsBefore, msgsErr, total)
}

// FigRunnerFleetMsgsPerEvent names the messages of several runners'
// connections together per event: a message each runner receives for
// every event, whoever serves it, shows here as one more per runner.
const FigRunnerFleetMsgsPerEvent = "runner messages per event, all runners' connections together, 3 runners sustained"

// fleetMsgsPerEvent reports the messages every runner's connection sent
// and received over a sustained run, per event, beside the one runner's.
func (e *env) fleetMsgsPerEvent(conns []string, before int64, err error, total int) {
	const goal = "about the one runner's (no per-event message to every runner)"
	after, err2 := e.connMsgs(conns...)
	if err = errors.Join(err, err2); err != nil {
		e.skip(FigRunnerFleetMsgsPerEvent, "msgs/event", goal, err)
		return
	}
	v := float64(after-before) / float64(total)
	r := figure(FigRunnerFleetMsgsPerEvent, "msgs/event", v).info(goal)
	if one, ok := e.measured(FigRunnerMsgsPerEvent); ok {
		r = r.vs("one runner's msgs/event", one)
	}
	e.add(r.note("in and out on the %d runners' connections together, from the server's connection stats before the first publish and after the last run ended (%d events); a run's claim and end reach only the runner watching its partition, so this stays near the one runner's figure rather than growing by the runners' count", len(conns), total))
}

// msgsPerEvent reports the messages the runner's connection sent and
// received over a sustained run, per event, beside the floor consumers'.
func (e *env) msgsPerEvent(conns []string, before int64, err error, total int) {
	goal := fmt.Sprintf("≤ %.1f", msgsGoal)
	after, err2 := e.connMsgs(conns...)
	if err = errors.Join(err, err2); err != nil {
		e.skip(FigRunnerMsgsPerEvent, "msgs/event", goal, err)
		return
	}
	v := float64(after-before) / float64(total)
	r := figure(FigRunnerMsgsPerEvent, "msgs/event", v)
	if e.base.floorMsgs > 0 {
		r = r.vs("floor consumers' msgs/event", e.base.floorMsgs)
	}
	e.add(r.goal(goal, v <= msgsGoal).note("in and out on the runner's one connection, from the server's connection stats before the first publish and after the last run ended (%d events; heartbeats, records, acks, in-progress words, transcript and output publishes all count); the floor's consumers needed %.2f per message", total, e.base.floorMsgs))
}

// waitBalanced drives traffic onto every work partition until the runners
// named in ids each hold a share of them (at least one, at most ceil(P/R),
// all P held), as their heartbeats in the runners bucket say. A
// partition is only pinned once it has traffic, hence the events.
func (rb *runnerBench) waitBalanced(ctx context.Context, ids []string) (map[string][]int, error) {
	e := rb.e
	p, err := bus.Partitions(ctx, e.js)
	if err != nil {
		return nil, err
	}
	kv, err := e.js.KeyValue(ctx, bus.BucketRunners)
	if err != nil {
		return nil, fmt.Errorf("runners bucket: %w", err)
	}
	tenant := "bal-" + uid()
	sessions := onePerPartition(tenant, p)
	w, err := watchRuns(e.url, tenant)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	share := (p + len(ids) - 1) / len(ids)
	wctx, cancel := deadline(ctx, 3*e.patience()) // a new runner waits 5 s for the count to settle, then takes a partition every half second
	defer cancel()
	sent := 0
	for {
		for _, session := range sessions {
			if err := e.publish(wctx, false, tenant, session, events.Input{Text: "balance"}, true); err != nil {
				return nil, err
			}
		}
		sent += len(sessions)
		if err := e.asyncDone(wctx); err != nil {
			return nil, err
		}
		// Let the round land, but do not insist: an event caught in a
		// partition move may take a while, and balance is what is checked.
		rctx, rcancel := deadline(wctx, time.Second)
		_ = w.wait(rctx, func(ended map[string]int) bool { return total(ended) >= sent })
		rcancel()
		held := map[string][]int{}
		ok, sum := true, 0
		for _, id := range ids {
			var beat struct {
				Partitions []int `json:"partitions"`
			}
			entry, err := kv.Get(wctx, id)
			if err == nil {
				err = json.Unmarshal(entry.Value(), &beat)
			}
			held[id] = beat.Partitions
			sum += len(beat.Partitions)
			if err != nil || len(beat.Partitions) == 0 || len(beat.Partitions) > share {
				ok = false
			}
		}
		if ok && sum >= p {
			return held, nil
		}
		select {
		case <-wctx.Done():
			return held, fmt.Errorf("partitions not balanced over %d runners: %v: %w", len(ids), held, wctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// debugLog is a runner's logger: silent, unless JETWAY_BENCH_DEBUG is set,
// when a figure that misses its goal needs the runners' own account.
func debugLog(id string) zerolog.Logger {
	if os.Getenv("JETWAY_BENCH_DEBUG") == "" {
		return zerolog.Nop()
	}
	// Milliseconds: a takeover and a failover are a second or less.
	zerolog.TimeFieldFormat = "15:04:05.000"
	return zerolog.New(os.Stderr).Level(zerolog.InfoLevel).With().Timestamp().Str("runner", id).Logger()
}

// waitLive waits until a runner's heartbeat is in the runners bucket.
func (rb *runnerBench) waitLive(ctx context.Context, id string) error {
	kv, err := rb.e.js.KeyValue(ctx, bus.BucketRunners)
	if err != nil {
		return fmt.Errorf("runners bucket: %w", err)
	}
	wctx, cancel := deadline(ctx, rb.e.patience())
	defer cancel()
	for {
		if _, err := kv.Get(wctx, id); err == nil {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("runner %s never announced itself: %w", id, wctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
