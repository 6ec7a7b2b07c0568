package runner

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/pkg/bus"
	"jetway/pkg/bus/kvmirror"
	"jetway/pkg/control/sessionrec"
)

// partRuns are the live runs of the partitions the sweep looks at, one
// mirror of jetway_sessions_by_partition per partition. Watching every
// session record instead, each runner heard every run's claim and end,
// whoever held its partition, and the bus's work per event grew with the
// number of runners; this way a record write reaches the runners that
// look at its partition, which is one in a steady state.
//
// A partition's mirror starts when the sweep first looks at it and stops
// when the sweep no longer does; the sweep reads only the mirrors that
// hold their first copy, and each, once it does, asks for a sweep at once
// (ready) rather than at the next beat.
type partRuns struct {
	kv  jetstream.KeyValue
	log zerolog.Logger
	wg  *sync.WaitGroup

	mu sync.Mutex
	// ctx bounds every mirror; ready is called, from a goroutine of its
	// own counted in wg, when a partition's mirror holds its first copy.
	// Both are set by start.
	ctx   context.Context
	ready func()
	parts map[int]partMirror
}

// start sets what bounds the mirrors and whom they tell; follow starts
// none before.
func (pr *partRuns) start(ctx context.Context, ready func()) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.ctx, pr.ready = ctx, ready
}

type partMirror struct {
	m    *kvmirror.Mirror
	stop context.CancelFunc
}

// follow mirrors exactly the partitions in want: it starts the missing
// mirrors and stops those of partitions no longer wanted.
func (pr *partRuns) follow(want []int) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.ctx == nil {
		return
	}
	if pr.parts == nil {
		pr.parts = map[int]partMirror{}
	}
	wanted := make(map[int]bool, len(want))
	for _, p := range want {
		wanted[p] = true
		if _, ok := pr.parts[p]; ok {
			continue
		}
		ctx, stop := context.WithCancel(pr.ctx)
		m := kvmirror.Start(ctx, kvmirror.Config{
			Name:    fmt.Sprintf("live runs of partition %d", p),
			KV:      pr.kv,
			Filters: []string{bus.SessionsByPartitionFilter(p)},
			// Only running records (and untold refusals) are held, so
			// memory follows live runs, not sessions.
			Keep: wantsSweep,
			Log:  pr.log,
		})
		pr.parts[p] = partMirror{m: m, stop: stop}
		if pr.ready != nil {
			pr.wg.Add(1)
			go func() {
				defer pr.wg.Done()
				select {
				case <-m.Ready():
					pr.ready()
				case <-ctx.Done():
				}
			}()
		}
	}
	for p, pm := range pr.parts {
		if !wanted[p] {
			pm.stop()
			delete(pr.parts, p)
		}
	}
}

// waitReady waits until every mirror started so far holds its first copy,
// or ctx ends.
func (pr *partRuns) waitReady(ctx context.Context) error {
	pr.mu.Lock()
	var ms []*kvmirror.Mirror
	for _, pm := range pr.parts {
		ms = append(ms, pm.m)
	}
	pr.mu.Unlock()
	for _, m := range ms {
		if err := m.WaitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// following lists the partitions mirrored now, ready or not.
func (pr *partRuns) following() []int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	out := make([]int, 0, len(pr.parts))
	for p := range pr.parts {
		out = append(out, p)
	}
	return out
}

// records are the records the sweep looks at (sweepable) of the mirrored
// partitions whose mirrors hold their first copy.
func (pr *partRuns) records() []SessionRecord {
	pr.mu.Lock()
	var ready []*kvmirror.Mirror
	for _, pm := range pr.parts {
		select {
		case <-pm.m.Ready():
			ready = append(ready, pm.m)
		default:
		}
	}
	pr.mu.Unlock()
	var out []SessionRecord
	for _, m := range ready {
		for _, e := range m.Entries() {
			if rec, err := sessionrec.Decode(e.Value()); err == nil && sweepable(rec) {
				out = append(out, rec)
			}
		}
	}
	return out
}

// wantsSweep says a session record is one the sweep looks at (sweepable).
func wantsSweep(e jetstream.KeyValueEntry) bool {
	rec, err := sessionrec.Decode(e.Value())
	return err == nil && sweepable(rec)
}

// sweepable says a session record names a live run, whose runner may
// die, or a refusal recorded and not yet told, whose runner may have.
func sweepable(rec SessionRecord) bool {
	return rec.State == StateRunning || (rec.State == StateInterrupted && rec.Untold != "")
}
