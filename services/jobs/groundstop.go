package jobs

import (
	"slices"

	"jetway/pkg/control/groundstop"
	"jetway/pkg/tasks"
	"jetway/services/jobs/jobsapi"
)

// Ground Stop on the worker. The worker kills on the switches it watches
// itself rather than waiting to be asked by a runner: it is the one
// process that holds every command and MCP server of its sessions, it
// already mirrors the switches (its MCP servers stopped on them), and a
// runner only knows the sessions it holds in memory — a sub-agent parked
// and evicted there can still have a background job running here for
// hours. So nothing new travels between services for a stop: the worker
// hears the switch, kills at once, and tells the session the way it tells
// any job's end (io.jetway.job.exited), which the runner holds with the
// session's other events while the switch is on.

// GroundStopNote is the line a command killed by Ground Stop ends its
// output with, so the model reads why in the job's notice, in a foreground
// call's answer and in the output file. It names no reason: a switch's
// reason may be the operator's or another scope's, which a tenant must not
// read (SECURITY.md, Roles and Ground Stop).
const GroundStopNote = "[jobs] killed by Ground Stop: a person stopped this session's work; nothing starts again until the switch is lifted and someone asks"

// onStop is the Ground Stop mirror's callback. A switch turning on (also
// one already on when the worker starts: state, but a command may have
// started in between) kills the commands and stops the MCP servers of
// every session it covers, a sub-agent through its ancestors; a switch
// turning off starts nothing. It runs on the mirror's goroutine, so the
// kills run on their own.
func (w *Worker) onStop(c groundstop.Change) {
	if !c.On {
		return
	}
	go w.groundStop(c)
}

// groundStop kills what switch c covers: each covered session's running
// commands at once (SIGKILL, no grace: it is an emergency stop), with
// GroundStopNote last in their output, and its MCP servers. The ends are
// published as exited events even for a command a run call waits for: the
// runner cancels that call's run on the same switch, so its answer may
// reach nobody.
func (w *Worker) groundStop(c groundstop.Change) {
	covered := func(sid string) bool {
		tenant, session := splitSession(sid)
		w.mu.Lock()
		l := w.lineage[sid]
		w.mu.Unlock()
		return c.Covers(tenant, session, l...)
	}
	w.mu.Lock()
	var sids []string
	for sid := range w.bound {
		sids = append(sids, sid)
	}
	w.mu.Unlock()
	if w.mgr == nil {
		return
	}
	for _, sid := range sids {
		if covered(sid) {
			w.groundKill(sid, c.Key)
		}
	}
}

// groundKill kills the session's running commands at once, with
// GroundStopNote, publishes their ends, and stops its MCP servers.
func (w *Worker) groundKill(sid, key string) {
	killed := 0
	for _, i := range w.mgr.KillSessionNow(sid, GroundStopNote) {
		if i.Status == tasks.Killed {
			w.emitExited(i)
			killed++
		}
	}
	w.mcp.stopSession(sid, "Ground Stop")
	if killed > 0 {
		w.cfg.Log.Warn().Str("session", sid).Str("switch", key).Int("commands", killed).Msg("jobs: ground stop killed the session's commands")
	}
}

// recheckGrounded closes the race between a start and a switch: a command
// that passed refuseGrounded just before the switch came on, and started
// after the kill had listed the session's commands, is killed here, once
// it is a task the kill can see.
func (w *Worker) recheckGrounded(s jobsapi.SessionRequest) {
	if w.refuseGrounded(s, "") != nil {
		w.groundKill(sessionKey(s.Tenant, s.Session), "recheck after a start")
	}
}

// noteLineage keeps a sub-agent's ancestors from the first request that
// names them; they never change.
func (w *Worker) noteLineage(sid string, lineage []string) {
	if len(lineage) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.lineage[sid]; !ok {
		w.lineage[sid] = slices.Clone(lineage)
	}
}

// refuseGrounded refuses to start anything for a session a switch covers
// (its own, its tenant's, the global one, or an ancestor's), saying what
// does not happen: a call racing the switch must not start what the kill
// just ended.
func (w *Worker) refuseGrounded(s jobsapi.SessionRequest, what string) error {
	if w.stops == nil {
		return nil
	}
	sid := sessionKey(s.Tenant, s.Session)
	w.noteLineage(sid, s.Lineage)
	w.mu.Lock()
	sessions := append([]string{s.Session}, w.lineage[sid]...)
	w.mu.Unlock()
	for _, sess := range sessions {
		if _, on := w.stops.Active(s.Tenant, sess); on {
			return &jobsapi.Error{Code: jobsapi.CodeConflict,
				Message: "Ground Stop holds session " + s.Tenant + "/" + s.Session + ": " + what + " until the switch is lifted"}
		}
	}
	return nil
}
