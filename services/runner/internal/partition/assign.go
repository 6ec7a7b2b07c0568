package partition

import (
	"cmp"
	"context"
	"encoding/binary"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"
)

// settleTime is how long a member must have been live in its current
// incarnation before the assignment counts it. A member that restarts or
// loses its lease over and over (a new incarnation each time) never counts,
// so it never pulls partitions away from the others only to drop them
// again; a member that stays gets its share settleTime after it joined.
const settleTime = 2 * time.Second

// assignment is which member each partition belongs to: owners[n] is the
// member partition n is assigned to.
type assignment struct {
	key    string // the members it was computed over, sorted, joined
	owners []string
}

// assign shares p partitions out over members, deterministically: every
// member that sees the same set computes the same owners, with no
// coordination. It is rendezvous (highest-random-weight) hashing with a
// bound on load: each (partition, member) pair has a pseudo-random
// weight, and pairs are taken from the heaviest down, a pair only when its
// partition is still free and its member under its quota. The quotas are
// ⌊p/R⌋, with p mod R of the members allowed one more, so the shares differ
// by at most one (plain rendezvous hashing leaves a binomial spread: with 16
// partitions over two members, 8 ± 2). Like plain rendezvous hashing, a
// member joining or leaving moves mostly the partitions it takes or
// leaves: the other pairs keep their weights.
func assign(p int, members []string) []string {
	owners := make([]string, p)
	r := len(members)
	if r == 0 {
		return owners
	}
	type pair struct {
		n int
		m string
		w uint64
	}
	pairs := make([]pair, 0, p*r)
	for n := range p {
		for _, m := range members {
			pairs = append(pairs, pair{n: n, m: m, w: weight(n, m)})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		if c := cmp.Compare(b.w, a.w); c != 0 {
			return c
		}
		if c := cmp.Compare(a.n, b.n); c != 0 {
			return c
		}
		return strings.Compare(a.m, b.m)
	})
	quota, extra := p/r, p%r
	count := make(map[string]int, r)
	for _, pr := range pairs {
		if owners[pr.n] != "" {
			continue
		}
		switch c := count[pr.m]; {
		case c < quota:
		case c == quota && extra > 0:
			extra--
		default:
			continue
		}
		owners[pr.n] = pr.m
		count[pr.m]++
	}
	return owners
}

// weight is the rendezvous weight of partition n for member id: FNV-1a of
// both, through a 64-bit finaliser so that ids differing in one character
// still get unrelated weights.
func weight(n int, id string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	_, _ = h.Write(b[:])
	_, _ = h.Write([]byte(id))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// settled picks the members the assignment is computed over from the live
// beats: those live for settleTime in their incarnation. When none is (a
// cold start, every member new), all live members count, so a lone new
// member takes every partition at once.
func settled(beats map[string]Beat, now time.Time) []string {
	var out, all []string
	for id, b := range beats {
		all = append(all, id)
		if b.Joined.IsZero() || now.Sub(b.Joined) >= settleTime {
			out = append(out, id)
		}
	}
	if len(out) == 0 {
		out = all
	}
	slices.Sort(out)
	return out
}

// assigner computes the assignment from the live beats, and again only
// when the set of members changes.
type assigner struct {
	mu   sync.Mutex
	last assignment
	// since is when the current set of members was first seen: hand-offs
	// wait until it has held for holdStill.
	since time.Time
}

// holdStill is how long the set of members must have held before a member
// hands a partition off: a member's view of the others can flicker (its
// mirror of the heartbeats restarting), and a hand-off begun on a flicker
// would be undone at once.
const holdStill = 500 * time.Millisecond

// owners returns the assignment over the members in beats and whether it
// has held for holdStill.
func (a *assigner) owners(p int, beats map[string]Beat, now time.Time) (owners []string, still bool) {
	members := settled(beats, now)
	key := strings.Join(members, "\x00")
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last.owners == nil || a.last.key != key || len(a.last.owners) != p {
		a.last = assignment{key: key, owners: assign(p, members)}
		a.since = now
	}
	return a.last.owners, now.Sub(a.since) >= holdStill
}

// ownerOf is the member partition n is assigned to now ("" when the live
// members cannot be read), and whether the assignment has held still.
func (g *Group) ownerOf(ctx context.Context, n int) (string, bool) {
	beats, err := g.peers.beats(ctx)
	if err != nil || len(beats) == 0 {
		return "", false
	}
	owners, still := g.assign.owners(g.cfg.Partitions, beats, time.Now())
	return owners[n], still
}
