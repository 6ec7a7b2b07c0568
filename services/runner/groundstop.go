package runner

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/services/dispatcher/groundstop"
)

// watchGroundStop keeps r.stops in step with the Ground Stop switches in the
// control bucket. A switch turning on stops the live runs it covers at once;
// a switch turning off wakes every session so held events go on in order.
func (r *Runner) watchGroundStop(ctx context.Context) {
	w, err := r.control.WatchFiltered(ctx, []string{groundstop.KeyGlobal, groundstop.WatchPattern})
	if err != nil {
		r.log.Warn().Err(err).Msg("watch ground stop")
		return
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue
			}
			r.noteStop(e)
		}
	}
}

func (r *Runner) noteStop(e jetstream.KeyValueEntry) {
	key := e.Key()
	on := e.Operation() == jetstream.KeyValuePut
	var rec groundstop.Record
	if on && json.Unmarshal(e.Value(), &rec) != nil {
		rec.Reason = "unreadable switch record"
	}
	r.stopMu.Lock()
	if on {
		r.stops[key] = rec
	} else {
		delete(r.stops, key)
	}
	r.stopMu.Unlock()

	r.mu.Lock()
	actors := make([]*actor, 0, len(r.actors))
	for k, a := range r.actors {
		// k is "<tenant>.<session>": a tenant's switch covers every key
		// that starts with its tenant and a dot.
		if key == groundstop.KeyGlobal || key == groundstop.KeyGlobal+"."+k ||
			strings.HasPrefix(groundstop.KeyGlobal+"."+k, key+".") {
			actors = append(actors, a)
		}
	}
	r.mu.Unlock()
	for _, a := range actors {
		if on {
			a.stopRun()
		} else {
			a.poke()
		}
	}
	if on {
		r.log.Warn().Str("switch", key).Str("reason", rec.Reason).Msg("ground stop on")
	} else {
		r.log.Info().Str("switch", key).Msg("ground stop lifted")
	}
}

// grounded reports whether Ground Stop covers tenant/session now.
func (r *Runner) grounded(tenant, session string) (groundstop.Record, bool) {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	if rec, ok := r.stops[groundstop.KeyGlobal]; ok {
		return rec, true
	}
	if rec, ok := r.stops[groundstop.KeyGlobal+"."+tenant]; ok {
		return rec, true
	}
	rec, ok := r.stops[groundstop.KeyGlobal+"."+sessionKey(tenant, session)]
	return rec, ok
}

// stopRun cancels the live run, if any: the loop ends at once with every
// started tool call given a result, and finishRun marks the session stopped.
// A parked actor has no run and is left parked.
func (a *actor) stopRun() {
	if !a.busy() {
		return
	}
	a.send(func(a *actor) {
		if a.run != nil {
			a.run.cancel()
		}
	})
}
