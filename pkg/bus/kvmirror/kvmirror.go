// Package kvmirror keeps a local copy of the keys of a JetStream KV bucket
// that match some filters, and tells its owner about every change.
//
// Every service watches a bucket or two (Ground Stop switches, session
// records, runner heartbeats). Written by hand, each watch loop grew its own
// answer to the same three questions — when is the copy complete, what
// happens when the watch ends, and did we miss anything while it was down —
// and the answers differed. A Mirror answers them once:
//
//   - Ready is closed when the copy holds every key that existed when the
//     first watch started, so a service can wait for it before acting.
//   - A watch that fails or ends is restarted with backoff, forever, until
//     the context ends.
//   - After a restart the copy is rebuilt from the bucket and compared with
//     the old one, so the owner hears of a key that changed or vanished while
//     the watch was down exactly as if it had watched all along.
package kvmirror

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Change is one key's new state. Entry is what made it: the put, or the
// delete marker (for a key that vanished while no watch ran and left no
// marker, its last put).
type Change struct {
	Key     string
	Entry   jetstream.KeyValueEntry
	Deleted bool
	// Initial is true for the changes of the first copy: the state the
	// bucket was already in, not something that happened while watching.
	Initial bool
}

// Config says what to mirror and who to tell.
type Config struct {
	// Name names the mirror in logs and errors ("ground stop", "session records").
	Name string
	// KV is the bucket to watch.
	KV jetstream.KeyValue
	// Filters are KV key patterns (with * and >); none means every key.
	Filters []string
	// OnChange, when set, is called for every change, one at a time and in
	// order, from the mirror's goroutine: first for each key of the initial
	// copy, then for each update. It must not block for long.
	OnChange func(Change)
	// Keep, when set, says which entries the mirror holds. Memory then
	// follows what the owner needs (the sessions running now) rather than
	// the size of the bucket. Every put is still reported; a held key whose
	// new value is not kept leaves the mirror, and is reported as that put.
	// The first copy reports only what is kept.
	Keep func(jetstream.KeyValueEntry) bool
	// Log receives restarts. The zero logger discards.
	Log zerolog.Logger
	// Backoff is the first wait before restarting a failed watch, doubling
	// up to MaxBackoff. Defaults: 100 ms and 5 s.
	Backoff, MaxBackoff time.Duration
}

// Mirror is a live copy of the matching keys.
type Mirror struct {
	cfg   Config
	ready chan struct{}

	mu   sync.RWMutex
	keys map[string]jetstream.KeyValueEntry
	up   bool // a watch is delivering updates now
}

// Start begins mirroring and returns at once; the mirror runs until ctx
// ends. Wait on Ready before trusting what it holds.
func Start(ctx context.Context, cfg Config) *Mirror {
	if cfg.Backoff <= 0 {
		cfg.Backoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Second
	}
	m := &Mirror{cfg: cfg, ready: make(chan struct{}), keys: map[string]jetstream.KeyValueEntry{}}
	go m.run(ctx)
	return m
}

// Ready is closed once the first complete copy is in. It stays closed
// across restarts: a copy that is briefly stale is still the best answer.
func (m *Mirror) Ready() <-chan struct{} { return m.ready }

// WaitReady waits for Ready or ctx, and names the mirror in its error.
func (m *Mirror) WaitReady(ctx context.Context) error {
	select {
	case <-m.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kvmirror %s: not ready: %w", m.cfg.Name, ctx.Err())
	}
}

// Live reports whether a watch is delivering updates now (false while one
// is being restarted).
func (m *Mirror) Live() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.up
}

// Get returns the entry of key, if the key is present.
func (m *Mirror) Get(key string) (jetstream.KeyValueEntry, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.keys[key]
	return e, ok
}

// Entries returns a copy of every present entry, keyed by key.
func (m *Mirror) Entries() map[string]jetstream.KeyValueEntry {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string]jetstream.KeyValueEntry, len(m.keys))
	for k, e := range m.keys {
		out[k] = e
	}
	return out
}

func (m *Mirror) run(ctx context.Context) {
	wait := m.cfg.Backoff
	for ctx.Err() == nil {
		err := m.watchOnce(ctx)
		m.setUp(false)
		if ctx.Err() != nil {
			return
		}
		m.cfg.Log.Warn().Err(err).Str("mirror", m.cfg.Name).Dur("retry_in", wait).Msg("kv watch ended; restarting")
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, m.cfg.MaxBackoff)
	}
}

// watchOnce runs one watch: it gathers the initial values into a fresh
// copy, reconciles it with the old one, then applies updates until the
// watch ends. The error says why it ended.
func (m *Mirror) watchOnce(ctx context.Context) error {
	w, err := m.watch(ctx)
	if err != nil {
		return fmt.Errorf("kvmirror %s: watch: %w", m.cfg.Name, err)
	}
	defer func() { _ = w.Stop() }()
	fresh := map[string]jetstream.KeyValueEntry{}
	tombs := map[string]jetstream.KeyValueEntry{}
	left := map[string]jetstream.KeyValueEntry{} // held keys now put with a value not kept
	initial := true
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("kvmirror %s: watch closed", m.cfg.Name)
			}
			switch {
			case e == nil && initial:
				initial = false
				m.reconcile(fresh, tombs, left)
			case e == nil:
			case initial:
				k := e.Key()
				delete(fresh, k)
				delete(tombs, k)
				delete(left, k)
				switch {
				case e.Operation() != jetstream.KeyValuePut:
					tombs[k] = e
				case m.keeps(e):
					fresh[k] = e
				case m.holds(k):
					left[k] = e
				}
			default:
				m.apply(e)
			}
		}
	}
}

func (m *Mirror) watch(ctx context.Context) (jetstream.KeyWatcher, error) {
	if len(m.cfg.Filters) == 0 {
		return m.cfg.KV.WatchAll(ctx)
	}
	return m.cfg.KV.WatchFiltered(ctx, m.cfg.Filters)
}

// reconcile swaps in a freshly read copy and reports what differs from the
// old one: keys that appeared or changed revision as puts, keys that
// vanished as deletes, keys whose value is no longer kept as that put.
func (m *Mirror) reconcile(fresh, tombs, left map[string]jetstream.KeyValueEntry) {
	m.mu.Lock()
	old := m.keys
	m.keys = fresh
	m.up = true
	m.mu.Unlock()
	first := !m.isReady()
	for k, e := range fresh {
		if o, ok := old[k]; !ok || o.Revision() != e.Revision() {
			m.notify(Change{Key: k, Entry: e, Initial: first})
		}
	}
	for k, o := range old {
		if _, ok := fresh[k]; ok {
			continue
		}
		if l, ok := left[k]; ok {
			m.notify(Change{Key: k, Entry: l})
			continue
		}
		if t, ok := tombs[k]; ok {
			o = t
		}
		m.notify(Change{Key: k, Entry: o, Deleted: true})
	}
	if first {
		close(m.ready)
	}
}

func (m *Mirror) keeps(e jetstream.KeyValueEntry) bool {
	return m.cfg.Keep == nil || m.cfg.Keep(e)
}

// holds reports whether key is in the copy. Only the mirror's goroutine
// changes the copy, so it may read it without the lock.
func (m *Mirror) holds(key string) bool {
	_, ok := m.keys[key]
	return ok
}

func (m *Mirror) isReady() bool {
	select {
	case <-m.ready:
		return true
	default:
		return false
	}
}

func (m *Mirror) apply(e jetstream.KeyValueEntry) {
	k := e.Key()
	put := e.Operation() == jetstream.KeyValuePut
	keep := put && m.keeps(e)
	m.mu.Lock()
	_, had := m.keys[k]
	if keep {
		m.keys[k] = e
	} else {
		delete(m.keys, k)
	}
	m.mu.Unlock()
	if put || had {
		m.notify(Change{Key: k, Entry: e, Deleted: !put})
	}
}

func (m *Mirror) notify(c Change) {
	if m.cfg.OnChange != nil {
		m.cfg.OnChange(c)
	}
}

func (m *Mirror) setUp(up bool) {
	m.mu.Lock()
	m.up = up
	m.mu.Unlock()
}
