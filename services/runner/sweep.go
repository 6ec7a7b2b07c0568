package runner

import (
	"context"
	"fmt"

	"jetway/pkg/bus"
	"jetway/pkg/bus/kvmirror"
	"jetway/pkg/control/agents"
	"jetway/pkg/control/groundstop"
)

// startControl starts the mirrors of the control plane — the Ground Stop
// switches and the default agent profiles — and waits until the switches
// hold what the bucket held at start. The runner consumes nothing before:
// a switch set before it started must hold for its first event. The
// mirrors of live runs follow the partitions the sweep looks at
// (partRuns).
func (r *Runner) startControl(ctx context.Context) error {
	r.stops = groundstop.StartMirror(ctx, r.control, r.log, r.noteStop)
	// A mirror that holds its first copy asks for a sweep, as each beat
	// does; one goroutine sweeps, so a sweep waiting on the bus (a
	// runner's heartbeat read during a network fault) never holds a beat
	// back, and the asks of mirrors started together make one sweep.
	r.running.start(ctx, func() { r.askSweep(ctx) })
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.stopping():
				return
			case <-r.sweepNow:
				r.sweep(ctx)
			}
		}
	}()
	// Not waited for: until it is ready, run starts read the bucket.
	r.defaults.Store(kvmirror.Start(ctx, kvmirror.Config{Name: "default agent profiles", KV: r.profiles, Filters: []string{"*." + agents.DefaultName}, Log: r.log}))
	if err := r.stops.WaitReady(ctx); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	return nil
}

// askSweep asks the sweeper for a sweep, without waiting for it: the
// partition group's OnBeat and OnPeerGone (a peer's lease just ran out:
// its runs are recovered at once), and a mirror's first copy.
func (r *Runner) askSweep(context.Context) {
	select {
	case r.sweepNow <- struct{}{}:
	default:
	}
}

// sweep finds runs whose runner is gone, on partitions this runner holds or
// waits for as their owner, or that no live runner holds or waits for
// (peers.looksAt), and hands each to its session's actor for
// recovery, so an interrupted run is recovered even when no new event
// arrives for its session; likewise a refusal recorded and not yet told
// (tellRefusal). Two runners sweeping the same orphan is safe: the
// session record's compare-and-swap lets one of them start the new run.
//
// It reads the live runs of those partitions alone (partRuns), starting
// the mirror of a partition it looks at for the first time; that mirror,
// once it holds its first copy, asks for another sweep. The sweeper
// goroutine (startControl) and the runner's start call it, one at a time.
func (r *Runner) sweep(ctx context.Context) {
	r.sweepMu.Lock()
	defer r.sweepMu.Unlock()
	ours := r.peers.looksAt(ctx, r.cfg.ID)
	var look []int
	for p := range r.partitions {
		if ours(p) {
			look = append(look, p)
		}
	}
	r.running.follow(look)
	for _, rec := range r.running.records() {
		p := bus.PartitionFor(rec.Tenant, rec.Session, r.partitions)
		switch {
		case !ours(p):
		case rec.State != StateRunning:
			// A refusal recorded untold: the session's actor tells it
			// (its start does), whoever recorded it. Told twice is
			// stored once.
			r.actorFor(rec.Tenant, rec.Session, p).enqueue(delivery{recover: true})
		case rec.Runner == r.cfg.ID && rec.Incarnation == r.inc():
			r.sweepOwn(rec)
		default:
			st, err := r.peers.status(ctx, rec.Runner, rec.Incarnation)
			if err != nil || st == alive {
				continue
			}
			r.actorFor(rec.Tenant, rec.Session, p).enqueue(delivery{recover: true})
		}
	}
}

// sweepOwn looks at a record that names a run of this runner's own
// incarnation. Every other runner sees this runner alive and waits, so if
// the run is not here (a hand-back after a lost fence whose write failed,
// or any path nobody listed) nobody else would ever move the session on.
// The session's actor decides: with a live run it does nothing; without
// one, its start reads the record afresh and recovers the run as crashed
// in this process. A leaving runner leaves its records for the next owner.
func (r *Runner) sweepOwn(rec SessionRecord) {
	select {
	case <-r.stopping():
		return
	default:
	}
	if !r.group.LeaseHeld() {
		return
	}
	r.mu.Lock()
	a, ok := r.actors[sessionKey(rec.Tenant, rec.Session)]
	r.mu.Unlock()
	if ok && a.box.busy() {
		return // a run, or work in hand: the actor's own path ends it
	}
	a = r.actorFor(rec.Tenant, rec.Session, bus.PartitionFor(rec.Tenant, rec.Session, r.partitions))
	a.enqueue(delivery{recover: true})
}
