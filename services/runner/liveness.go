package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
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
//
// The balance rule asks how many runners live and who holds what twice a
// second per partition; view answers that from a copy of the bucket kept
// by one watcher (see watchPeers), where listing the bucket each time made
// the server create and delete some thirty consumers a second per runner.
// Whether one given runner is alive (status) is always read afresh: a
// recovery rests on it.
type peers struct {
	kv         jetstream.KeyValue
	staleAfter time.Duration
	view       *peerView
	// self is this runner's own key: the copy is trusted only while it
	// holds a fresh heartbeat of self, which proves the watcher is still
	// delivering (a stalled one would age every runner out, self too).
	self string
}

// peerView is a copy of the runners bucket, current while ready.
type peerView struct {
	mu    sync.Mutex
	ready bool
	beats map[string]seenBeat
}

type seenBeat struct {
	beat
	at time.Time // when the server stored it
}

// fresh returns the heartbeats younger than staleAfter, or false when the
// copy is not current: the watcher has not caught up, has stopped, or no
// longer delivers self's own heartbeats.
func (v *peerView) fresh(self string, staleAfter time.Duration) (map[string]beat, bool) {
	if v == nil {
		return nil, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.ready {
		return nil, false
	}
	if own, ok := v.beats[self]; self != "" && (!ok || time.Since(own.at) > staleAfter) {
		return nil, false
	}
	out := make(map[string]beat, len(v.beats))
	for id, b := range v.beats {
		if time.Since(b.at) <= staleAfter {
			out[id] = b.beat
		}
	}
	return out, true
}

func (v *peerView) reset() {
	v.mu.Lock()
	v.ready, v.beats = false, make(map[string]seenBeat)
	v.mu.Unlock()
}

func (v *peerView) apply(e jetstream.KeyValueEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e == nil { // the watcher has handed over every stored heartbeat
		v.ready = true
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(v.beats, e.Key())
		return
	}
	var b beat
	if json.Unmarshal(e.Value(), &b) != nil {
		delete(v.beats, e.Key())
		return
	}
	v.beats[e.Key()] = seenBeat{beat: b, at: e.Created()}
}

// watchPeers keeps p.view current until ctx ends. An entry that expires
// leaves no marker in the bucket; the age check in fresh drops it. While
// the watcher is down the copy is not ready, and live and holders read the
// bucket themselves.
func (p peers) watchPeers(ctx context.Context, log zerolog.Logger) {
	for ctx.Err() == nil {
		p.view.reset()
		w, err := p.kv.WatchAll(ctx)
		if err != nil {
			log.Debug().Err(err).Msg("watch runner heartbeats")
		} else {
			for e := range w.Updates() {
				p.view.apply(e)
			}
			_ = w.Stop()
		}
		p.view.reset()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
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
	if beats, ok := p.view.fresh(p.self, p.staleAfter); ok {
		return max(len(beats), 1), nil
	}
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
	if beats, ok := p.view.fresh(p.self, p.staleAfter); ok {
		for id, b := range beats {
			for _, n := range b.Partitions {
				out[n] = id
			}
		}
		return out
	}
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
