package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// beat is a runner's heartbeat value in the runners bucket.
type beat struct {
	Incarnation string    `json:"incarnation"`
	Started     time.Time `json:"started"`
	Partitions  []int     `json:"partitions"`
}

// liveness is what the runners bucket says about a runner right now.
type liveness int

const (
	alive     liveness = iota // same incarnation, fresh heartbeat
	restarted                 // same runner identity, a new incarnation
	gone                      // no fresh heartbeat at all
	// selfCrashed: the record names this very incarnation, yet no run of
	// it is live here: the run died inside this process.
	selfCrashed
)

// peers reads the runners bucket: heartbeats older than staleAfter do not
// count. A missing bucket entry and a stale one mean the same thing.
type peers struct {
	kv         jetstream.KeyValue
	staleAfter time.Duration
}

func (p peers) put(ctx context.Context, id string, b beat) error {
	data, err := json.Marshal(b)
	if err != nil {
		return err
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

// status tells whether the run a record names may still be driven by its
// runner.
func (p peers) status(ctx context.Context, id, incarnation string) (liveness, error) {
	e, err := p.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return gone, nil
	}
	if err != nil {
		return alive, fmt.Errorf("runner %s: read heartbeat: %w", id, err)
	}
	var b beat
	if err := json.Unmarshal(e.Value(), &b); err != nil {
		return gone, nil
	}
	if b.Incarnation != incarnation {
		return restarted, nil
	}
	if time.Since(e.Created()) > p.staleAfter {
		return gone, nil
	}
	return alive, nil
}

// live counts runners with a fresh heartbeat (at least 1: the caller).
func (p peers) live(ctx context.Context) (int, error) {
	lister, err := p.kv.ListKeys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return 1, nil
		}
		return 1, err
	}
	n := 0
	for key := range lister.Keys() {
		e, err := p.kv.Get(ctx, key)
		if err != nil {
			continue
		}
		if time.Since(e.Created()) <= p.staleAfter {
			n++
		}
	}
	if n < 1 {
		n = 1
	}
	return n, nil
}

// holders maps each partition to the live runner that says it holds it.
func (p peers) holders(ctx context.Context) map[int]string {
	out := map[int]string{}
	lister, err := p.kv.ListKeys(ctx)
	if err != nil {
		return out
	}
	for key := range lister.Keys() {
		e, err := p.kv.Get(ctx, key)
		if err != nil || time.Since(e.Created()) > p.staleAfter {
			continue
		}
		var b beat
		if json.Unmarshal(e.Value(), &b) != nil {
			continue
		}
		for _, n := range b.Partitions {
			out[n] = key
		}
	}
	return out
}
