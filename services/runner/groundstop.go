package runner

import (
	"jetway/pkg/agent/tool"
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
		if c.Covers(a.tenant, a.session, a.sub.Lineage()...) {
			actors = append(actors, a)
		}
	}
	r.mu.Unlock()
	for _, a := range actors {
		switch {
		case !c.On:
			a.poke()
		case a.box.busy():
			// The live run ends at once with every started tool call given
			// a result, and finishRun marks the session stopped. A parked
			// actor has no run and is left parked.
			a.send(func(a *actor) {
				if a.run != nil {
					a.run.stop(errGroundStop)
				}
			})
		}
	}
	if c.On {
		r.log.Warn().Str("switch", c.Key).Str("reason", c.Record.Reason).Msg("ground stop on")
	} else {
		r.log.Info().Str("switch", c.Key).Msg("ground stop lifted")
	}
}

// errGroundStop is the cause a Ground Stop cancels a run with: a tool call
// it cut off reads that, not that its outcome is unknown, since the jobs
// worker kills the session's commands on the same switch.
var errGroundStop = tool.CancelCause("cancelled by Ground Stop: a person stopped this session's work while this call ran; " +
	"the jobs worker killed the session's running commands (their notices say so), and nothing starts again until the switch is lifted")

// grounded reports whether Ground Stop covers the session now
// (groundstop.Covering: a sub-agent's ancestors' switches too). The
// runner consumes nothing before its mirror is ready (startControl), so a
// switch set before it started holds for its first event.
func (a *actor) grounded() (groundstop.Record, bool) {
	return a.r.stops.Active(a.tenant, a.session, a.sub.Lineage()...)
}
