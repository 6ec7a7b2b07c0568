package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/invariant"
	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
	"jetway/services/runner"
)

var (
	flagDuration = flag.Duration("chaos.duration", 0, "how long faults are injected (env CHAOS_DURATION; default: the short mode)")
	flagSeed     = flag.Uint64("chaos.seed", 0, "seed of the fault and event schedule (env CHAOS_SEED; default: from the clock)")
)

// Short mode: light enough for `make test` on two shared cores, and the
// whole test, quiescence included, stays under shortCap.
const (
	shortDuration = 50 * time.Second
	shortCap      = 3 * time.Minute
)

// shardsLedBy says which work shards nd leads, for the fault's log line.
func shardsLedBy(cl *bustest.Cluster, nd *bustest.Node) string {
	var led []string
	for k := range workShards {
		if cl.StreamLeader(bus.WorkStream(k)) == nd {
			led = append(led, bus.WorkStream(k))
		}
	}
	if len(led) == 0 {
		return ""
	}
	return " (leader of " + strings.Join(led, ", ") + ")"
}

// workPartitions is how many partitions the suite's work shards have,
// and workShards how many shards: one per node, so a node's fault takes
// one shard's leader.
const (
	workPartitions = 6
	workShards     = 3
)

// plan is what one chaos run does: how long, how big, and the seed every
// random choice comes from.
type plan struct {
	seed     uint64
	duration time.Duration
	long     bool // an explicit duration: sized for `make chaos`
	runners  int
	sessions int
	// eventGap and faultGap bound the random pauses between events and
	// between faults.
	eventGap [2]time.Duration
	faultGap [2]time.Duration
	// quiesce bounds the wait for every event to land after the faults.
	quiesce time.Duration
}

func planFromEnv(t *testing.T) plan {
	t.Helper()
	p := plan{
		duration: shortDuration,
		runners:  3,
		sessions: 8,
		eventGap: [2]time.Duration{60 * time.Millisecond, 240 * time.Millisecond},
		faultGap: [2]time.Duration{2 * time.Second, 6 * time.Second},
		quiesce:  90 * time.Second,
	}
	if *flagDuration > 0 {
		p.duration, p.long = *flagDuration, true
	} else if v := os.Getenv("CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("CHAOS_DURATION=%q: want a positive Go duration such as 10m", v)
		}
		p.duration, p.long = d, true
	}
	if p.long {
		p.sessions = 16
		p.eventGap = [2]time.Duration{100 * time.Millisecond, 400 * time.Millisecond}
		p.faultGap = [2]time.Duration{3 * time.Second, 10 * time.Second}
		p.quiesce = 3 * time.Minute
	}
	p.seed = *flagSeed
	if v := os.Getenv("CHAOS_SEED"); p.seed == 0 && v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", v, err)
		}
		p.seed = s
	}
	if p.seed == 0 {
		p.seed = uint64(time.Now().UnixNano())
	}
	return p
}

// between picks a duration in [r[0], r[1]).
func between(rng *rand.Rand, r [2]time.Duration) time.Duration {
	return r[0] + time.Duration(rng.Int64N(int64(r[1]-r[0])))
}

// pause waits d or until ctx ends: pacing, not synchronisation.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// tally counts what the run did, for its summary.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *tally) add(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[what]++
}

func (c *tally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var keys []string
	for k := range c.n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, c.n[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// publisher sends input events to random sessions, one at a time, and
// keeps the ones JetStream acknowledged, per session in publish order. A
// publish that fails (a node is down) is retried with the same CloudEvents
// id; if both tries were stored, the runner delivers the id once (it is
// already in the session's transcript).
type publisher struct {
	js       jetstream.JetStream
	rng      *rand.Rand
	sessions []invariant.Session
	// delegate: about one input in five asks for a sub-agent (the
	// scripted model starts one).
	delegate bool

	mu       sync.Mutex
	accepted map[invariant.Session][]string
	total    int
	retries  int
	given    int // publishes abandoned at the deadline (not accepted)
}

func (p *publisher) run(ctx context.Context, gap [2]time.Duration, retryUntil time.Time) error {
	for n := 0; ctx.Err() == nil; n++ {
		s := p.sessions[p.rng.IntN(len(p.sessions))]
		text := fmt.Sprintf("%s message %d", s.Session, n)
		if p.delegate && p.rng.IntN(5) == 0 {
			text = fmt.Sprintf("%s delegate %d", s.Session, n)
		}
		ev, err := events.New(s.Tenant, s.Session, "chaos", events.Input{Text: text})
		if err != nil {
			return fmt.Errorf("new event: %w", err)
		}
		subj, err := events.EventsSubject(s.Tenant, s.Session)
		if err != nil {
			return err
		}
		msg, err := events.Encode(context.Background(), subj, ev)
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		for {
			pctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err = p.js.PublishMsg(pctx, msg)
			cancel()
			if err == nil || time.Now().After(retryUntil) {
				break
			}
			p.mu.Lock()
			p.retries++
			p.mu.Unlock()
			pause(context.Background(), 100*time.Millisecond)
		}
		p.mu.Lock()
		if err == nil {
			p.accepted[s] = append(p.accepted[s], ev.ID())
			p.total++
		} else {
			p.given++
		}
		p.mu.Unlock()
		pause(ctx, between(p.rng, gap))
	}
	return nil
}

func (p *publisher) snapshot() (map[invariant.Session][]string, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[invariant.Session][]string, len(p.accepted))
	for s, ids := range p.accepted {
		out[s] = append([]string(nil), ids...)
	}
	return out, p.total
}

// Fault kinds.
const (
	faultRunnerKill    = "runner SIGKILL"
	faultRunnerRestart = "runner graceful restart"
	faultNodeRestart   = "NATS node stop+restart"
	faultWorkerKill    = "jobs worker SIGKILL"
	faultRunnerPause   = "runner SIGSTOP+SIGCONT"
	faultRunnerCut     = "runner link blackholed"
	faultWorkerPause   = "jobs worker SIGSTOP+SIGCONT"
	faultNodeSplit     = "NATS node partitioned"
)

// chaosSession finds the session a model request is for: every input the
// publisher sends names its session, and a request carries its session's
// history only.
var chaosSession = regexp.MustCompile(`\b(s\d\d) (?:message|delegate) \d+`)

// modelCalls records, per session, the calls the runners' fake models
// answered, and when each runner was frozen: the evidence of "one run at
// the model".
type modelCalls struct {
	mu     sync.Mutex
	calls  map[invariant.Session][]invariant.ModelCall
	pauses map[string][]invariant.Window
}

// observe is the fake model's hook for runner's calls.
func (m *modelCalls) observe(runner string) func(start, end time.Time, body []byte) {
	return func(start, end time.Time, body []byte) {
		sub := chaosSession.FindSubmatch(body)
		if sub == nil {
			return
		}
		s := invariant.Session{Tenant: "chaos", Session: string(sub[1])}
		m.mu.Lock()
		defer m.mu.Unlock()
		m.calls[s] = append(m.calls[s], invariant.ModelCall{Runner: runner, Start: start, End: end})
	}
}

func (m *modelCalls) paused(runner string, from, to time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pauses[runner] = append(m.pauses[runner], invariant.Window{From: from, To: to})
}

func (m *modelCalls) snapshot() (map[invariant.Session][]invariant.ModelCall, map[string][]invariant.Window) {
	m.mu.Lock()
	defer m.mu.Unlock()
	calls := make(map[invariant.Session][]invariant.ModelCall, len(m.calls))
	for s, c := range m.calls {
		calls[s] = append([]invariant.ModelCall(nil), c...)
	}
	pauses := make(map[string][]invariant.Window, len(m.pauses))
	for r, w := range m.pauses {
		pauses[r] = append([]invariant.Window(nil), w...)
	}
	return calls, pauses
}

// jobsScript is the model when jobs are in play, played at each runner's
// fake model (scriptedReplies): every input starts a short background job
// and ends the turn; the job's exit notice is answered. An input that says
// "delegate" starts a sub-agent instead (waiting a second for its answer,
// which takes about that long, so some answers come in the wait and some
// as notices); the sub-agent's own input is answered.
const jobsScript = `{
  "description": "chaos: a background job per input, a sub-agent per delegation",
  "turns": [
    {"when": {"user_contains": "delegate"}, "text": "Delegating.",
     "tool_calls": [{"name": "agent_start", "input": {"prompt": "chaos sub-task", "wait": 1}}]},
    {"when": {"tool_result_for": "agent_start"}, "text": "Delegated."},
    {"when": {"user_contains": "chaos sub-task"}, "delay": "900ms", "text": "Sub-task done."},
    {"text": "Starting a background job.",
     "tool_calls": [{"name": "shell", "input": {"command": "sleep 1; echo chaos job done", "background": true}}]},
    {"text": "The job runs in the background."},
    {"when": {"notice_contains": "[background job notice]"}, "text": "Job report: {{notice}}"},
    {"when": {"notice_contains": "[sub-agent notice]"}, "text": "Sub-agent report: {{notice}}"}
  ]
}`

func TestChaos_every_accepted_event_reaches_the_model_once_through_faults(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos suite: real processes and a three-node cluster")
	}
	p := planFromEnv(t)
	budget := p.duration + p.quiesce + time.Minute
	if !p.long {
		budget = shortCap
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	rng := rand.New(rand.NewPCG(p.seed, 0x6a657477))
	t.Logf("chaos: seed %d (replay the schedule with CHAOS_SEED=%d), faults for %s, %d runners, %d sessions, 3 NATS nodes",
		p.seed, p.seed, p.duration, p.runners, p.sessions)

	bin := jetwayBinary(t)
	var skipped []string
	withJobs := hasCommand(bin, "jobs-worker") && os.Getenv("CHAOS_NO_JOBS") == ""
	if !withJobs {
		skipped = append(skipped, "jobs worker SIGKILL and background jobs: no `jetway jobs-worker` in this build (or CHAOS_NO_JOBS set)")
	}

	// Every link between two nodes runs through a proxy per direction (each
	// end dials the other), which a fault can blackhole to partition a node.
	routes := map[[2]int]*testutil.Blackhole{}
	cl := bustest.StartClusterWith(t, 3, bustest.ClusterConfig{Partitions: workPartitions, RouteVia: func(from, to int, addr string) string {
		b := testutil.StartBlackhole(t, addr)
		routes[[2]int{from, to}] = b
		return b.URL()
	}})
	urls := strings.Join(cl.URLs(), ",")
	_, js := bustest.Connect(t, urls)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Replicas: 3, Partitions: workPartitions, Shards: workShards, WorkAckWait: 2 * time.Second, WorkPinnedTTL: 2 * time.Second}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	// Each runner has a fake model of its own, so every call is known by
	// session and runner: the calls last 1.2 s or more, longer than the
	// 0.9 s takeover of 300 ms heartbeats. Without jobs it answers "noted";
	// with them it plays jobsScript (script_test.go). A sub-agent's calls
	// name no session the suite can read, and are not judged.
	calls := &modelCalls{calls: map[invariant.Session][]invariant.ModelCall{}, pauses: map[string][]invariant.Window{}}
	var route func(body []byte) (llmtest.Reply, bool)
	if withJobs {
		var err error
		if route, err = scriptedReplies(jobsScript); err != nil {
			t.Fatal(err)
		}
	}
	modelEnv := func(runner string) []string {
		model := llmtest.NewAnthropic(t)
		model.SetRecording(false)
		model.SetFallback(llmtest.Reply{Text: "noted", Latency: callLatency, ChunkDelay: callChunkDelay})
		if route != nil {
			model.SetRouter(route)
		}
		model.ObserveAnswered(calls.observe(runner))
		return []string{"ANTHROPIC_API_KEY=chaos-key", "ANTHROPIC_BASE_URL=" + model.URL(), "ANTHROPIC_MODEL=claude-test", "JETWAY_SCRIPT="}
	}
	// Every job worker id starts with workerPrefix, so the /proc scan
	// counts this run's job processes and no one else's.
	workerPrefix := fmt.Sprintf("chaos%x-w", p.seed&0xffffff)
	var workers []*proc
	if withJobs {
		root := t.TempDir()
		// A worker running as root mounts each session's disk image under
		// its root, and a SIGKILLed one leaves them mounted (its successor
		// would take them over): unmount them once the workers are gone,
		// before the directory is removed.
		t.Cleanup(func() { unmountUnder(t, root) })
		for i := range 2 {
			id := fmt.Sprintf("%s%d", workerPrefix, i)
			wp := newProc(t, id, []string{bin, "jobs-worker", "--nats", urls, "--id", id, "--root", filepath.Join(root, id), "--grace", "500ms", "--log-format", "json"}, nil)
			if err := wp.start(); err != nil {
				t.Fatal(err)
			}
			workers = append(workers, wp)
		}
	}

	// Each runner reaches the cluster through links of its own, which a
	// fault can blackhole.
	var runners []*proc
	links := map[*proc][]*testutil.Blackhole{}
	for i := range p.runners {
		id := fmt.Sprintf("chaos-r%d", i)
		var via []string
		var mine []*testutil.Blackhole
		for _, u := range cl.URLs() {
			b := testutil.StartBlackhole(t, strings.TrimPrefix(u, "nats://"))
			mine, via = append(mine, b), append(via, b.URL())
		}
		rp := newProc(t, id,
			[]string{bin, "runner", "--nats", strings.Join(via, ","), "--id", id, "--heartbeat", "300ms", "--log-format", "json", "--log-level", logLevel()},
			modelEnv(id))
		links[rp] = mine
		if err := rp.start(); err != nil {
			t.Fatal(err)
		}
		runners = append(runners, rp)
	}

	var sessions []invariant.Session
	for i := range p.sessions {
		sessions = append(sessions, invariant.Session{Tenant: "chaos", Session: fmt.Sprintf("s%02d", i)})
	}
	pub := &publisher{js: js, rng: rand.New(rand.NewPCG(p.seed, 0x6576656e)), sessions: sessions, accepted: map[invariant.Session][]string{}, delegate: withJobs}
	faultCtx, stopFaults := context.WithTimeout(ctx, p.duration)
	defer stopFaults()
	pubDone := make(chan error, 1)
	go func() { pubDone <- pub.run(faultCtx, p.eventGap, time.Now().Add(p.duration+30*time.Second)) }()

	// Faults run here, on the test goroutine, one at a time; the first
	// three are one of each kind so even a short run sees them all.
	var faults tally
	kinds := []string{faultRunnerKill, faultRunnerRestart, faultNodeRestart, faultRunnerPause, faultRunnerCut, faultNodeSplit}
	if withJobs {
		kinds = append(kinds, faultWorkerKill, faultWorkerPause)
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	for n := 0; ; n++ {
		pause(faultCtx, between(rng, p.faultGap))
		if faultCtx.Err() != nil {
			break
		}
		kind := pickFault(rng, n, kinds)
		if (kind == faultWorkerKill || kind == faultWorkerPause) && !withJobs {
			kind = faultRunnerKill
		}
		switch kind {
		case faultWorkerKill:
			wp := workers[rng.IntN(len(workers))]
			if err := wp.stop(syscall.SIGKILL); err != nil {
				t.Errorf("fault %d: %v", n, err)
			}
			down := between(rng, [2]time.Duration{200 * time.Millisecond, 2 * time.Second})
			t.Logf("fault %d: jobs worker %s killed; back in %s", n, wp.name, down.Round(time.Millisecond))
			pause(ctx, down)
			if err := wp.start(); err != nil {
				t.Fatalf("fault %d: %v", n, err)
			}
		case faultWorkerPause:
			// A worker that thinks it is alive: requests queue on its
			// socket, its jobs' ends and its answers wait, and when it
			// resumes it serves what queued — a stale run's command
			// included, which its fence check must refuse.
			wp := workers[rng.IntN(len(workers))]
			down := between(rng, [2]time.Duration{1 * time.Second, 5 * time.Second})
			if err := wp.signal(syscall.SIGSTOP); err != nil {
				t.Errorf("fault %d: %v", n, err)
				break
			}
			t.Logf("fault %d: jobs worker %s frozen (SIGSTOP); resumed in %s", n, wp.name, down.Round(time.Millisecond))
			pause(ctx, down)
			if err := wp.signal(syscall.SIGCONT); err != nil {
				t.Errorf("fault %d: %v", n, err)
			}
		case faultRunnerKill, faultRunnerRestart:
			rp := runners[rng.IntN(len(runners))]
			sig, what := syscall.SIGKILL, "killed"
			if kind == faultRunnerRestart {
				sig, what = syscall.SIGTERM, "stopped"
			}
			if err := rp.stop(sig); err != nil {
				t.Errorf("fault %d: %v", n, err)
			}
			down := between(rng, [2]time.Duration{200 * time.Millisecond, 3 * time.Second})
			t.Logf("fault %d: %s %s; back in %s", n, rp.name, what, down.Round(time.Millisecond))
			pause(ctx, down)
			if err := rp.start(); err != nil {
				t.Fatalf("fault %d: %v", n, err)
			}
		case faultRunnerPause:
			rp := runners[rng.IntN(len(runners))]
			down := between(rng, [2]time.Duration{1 * time.Second, 5 * time.Second})
			from := time.Now()
			if err := rp.signal(syscall.SIGSTOP); err != nil {
				t.Errorf("fault %d: %v", n, err)
				break
			}
			t.Logf("fault %d: %s frozen (SIGSTOP); resumed in %s", n, rp.name, down.Round(time.Millisecond))
			pause(ctx, down)
			if err := rp.signal(syscall.SIGCONT); err != nil {
				t.Errorf("fault %d: %v", n, err)
			}
			calls.paused(rp.name, from, time.Now())
		case faultRunnerCut:
			rp := runners[rng.IntN(len(runners))]
			down := between(rng, [2]time.Duration{1 * time.Second, 5 * time.Second})
			for _, b := range links[rp] {
				b.Cut()
			}
			t.Logf("fault %d: %s's links to NATS blackholed; mended in %s", n, rp.name, down.Round(time.Millisecond))
			pause(ctx, down)
			for _, b := range links[rp] {
				b.Mend()
			}
		case faultNodeSplit:
			// The node runs on and keeps its clients, runners among them,
			// but hears nothing from the other two, nor they from it, for
			// 3–12 s: from shorter than a raft election timeout (4–9 s),
			// when its groups only stall, to long enough for the other two
			// to elect new leaders and for a leader it was to find that it
			// lost its quorum.
			k := rng.IntN(len(cl.Nodes))
			nd := cl.Nodes[k]
			leads := shardsLedBy(cl, nd)
			down := between(rng, [2]time.Duration{3 * time.Second, 12 * time.Second})
			for link, b := range routes {
				if link[0] == k || link[1] == k {
					b.Cut()
				}
			}
			t.Logf("fault %d: NATS node %s%s partitioned from the other two (its routes blackholed); healed in %s", n, nd.Name(), leads, down.Round(time.Millisecond))
			pause(ctx, down)
			for link, b := range routes {
				if link[0] == k || link[1] == k {
					b.Mend()
				}
			}
			cl.WaitReady()
		case faultNodeRestart:
			nd := cl.Nodes[rng.IntN(len(cl.Nodes))]
			leads := shardsLedBy(cl, nd)
			down := between(rng, [2]time.Duration{1 * time.Second, 5 * time.Second})
			t.Logf("fault %d: NATS node %s%s stopped; back in %s", n, nd.Name(), leads, down.Round(time.Millisecond))
			nd.Stop()
			pause(ctx, down)
			nd.Restart(t)
			cl.WaitReady()
		}
		faults.add(kind)
	}
	if err := <-pubDone; err != nil {
		t.Fatalf("publisher: %v", err)
	}
	for _, rp := range runners {
		if !rp.running() {
			t.Errorf("%s exited on its own during the run:\n%s", rp.name, rp.tail(30))
			if err := rp.start(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, wp := range workers {
		if !wp.running() {
			t.Errorf("%s exited on its own during the run:\n%s", wp.name, wp.tail(30))
			if err := wp.start(); err != nil {
				t.Fatal(err)
			}
		}
	}
	accepted, total := pub.snapshot()
	t.Logf("chaos: faults stopped: %s; %d events accepted (%d publish retries, %d abandoned); waiting up to %s for quiescence",
		faults.String(), total, pub.retries, pub.given, p.quiesce)

	// Quiescence: every accepted event is in a transcript (delivered or
	// refused), no session is running, and nothing moved between two
	// reads a second apart (a run that starts from a timer or a recovery
	// is not idle just because the read before it said so).
	start := time.Now()
	deadline := start.Add(p.quiesce)
	var ev invariant.Evidence
	var err error
	before := ""
	for {
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		ev, err = invariant.Collect(cctx, js, invariant.CollectConfig{Accepted: accepted, Jobs: withJobs, WorkerPrefix: workerPrefix})
		ccancel()
		if err == nil && quiescent(ev) {
			now := fingerprint(ev)
			if now == before {
				break
			}
			before = now
		} else {
			before = ""
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Errorf("not quiescent after %s (last read error: %v): %s", p.quiesce, err, pending(ev))
			break
		}
		pause(ctx, time.Second)
	}
	if err != nil {
		// Judged on a partial read, every invariant fails for nothing
		// (a 30-minute run's transcripts stopped at minute 4 this way).
		t.Fatalf("chaos: the evidence could not be read, so the invariants are not checked: %v", err)
	}
	t.Logf("chaos: quiescent after %s", time.Since(start).Round(100*time.Millisecond))

	if path := os.Getenv("CHAOS_EVIDENCE"); path != "" {
		if err := dumpEvidence(path, ev); err != nil {
			t.Errorf("dump evidence: %v", err)
		} else {
			t.Logf("chaos: evidence written to %s", path)
		}
	}
	ev.ModelCalls, ev.Pauses = calls.snapshot()
	runs := runCauses(ev)
	rep := invariant.Check(ev)
	rep.Skipped = append(rep.Skipped, skipped...)
	var out bytes.Buffer
	fmt.Fprintf(&out, "chaos: seed %d, faults for %s, %d runners, %d sessions, 3 NATS nodes\n", p.seed, p.duration, p.runners, p.sessions)
	fmt.Fprintf(&out, "chaos: faults injected: %s\n", faults.String())
	fmt.Fprintf(&out, "chaos: events accepted: %d (%d publish retries during faults)\n", total, pub.retries)
	fmt.Fprintf(&out, "chaos: runs seen: %s\n", runs.String())
	if withJobs {
		fenced := 0
		for _, j := range ev.Jobs {
			if j.Fence != "" {
				fenced++
			}
		}
		fmt.Fprintf(&out, "chaos: background jobs recorded: %d (%d started for a run, its fence checked), job processes alive: %d\n",
			len(ev.Jobs), fenced, len(ev.Procs))
	}
	for _, r := range rep.Results {
		if r.Invariant == invariant.OneAtTheModel && r.OK && strings.Contains(r.Detail, "frozen") {
			fmt.Fprintf(&out, "chaos: %s: %s (a frozen runner cannot cancel its call: the lease's bound)\n", r.Subject, r.Detail)
		}
	}
	if err := rep.Write(&out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if rep.Failed() > 0 {
		t.Errorf("%d invariant violations (seed %d)", rep.Failed(), p.seed)
	}
	if rep.Failed() > 0 || !quiescent(ev) {
		wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Logf("what is left in the work stream:\n%s", workState(wctx, js, workPartitions))
		wcancel()
	}
	if total == 0 || faults.String() == "none" {
		t.Errorf("the run proved nothing: %d events, faults %s", total, faults.String())
	}
}

// pickFault returns the n-th fault's kind: the first len(first) in the
// given order, then weighted at random.
func pickFault(rng *rand.Rand, n int, first []string) string {
	if n < len(first) {
		return first[n]
	}
	switch x := rng.IntN(18); {
	case x < 3:
		return faultRunnerKill
	case x < 5:
		return faultRunnerRestart
	case x < 7:
		return faultRunnerPause
	case x < 9:
		return faultRunnerCut
	case x < 11:
		return faultNodeSplit
	case x < 13 || !slices.Contains(first, faultWorkerKill):
		return faultNodeRestart
	case x < 16:
		return faultWorkerKill
	default:
		return faultWorkerPause
	}
}

// quiescent reports whether every accepted event is accounted for in a
// transcript and no session is running.
func quiescent(ev invariant.Evidence) bool {
	for s, ids := range ev.Accepted {
		seen := accounted(ev.Transcripts[s])
		for _, id := range ids {
			if !seen[id] {
				return false
			}
		}
	}
	for _, rec := range ev.Sessions {
		if rec.State == runner.StateRunning || rec.Untold != "" {
			return false // a run, or a refusal still being told
		}
	}
	for _, j := range ev.Jobs {
		if j.Status == "running" {
			return false
		}
	}
	if len(invariant.OwedEnds(ev)) > 0 {
		return false
	}
	return len(ev.Procs) == 0
}

// fingerprint sums up what a collect saw: each session's transcript length
// and record. Two equal fingerprints a second apart mean nothing moved.
func fingerprint(ev invariant.Evidence) string {
	var lines []string
	for s, rec := range ev.Sessions {
		lines = append(lines, fmt.Sprintf("%s %d %s %s %d", s, len(ev.Transcripts[s]), rec.State, rec.Run, rec.Runs))
	}
	sort.Strings(lines)
	lines = append(lines, fmt.Sprintf("%d sessions with transcripts, %d jobs", len(ev.Transcripts), len(ev.Jobs)))
	return strings.Join(lines, "; ")
}

// pending describes what quiescence still waits for.
func pending(ev invariant.Evidence) string {
	missing, running := 0, 0
	for s, ids := range ev.Accepted {
		seen := accounted(ev.Transcripts[s])
		for _, id := range ids {
			if !seen[id] {
				missing++
			}
		}
	}
	for _, rec := range ev.Sessions {
		if rec.State == runner.StateRunning {
			running++
		}
	}
	return fmt.Sprintf("%d accepted events not yet in a transcript, %d sessions running", missing, running)
}

// accounted is the set of CE ids a transcript delivered or refused.
func accounted(recs []runner.Record) map[string]bool {
	seen := map[string]bool{}
	for _, r := range recs {
		if r.Message != nil {
			for _, id := range r.Message.Delivers {
				seen[id] = true
			}
		}
		if r.Kind == runner.RecordRefused && r.Event != "" {
			seen[r.Event] = true
		}
	}
	return seen
}

// dumpEvidence writes what the checker read as JSON, for a person to
// follow a violation record by record.
func dumpEvidence(path string, ev invariant.Evidence) error {
	type session struct {
		Session    string               `json:"session"`
		Accepted   []string             `json:"accepted"`
		Record     runner.SessionRecord `json:"record"`
		Refusals   []string             `json:"refusals,omitempty"`
		Transcript []runner.Record      `json:"transcript"`
	}
	var out []session
	for s, recs := range ev.Transcripts {
		out = append(out, session{Session: s.String(), Accepted: ev.Accepted[s], Record: ev.Sessions[s], Refusals: ev.Refusals[s], Transcript: recs})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Session < out[j].Session })
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// runCauses counts the runs the transcripts recorded, by cause.
func runCauses(ev invariant.Evidence) *tally {
	c := &tally{}
	for _, recs := range ev.Transcripts {
		for _, r := range recs {
			if r.Kind == runner.RecordRunStarted {
				c.add(r.Cause)
			}
		}
	}
	return c
}

// unmountUnder lazily unmounts every mount below dir, deepest first.
func unmountUnder(t *testing.T, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	for k := len(mounts) - 1; k >= 0; k-- {
		if err := syscall.Unmount(mounts[k], syscall.MNT_DETACH); err != nil {
			t.Logf("unmount %s: %v", mounts[k], err)
		}
	}
}
