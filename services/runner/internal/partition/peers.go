package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/pkg/bus/kvmirror"
)

// Beat is a member's heartbeat value in the heartbeat bucket.
type Beat struct {
	Incarnation string    `json:"incarnation"`
	Started     time.Time `json:"started"`
	Partitions  []int     `json:"partitions"`
	// Joined is when the member's incarnation first beat: it counts in
	// the assignment settleTime after (zero, from a member that does not
	// say: at once).
	Joined time.Time `json:"joined,omitzero"`
	// Pulling are the partitions the member pulls as their owner and waits
	// to be pinned to: nobody else takes them for orphans.
	Pulling []int `json:"pulling,omitempty"`
	// LeaseMS is the lease the member counts itself alive for after this
	// beat (its StaleAfter): the others wait at least that long, whatever
	// their own setting, so a member never stops its runs later than the
	// others take them over.
	LeaseMS int64 `json:"lease_ms,omitempty"`
	// Models are the models the member's runner can call besides its own
	// (agents.ServingKey); absent when it does not say. The group does not
	// read it: the dispatcher does, to refuse a send no runner can serve.
	Models []string `json:"models,omitzero"`
}

// expired reports whether a beat stored at stamp no longer counts: the
// longer of the reader's staleAfter and the member's own lease has passed.
func (b Beat) expired(stamp time.Time, staleAfter time.Duration) bool {
	return time.Since(stamp) > max(staleAfter, time.Duration(b.LeaseMS)*time.Millisecond)
}

// Liveness is what the heartbeat bucket says about a member right now.
type Liveness int

const (
	Alive     Liveness = iota // same incarnation, fresh heartbeat
	Restarted                 // same identity, a new incarnation
	Gone                      // no fresh heartbeat at all
)

// peers reads the heartbeat bucket: heartbeats older than staleAfter do
// not count. A missing entry and a stale one mean the same thing.
//
// The balance rule asks how many members live and who holds what twice a
// second per partition; those answers come from a mirror of the bucket,
// where listing it each time made the server create and delete some thirty
// consumers a second per member. Whether one given member is alive
// (status) is always read afresh: a recovery rests on it.
type peers struct {
	kv         jetstream.KeyValue
	staleAfter time.Duration
	// self is this member's own key: the mirror is trusted only while it
	// holds a fresh heartbeat of self, which proves it is still being
	// updated (a stalled watch would age every member out, self too).
	self   string
	mirror *kvmirror.Mirror
	// parsed holds the mirror's heartbeats decoded, kept by its OnChange,
	// so the questions asked twice a second decode nothing.
	parsed *parsedBeats
}

// parsedBeats is the mirrored heartbeats, decoded, with when each was stored.
type parsedBeats struct {
	mu    sync.Mutex
	beats map[string]seenBeat
}

type seenBeat struct {
	Beat
	at time.Time
}

func (pb *parsedBeats) note(c kvmirror.Change) {
	var b Beat
	ok := !c.Deleted && json.Unmarshal(c.Entry.Value(), &b) == nil
	pb.mu.Lock()
	defer pb.mu.Unlock()
	if !ok {
		delete(pb.beats, c.Key)
		return
	}
	pb.beats[c.Key] = seenBeat{Beat: b, at: c.Entry.Created()}
}

// watch starts the mirror of the bucket, for live and holders.
func (p *peers) watch(ctx context.Context, log zerolog.Logger) {
	p.parsed = &parsedBeats{beats: map[string]seenBeat{}}
	p.mirror = kvmirror.Start(ctx, kvmirror.Config{Name: "runner heartbeats", KV: p.kv, Log: log, OnChange: p.parsed.note})
}

// fresh returns the heartbeats younger than staleAfter from the mirror, or
// false when the mirror is not current: not ready, its watch restarting, or
// no longer showing self's own heartbeats.
func (p peers) fresh() (map[string]Beat, bool) {
	m := p.mirror
	if m == nil || !m.Live() {
		return nil, false
	}
	select {
	case <-m.Ready():
	default:
		return nil, false
	}
	p.parsed.mu.Lock()
	defer p.parsed.mu.Unlock()
	if own, ok := p.parsed.beats[p.self]; p.self != "" && (!ok || time.Since(own.at) > p.staleAfter) {
		return nil, false
	}
	out := make(map[string]Beat, len(p.parsed.beats))
	for id, b := range p.parsed.beats {
		if !b.expired(b.at, p.staleAfter) {
			out[id] = b.Beat
		}
	}
	return out, true
}

// nextExpiry is when the first of the other members' mirrored heartbeats
// stops counting (zero when none counts now). A live member beats again
// before then and moves it on; a dead one's stays.
func (p peers) nextExpiry() time.Time {
	if p.parsed == nil {
		return time.Time{}
	}
	p.parsed.mu.Lock()
	defer p.parsed.mu.Unlock()
	var next time.Time
	for id, b := range p.parsed.beats {
		if id == p.self || b.expired(b.at, p.staleAfter) {
			continue
		}
		at := b.at.Add(max(p.staleAfter, time.Duration(b.LeaseMS)*time.Millisecond))
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// listed reads the fresh heartbeats from the bucket itself, for when the
// mirror cannot answer.
func (p peers) listed(ctx context.Context) (map[string]Beat, error) {
	out := map[string]Beat{}
	lister, err := p.kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	for key := range lister.Keys() {
		e, err := p.kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var b Beat
		if json.Unmarshal(e.Value(), &b) != nil || b.expired(e.Created(), p.staleAfter) {
			continue
		}
		out[key] = b
	}
	return out, nil
}

func (p peers) beats(ctx context.Context) (map[string]Beat, error) {
	if beats, ok := p.fresh(); ok {
		return beats, nil
	}
	return p.listed(ctx)
}

// live counts members with a fresh heartbeat (at least 1: the caller).
func (p peers) live(ctx context.Context) (int, error) {
	beats, err := p.beats(ctx)
	return max(len(beats), 1), err
}

// holders maps each partition to the live member that says it holds it.
func (p peers) holders(ctx context.Context) map[int]string {
	h, _ := p.owners(ctx)
	return h
}

// wanted maps each partition a live member waits for, as its owner, to
// that member.
func (p peers) wanted(ctx context.Context) map[int]string {
	_, w := p.owners(ctx)
	return w
}

// owners is holders and wanted from one read of the heartbeats. Two
// members may claim one partition for a moment (one hands it off as the
// other takes it); the first by id is named, so every member reading the
// same heartbeats names the same one.
func (p peers) owners(ctx context.Context) (holders, wanted map[int]string) {
	holders, wanted = map[int]string{}, map[int]string{}
	beats, _ := p.beats(ctx)
	for _, id := range slices.Sorted(maps.Keys(beats)) {
		b := beats[id]
		for _, n := range b.Partitions {
			if _, ok := holders[n]; !ok {
				holders[n] = id
			}
		}
		for _, n := range b.Pulling {
			if _, ok := wanted[n]; !ok {
				wanted[n] = id
			}
		}
	}
	return holders, wanted
}

func (p peers) put(ctx context.Context, id string, b Beat) error {
	data, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("runner %s: heartbeat: %w", id, err)
	}
	if _, err := p.kv.Put(ctx, id, data); err != nil {
		return fmt.Errorf("runner %s: heartbeat: %w", id, err)
	}
	return nil
}

func (p peers) remove(ctx context.Context, id string) error {
	if err := p.kv.Delete(ctx, id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("runner %s: leave: %w", id, err)
	}
	return nil
}

// status tells whether member id, in incarnation, may still be working.
func (p peers) status(ctx context.Context, id, incarnation string) (Liveness, error) {
	e, err := p.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return Gone, nil
	}
	if err != nil {
		return Alive, fmt.Errorf("runner %s: read heartbeat: %w", id, err)
	}
	var b Beat
	if err := json.Unmarshal(e.Value(), &b); err != nil {
		return Gone, nil
	}
	if b.Incarnation != incarnation {
		return Restarted, nil
	}
	if b.expired(e.Created(), p.staleAfter) {
		return Gone, nil
	}
	return Alive, nil
}
