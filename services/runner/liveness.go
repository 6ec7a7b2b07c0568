package runner

import (
	"context"

	"jetway/services/runner/internal/partition"
)

// liveness is what the runners bucket says about the runner a record names.
type liveness int

const (
	alive     liveness = iota // same incarnation, fresh heartbeat
	restarted                 // same runner identity, a new incarnation
	gone                      // no fresh heartbeat at all
	// selfCrashed: the record names this very incarnation, yet no run of
	// it is live here: the run died inside this process.
	selfCrashed
)

// peers is the runner's window on the partition group's heartbeats: who
// holds which partition (the sweep) and whether the runner a record names
// is alive (recovery).
type peers struct{ g *partition.Group }

// looksAt says, for each partition, whether this runner's sweep looks at
// it: one it holds, one nobody holds that it waits for as the owner, and
// one nobody holds or waits for. So each partition has one looker while a
// live runner holds or wants it, and a partition idle from the start (a
// partition is pinned at its first event) costs one watch, not one per
// runner.
func (p peers) looksAt(ctx context.Context, self string) func(n int) bool {
	holders, waiting := p.g.Owners(ctx)
	return func(n int) bool {
		if h, held := holders[n]; held {
			return h == self
		}
		if w, wanted := waiting[n]; wanted {
			return w == self
		}
		return true
	}
}

func (p peers) status(ctx context.Context, id, incarnation string) (liveness, error) {
	st, err := p.g.Status(ctx, id, incarnation)
	switch st {
	case partition.Restarted:
		return restarted, err
	case partition.Gone:
		return gone, err
	}
	return alive, err
}
