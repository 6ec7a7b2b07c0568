package dispatcher

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/auth"
	"jetway/pkg/control/groundstop"
)

// stopMirror keeps the Ground Stop switches in memory, from a watch of the
// control bucket, so that an input's answer can say which switches hold
// its session without three key reads per input: on the input path those
// reads tripled the time to accept an event. Reads that must see a switch
// set a moment ago (a session's detail, a status read) still read the
// bucket. Until the watch has replayed every switch, and again while it
// restarts, the mirror is not ready and the answer reads the bucket.
type stopMirror struct {
	once  sync.Once
	mu    sync.RWMutex
	ready bool
	on    map[string]groundstop.Record // key → record of each switch that is on
}

// mirrorRetry is how long a failed watch waits before it starts again.
const mirrorRetry = time.Second

// heldFromMirror answers covering from the mirror; ok is false while the
// mirror is not ready. The first call starts the watch.
func (d *Dispatcher) heldFromMirror(p auth.Principal, session string) (held []StopSwitch, ok bool) {
	m := &d.stops
	m.once.Do(func() { go d.runStopMirror() })
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.ready {
		return nil, false
	}
	for _, s := range []struct{ scope, tenant, session string }{
		{"global", "", ""}, {"tenant", p.Tenant, ""}, {"session", p.Tenant, session},
	} {
		key, err := groundstop.Key(s.tenant, s.session)
		if err != nil {
			return nil, false
		}
		if rec, on := m.on[key]; on {
			held = append(held, switchOf(p, s.scope, rec))
		}
	}
	return held, true
}

// runStopMirror watches the switches until the connection closes,
// starting the watch again whenever it ends.
func (d *Dispatcher) runStopMirror() {
	for !d.nc.IsClosed() {
		d.watchStops()
		time.Sleep(mirrorRetry)
	}
}

// watchStops runs one watch: the replay of every switch, then each change.
func (d *Dispatcher) watchStops() {
	m := &d.stops
	defer func() {
		m.mu.Lock()
		m.ready, m.on = false, nil
		m.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	kv, err := d.controlBucket(ctx)
	cancel()
	if err != nil {
		return
	}
	w, err := kv.WatchFiltered(context.Background(), []string{groundstop.KeyGlobal, groundstop.WatchPattern})
	if err != nil {
		if !d.nc.IsClosed() {
			d.log.Warn().Err(err).Msg("watch Ground Stop switches")
		}
		return
	}
	defer w.Stop()
	on := map[string]groundstop.Record{}
	for e := range w.Updates() {
		m.mu.Lock()
		switch {
		case e == nil:
			m.ready, m.on = true, on
		case e.Operation() == jetstream.KeyValuePut:
			on[e.Key()] = stopRecord(e)
		default:
			delete(on, e.Key())
		}
		m.mu.Unlock()
	}
}

// stopRecord decodes a switch as groundstop.Get does: a value that is not
// a record is still a switch that is on.
func stopRecord(e jetstream.KeyValueEntry) groundstop.Record {
	var rec groundstop.Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return groundstop.Record{Reason: string(e.Value()), At: e.Created()}
	}
	return rec
}

// apply records a switch this dispatcher just flipped, so its own next
// answer says so without waiting for the watch to bring the change back.
func (m *stopMirror) apply(key string, rec groundstop.Record, on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.ready {
		return
	}
	if on {
		m.on[key] = rec
		return
	}
	delete(m.on, key)
}
