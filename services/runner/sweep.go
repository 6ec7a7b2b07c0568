package runner

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/bus/kvmirror"
	"jetway/pkg/control/agents"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/control/sessionrec"
)

// startControl starts the mirrors of the control plane — the Ground Stop
// switches and the records of live runs — and waits until both hold what
// the buckets held at start. The runner consumes nothing before: a switch
// set before it started must hold for its first event, and a sweep must
// not miss a dead runner's run.
func (r *Runner) startControl(ctx context.Context) error {
	r.stops = groundstop.StartMirror(ctx, r.control, r.log, r.noteStop)
	r.running = kvmirror.Start(ctx, kvmirror.Config{
		Name: "live runs",
		KV:   r.records.kv,
		// Only running records are held, so memory follows live runs,
		// not sessions.
		Keep: isRunning,
		Log:  r.log,
	})
	// Not waited for: until it is ready, run starts read the bucket.
	r.defaults.Store(kvmirror.Start(ctx, kvmirror.Config{Name: "default agent profiles", KV: r.profiles, Filters: []string{"*." + agents.DefaultName}, Log: r.log}))
	if err := r.stops.WaitReady(ctx); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	if err := r.running.WaitReady(ctx); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	return nil
}

// isRunning says a session record names a live run.
func isRunning(e jetstream.KeyValueEntry) bool {
	rec, err := sessionrec.Decode(e.Value())
	return err == nil && rec.State == StateRunning
}

// liveRuns are the records of every live run, any runner's.
func (r *Runner) liveRuns() []SessionRecord {
	var out []SessionRecord
	for _, e := range r.running.Entries() {
		if rec, err := sessionrec.Decode(e.Value()); err == nil && rec.State == StateRunning {
			out = append(out, rec)
		}
	}
	return out
}

// sweep finds runs whose runner is gone, on partitions this runner holds or
// that no live runner holds, and hands each to its session's actor for
// recovery, so an interrupted run is recovered even when no new event
// arrives for its session. Two runners sweeping the same orphan is safe: the
// session record's compare-and-swap lets one of them start the new run.
func (r *Runner) sweep(ctx context.Context) {
	var orphans, own []SessionRecord
	for _, rec := range r.liveRuns() {
		if rec.Runner == r.cfg.ID && rec.Incarnation == r.inc() {
			own = append(own, rec)
		} else {
			orphans = append(orphans, rec)
		}
	}
	if len(orphans)+len(own) == 0 {
		return
	}
	holders := r.peers.holders(ctx)
	ours := func(rec SessionRecord) bool {
		h, held := holders[bus.PartitionFor(rec.Tenant, rec.Session, r.partitions)]
		return !held || h == r.cfg.ID
	}
	for _, rec := range own {
		if ours(rec) {
			r.sweepOwn(rec)
		}
	}
	orphans = slices.DeleteFunc(orphans, func(rec SessionRecord) bool { return !ours(rec) })
	for _, rec := range orphans {
		st, err := r.peers.status(ctx, rec.Runner, rec.Incarnation)
		if err != nil || st == alive {
			continue
		}
		a := r.actorFor(rec.Tenant, rec.Session, bus.PartitionFor(rec.Tenant, rec.Session, r.partitions))
		a.enqueue(delivery{recover: true})
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
