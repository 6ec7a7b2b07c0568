package runner

import (
	"jetway/pkg/control/groundstop"
)

// noteStop acts on a Ground Stop switch that changed: a switch turning on
// stops the live runs it covers at once; a switch turning off wakes every
// session it covered so held events go on in order. The mirror already
// answers with the change when this runs.
func (r *Runner) noteStop(c groundstop.Change) {
	if c.Initial {
		// State at start: no actor exists yet, and a busy bucket would
		// fill the log.
		r.log.Debug().Str("switch", c.Key).Str("reason", c.Record.Reason).Msg("ground stop on at start")
		return
	}
	r.mu.Lock()
	actors := make([]*actor, 0, len(r.actors))
	for _, a := range r.actors {
		if c.Covers(a.tenant, a.session) {
			actors = append(actors, a)
		}
	}
	r.mu.Unlock()
	for _, a := range actors {
		if c.On {
			a.stopRun()
		} else {
			a.poke()
		}
	}
	if c.On {
		r.log.Warn().Str("switch", c.Key).Str("reason", c.Record.Reason).Msg("ground stop on")
	} else {
		r.log.Info().Str("switch", c.Key).Msg("ground stop lifted")
	}
}

// grounded reports whether Ground Stop covers tenant/session now. The
// runner consumes nothing before its mirror is ready (startControl), so a
// switch set before it started holds for its first event.
func (r *Runner) grounded(tenant, session string) (groundstop.Record, bool) {
	return r.stops.Active(tenant, session)
}

// stopRun cancels the live run, if any: the loop ends at once with every
// started tool call given a result, and finishRun marks the session stopped.
func (a *actor) stopRun() {
	a.mu.Lock()
	run := a.run
	a.mu.Unlock()
	if run != nil {
		run.cancel()
	}
}
