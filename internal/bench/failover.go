package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"jetway/pkg/bus"
	"jetway/pkg/events"
)

// failoverSessions is how many sessions the failover figure spreads over
// the two runners, so the victim surely owns some.
const failoverSessions = 32

// lockedBuffer collects a child's output for the error message.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 64<<10 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// failover runs a real `jetway runner` process next to an in-process
// runner, SIGKILLs the process once it owns sessions, and times until a
// new event of each of those sessions reaches the model through the
// survivor. The process gets its own fake model server, so which runner
// handled a session is read from where its request arrived.
func (rb *runnerBench) failover(ctx context.Context, run string) {
	e := rb.e
	const goal = "≤ 5 s"
	if e.cfg.JetwayBinary == "" {
		e.skip(FigRunnerFailover, "s", goal, errNoBinary)
		return
	}
	frontA, err := newModelFront(e.cfg.ModelLatency)
	if err != nil {
		e.skip(FigRunnerFailover, "s", goal, err)
		return
	}
	defer frontA.close()

	e.progress("runner: starting a `jetway runner` process to SIGKILL")
	victimID := "bench-victim-" + run
	cmd := exec.Command(e.cfg.JetwayBinary, "runner", "--nats", e.url, "--id", victimID, "--log-format", "json", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=bench", "ANTHROPIC_BASE_URL="+frontA.url(), "ANTHROPIC_MODEL=claude-bench")
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		e.skip(FigRunnerFailover, "s", goal, fmt.Errorf("start %s runner: %w", e.cfg.JetwayBinary, err))
		return
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	fail := func(err error) {
		select {
		case <-exited:
			err = fmt.Errorf("%w (the runner process exited: %s)", err, oneLine(out.String()))
		default:
		}
		e.skip(FigRunnerFailover, "s", goal, err)
	}

	tenant := "fo-" + run
	// The process alone: it takes every partition; wait until it answers.
	tok := "[fo-warm-" + run + "]"
	arrived := frontA.expect(tok)
	if err := e.publish(ctx, false, tenant, "warm", events.Input{Text: "warm " + tok}, false); err != nil {
		fail(err)
		return
	}
	select {
	case <-arrived:
	case <-exited:
		fail(errors.New("runner process exited before consuming"))
		return
	case <-time.After(rb.e.patience()):
		fail(fmt.Errorf("the runner process consumed nothing within %s", e.patience()))
		return
	}

	// Spread sessions over the victim, alone so far; one whose event does
	// not reach it in time is counted and left out; the whole spread gets
	// one patience to arrive and one to finish.
	type spread struct {
		session string
		tok     string
		onA     <-chan time.Time
	}
	probes := make([]spread, failoverSessions)
	for i := range probes {
		p := spread{session: sessionName(i), tok: fmt.Sprintf("[fo-own-%s-%d]", run, i)}
		p.onA = frontA.expect(p.tok)
		probes[i] = p
		if err := e.publish(ctx, false, tenant, p.session, events.Input{Text: "whose " + p.tok}, false); err != nil {
			fail(err)
			return
		}
	}
	var victims []string
	stuck := 0
	actx, cancelA := deadline(ctx, e.patience())
	for _, p := range probes {
		select {
		case <-p.onA:
			victims = append(victims, p.session)
		case <-actx.Done():
			stuck++
		}
		frontA.forget(p.tok)
	}
	cancelA()
	// Keep those that finished.
	ictx, cancelI := deadline(ctx, e.patience())
	owned := victims[:0]
	for _, session := range victims {
		if err := rb.waitIdle(ictx, tenant, session, 1); err != nil {
			stuck++
			continue
		}
		owned = append(owned, session)
	}
	cancelI()
	victims = owned
	if len(victims) == 0 {
		fail(fmt.Errorf("the runner process owned none of %d sessions (%d sessions' events reached no runner or did not finish within %s)", failoverSessions, stuck, e.patience()))
		return
	}

	// The survivor joins now, while the victim owns every session spread
	// above; the kill follows as soon as the survivor is live (its first
	// heartbeat), before the balance rule has moved much.
	survivor := "bench-survivor-" + run
	stopB, err := rb.startRunner(ctx, survivor, rb.model)
	if err != nil {
		fail(err)
		return
	}
	defer stopB()
	if err := rb.waitLive(ctx, survivor); err != nil {
		fail(err)
		return
	}

	e.progress("runner: SIGKILL of the runner process owning %d of %d sessions", len(victims), failoverSessions)
	waits := make([]<-chan time.Time, len(victims))
	for i, session := range victims {
		waits[i] = rb.front.expect(fmt.Sprintf("[fo-after-%s-%s]", run, session))
	}
	t0 := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		fail(fmt.Errorf("SIGKILL: %w", err))
		return
	}
	for _, session := range victims {
		tok := fmt.Sprintf("[fo-after-%s-%s]", run, session)
		if err := e.publish(ctx, false, tenant, session, events.Input{Text: "still there? " + tok}, false); err != nil {
			fail(err)
			return
		}
	}
	lease, leaseErr := rb.leaseOut(ctx, victimID, t0)
	var first, last time.Duration
	for i, ch := range waits {
		select {
		case t := <-ch:
			d := t.Sub(t0)
			if i == 0 || d < first {
				first = d
			}
			last = max(last, d)
		case <-time.After(rb.e.patience()):
			fail(fmt.Errorf("session %s did not run elsewhere within %s of the SIGKILL", victims[i], e.patience()))
			return
		case <-ctx.Done():
			return
		}
	}
	v := last.Seconds()
	r := figure(FigRunnerFailover, "s", v).goal(goal, v <= 5).
		note("a `jetway runner` process (default heartbeat 1s, pinned TTL %s) owning %d of %d sessions SIGKILLed as soon as an in-process runner joined; time until the last of them ran on the survivor (first after %s)",
			bus.DefaultWorkPinnedTTL, len(victims), failoverSessions, first.Round(time.Millisecond))
	if stuck > 0 {
		r.Note += fmt.Sprintf("; before the kill, %d of %d sessions' events reached no runner or did not finish within %s while partitions were being balanced", stuck, failoverSessions, e.patience())
	}
	e.add(r)
	if leaseErr != nil {
		e.skip(FigRunnerLeaseOut, "s", "-", leaseErr)
		e.skip(FigRunnerAfterLease, "s", "-", leaseErr)
		return
	}
	// The process runs with the defaults: heartbeat L/3, margin half a beat.
	beat := lease.length / 3
	e.add(figure(FigRunnerLeaseOut, "s", lease.out.Seconds()).
		note("lease L %s, declared by each beat (3 beats of %s); margin %s, so a live holder stops its runs %s after sending a beat; the victim's last beat was stored %s before the SIGKILL",
			lease.length, beat, beat/2, lease.length-beat/2, lease.before.Round(time.Millisecond)))
	e.add(figure(FigRunnerAfterLease, "s", (last - lease.out).Seconds()).
		note("the failover figure less the lease: the survivor's sweep (every heartbeat), the partition's move, the recovered session's run"))
}

// victimLease is what the runners bucket says of a killed runner's lease.
type victimLease struct {
	length time.Duration // the lease its last beat declared
	before time.Duration // from its last stored beat to the SIGKILL
	out    time.Duration // from the SIGKILL to the lease's end
}

// leaseOut reads the killed runner's last beat from the runners bucket:
// the server's stamp of it plus the lease it declared is the earliest
// moment another runner may take it over. Both clocks are this machine's
// (the bench's server runs in process); with --nats on another host the
// figure carries the two clocks' offset.
func (rb *runnerBench) leaseOut(ctx context.Context, runner string, kill time.Time) (victimLease, error) {
	kv, err := rb.e.js.KeyValue(ctx, bus.BucketRunners)
	if err != nil {
		return victimLease{}, fmt.Errorf("runners bucket: %w", err)
	}
	ent, err := kv.Get(ctx, runner)
	if err != nil {
		return victimLease{}, fmt.Errorf("last beat of %s: %w", runner, err)
	}
	var beat struct {
		LeaseMS int64 `json:"lease_ms"`
	}
	if err := json.Unmarshal(ent.Value(), &beat); err != nil {
		return victimLease{}, fmt.Errorf("last beat of %s: %w", runner, err)
	}
	if beat.LeaseMS <= 0 {
		return victimLease{}, fmt.Errorf("last beat of %s declares no lease", runner)
	}
	l := time.Duration(beat.LeaseMS) * time.Millisecond
	return victimLease{length: l, before: kill.Sub(ent.Created()), out: ent.Created().Add(l).Sub(kill)}, nil
}

// oneLine shortens a child's output for an error message.
func oneLine(s string) string {
	s = string(bytes.Join(bytes.Fields([]byte(s)), []byte(" ")))
	if len(s) > 300 {
		s = "…" + s[len(s)-300:]
	}
	return s
}
