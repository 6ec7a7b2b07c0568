package runner

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// watchRunning keeps r.running in step with the sessions bucket: the
// records that say a run is live, and only those, so memory follows live
// runs, not sessions.
func (r *Runner) watchRunning(ctx context.Context) {
	w, err := r.records.kv.WatchAll(ctx)
	if err != nil {
		r.log.Warn().Err(err).Msg("watch session records")
		return
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue // the initial values are in
			}
			r.noteRecord(e)
		}
	}
}

func (r *Runner) noteRecord(e jetstream.KeyValueEntry) {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(r.running, e.Key())
		return
	}
	var rec SessionRecord
	if json.Unmarshal(e.Value(), &rec) != nil || rec.State != StateRunning {
		delete(r.running, e.Key())
		return
	}
	r.running[e.Key()] = rec
}

// sweep finds runs whose runner is gone, on partitions this runner holds or
// that no live runner holds, and hands each to its session's actor for
// recovery, so an interrupted run is recovered even when no new event
// arrives for its session. Two runners sweeping the same orphan is safe: the
// session record's compare-and-swap lets one of them start the new run.
func (r *Runner) sweep(ctx context.Context) {
	r.runMu.Lock()
	var orphans []SessionRecord
	for _, rec := range r.running {
		if rec.Runner != r.cfg.ID || rec.Incarnation != r.incarnation {
			orphans = append(orphans, rec)
		}
	}
	r.runMu.Unlock()
	if len(orphans) == 0 {
		return
	}
	holders := r.peers.holders(ctx)
	mine := orphans[:0]
	for _, rec := range orphans {
		h, held := holders[bus.PartitionFor(rec.Tenant, rec.Session, r.partitions)]
		if !held || h == r.cfg.ID {
			mine = append(mine, rec)
		}
	}
	orphans = mine
	for _, rec := range orphans {
		st, err := r.peers.status(ctx, rec.Runner, rec.Incarnation)
		if err != nil || st == alive {
			continue
		}
		a := r.actorFor(rec.Tenant, rec.Session, bus.PartitionFor(rec.Tenant, rec.Session, r.partitions))
		a.enqueue(delivery{recover: true})
	}
}
