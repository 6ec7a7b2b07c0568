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

func (p peers) holders(ctx context.Context) map[int]string { return p.g.Holders(ctx) }

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
