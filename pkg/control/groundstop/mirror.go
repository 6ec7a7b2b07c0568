package groundstop

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/pkg/bus/kvmirror"
)

// Change is one switch turning on or off, as a Mirror reports it.
type Change struct {
	// Key is the switch's key; Tenant and Session its scope (both empty for
	// the global switch, Session empty for a tenant's).
	Key             string
	Tenant, Session string
	On              bool
	// Record is what the switch holds while on.
	Record Record
	// Revision is the bucket revision that made the change.
	Revision uint64
	// Initial marks the switches that were already on when the mirror
	// started: state, not news.
	Initial bool
}

// Mirror is a live copy of every Ground Stop switch, kept by a KV mirror,
// so a service answers "may this session run?" from memory on every run
// start and model call. Wait on Ready before trusting it: until then a
// switch set before the service started may not be in it yet.
type Mirror struct {
	m *kvmirror.Mirror

	mu sync.RWMutex
	on map[string]Record // switches that are on, by key
}

// StartMirror mirrors the switches in kv until ctx ends. onChange, when
// set, hears every switch that turns on or off, the initial ones first,
// after the mirror already answers with it; it runs on the mirror's
// goroutine and must not block for long.
func StartMirror(ctx context.Context, kv jetstream.KeyValue, log zerolog.Logger, onChange func(Change)) *Mirror {
	gm := &Mirror{on: map[string]Record{}}
	gm.m = kvmirror.Start(ctx, kvmirror.Config{
		Name:    "ground stop",
		KV:      kv,
		Filters: []string{KeyGlobal, WatchPattern},
		Log:     log,
		OnChange: func(c kvmirror.Change) {
			ch, ok := gm.note(c)
			if ok && onChange != nil {
				onChange(ch)
			}
		},
	})
	return gm
}

// Ready is closed once every switch that existed at start is in.
func (gm *Mirror) Ready() <-chan struct{} { return gm.m.Ready() }

// WaitReady waits for Ready or ctx.
func (gm *Mirror) WaitReady(ctx context.Context) error { return gm.m.WaitReady(ctx) }

// Active reports whether a switch that covers tenant/session (Covering,
// with lineage for a sub-agent) is on, with the widest one's record.
func (gm *Mirror) Active(tenant, session string, lineage ...string) (Record, bool) {
	if c := gm.Covering(tenant, session, lineage); len(c) > 0 {
		return c[0].Record, true
	}
	return Record{}, false
}

// Covered is a switch that is on and covers a session, and what it holds.
type Covered struct {
	Scope  Scope
	Record Record
}

// Covering lists every switch that is on and covers tenant/session (or,
// for a sub-agent, an ancestor in lineage), the widest first, so a person
// can be told each one that must be lifted.
func (gm *Mirror) Covering(tenant, session string, lineage []string) []Covered {
	gm.mu.RLock()
	defer gm.mu.RUnlock()
	if len(gm.on) == 0 {
		return nil // the common case, on every run start and model call
	}
	var out []Covered
	for _, s := range Covering(tenant, session, lineage) {
		if rec, ok := gm.on[s.Key()]; ok {
			out = append(out, Covered{Scope: s, Record: rec})
		}
	}
	return out
}

// AnySessionOn reports whether a session switch of tenant is on: only then
// can a sub-agent of that tenant be held by an ancestor's switch, so a
// caller reads a session's lineage only when it can matter.
func (gm *Mirror) AnySessionOn(tenant string) bool {
	gm.mu.RLock()
	defer gm.mu.RUnlock()
	for key := range gm.on {
		if t, s, ok := scope(key); ok && t == tenant && s != "" {
			return true
		}
	}
	return false
}

// IsReady reports, without waiting, whether Ready is closed.
func (gm *Mirror) IsReady() bool {
	select {
	case <-gm.m.Ready():
		return true
	default:
		return false
	}
}

// Flipped folds in a switch this process has just set or cleared, so its
// own next answer says so without waiting for the watch to bring the
// change back (which it then does, to the same effect).
func (gm *Mirror) Flipped(key string, rec Record, on bool) {
	gm.mu.Lock()
	defer gm.mu.Unlock()
	if on {
		gm.on[key] = rec
		return
	}
	delete(gm.on, key)
}

// note folds one mirrored change in and says what it was; a key that is
// not a switch is ignored.
func (gm *Mirror) note(c kvmirror.Change) (Change, bool) {
	tenant, session, ok := scope(c.Key)
	if !ok {
		return Change{}, false
	}
	ch := Change{Key: c.Key, Tenant: tenant, Session: session, On: !c.Deleted,
		Revision: c.Entry.Revision(), Initial: c.Initial}
	gm.mu.Lock()
	if ch.On {
		ch.Record = decode(c.Entry)
		gm.on[c.Key] = ch.Record
	} else {
		delete(gm.on, c.Key)
	}
	gm.mu.Unlock()
	return ch, true
}

// scope splits a switch key into its tenant and session.
func scope(key string) (tenant, session string, ok bool) {
	if key == KeyGlobal {
		return "", "", true
	}
	rest, ok := strings.CutPrefix(key, KeyGlobal+".")
	if !ok || rest == "" {
		return "", "", false
	}
	tenant, session, _ = strings.Cut(rest, ".")
	if strings.Contains(session, ".") {
		return "", "", false
	}
	return tenant, session, true
}

// decode reads a switch's record. A value set by hand that is not JSON
// still stops: failing open would run sessions an operator meant to stop.
func decode(e jetstream.KeyValueEntry) Record {
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return Record{Reason: string(e.Value()), At: e.Created()}
	}
	return rec
}
