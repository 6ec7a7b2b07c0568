package jobs

import (
	"context"
	"fmt"
	"strings"
	"time"

	"jetway/pkg/tasks"
	"jetway/services/jobs/jobsapi"
)

// handOffKeep is how long a hand-off of a run with no call in flight is
// remembered: the run call it was meant for may still be on its way (the
// two requests are served on goroutines of their own), and must then not
// start its command.
const handOffKeep = time.Minute

// handOff is one run's hand-off: done once the run asked for it. Run calls
// of that run wait on done besides their timeout.
type handOff struct {
	done   context.Context
	cancel context.CancelFunc
	calls  int       // run calls of the run in flight
	at     time.Time // when it was asked for; zero: not yet
}

// joinHandOff registers a run call of runKey and returns its hand-off and
// the function that unregisters it; w.mu is not held.
func (w *Worker) joinHandOff(runKey string) (*handOff, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.purgeHandOffsLocked(time.Now())
	h := w.handOffs[runKey]
	if h == nil {
		h = &handOff{}
		h.done, h.cancel = context.WithCancel(context.Background())
		w.handOffs[runKey] = h
	}
	h.calls++
	return h, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if h.calls--; h.calls == 0 && h.at.IsZero() {
			h.cancel()
			delete(w.handOffs, runKey)
		}
	}
}

// opHandOff ends the waits of a run's foreground calls: the run was
// interrupted (a steer, the run's end), so each command goes on as a
// background job and each waiting call answers at once — with the command's
// end if it had ended, else Backgrounded — to a caller that still reads the
// answer. A run that is no longer the session's live run hands nothing off
// (checkFence): its commands stay in the foreground, where a recovering
// runner finds them alive and kills them.
func (w *Worker) opHandOff(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.HandOffRequest](data)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(r.Run) == "" || r.Fence != r.Run {
		return nil, badRequest("run is empty or not the request's fence: name the interrupted run in both")
	}
	if err := w.checkFence(ctx, r.SessionRequest, "hand-off of foreground commands"); err != nil {
		return nil, err
	}
	sid := sessionKey(r.Tenant, r.Session)
	runKey := sid + "\x00" + r.Run
	now := time.Now()
	w.mu.Lock()
	w.purgeHandOffsLocked(now)
	h := w.handOffs[runKey]
	if h == nil {
		h = &handOff{}
		h.done, h.cancel = context.WithCancel(context.Background())
		w.handOffs[runKey] = h
	}
	h.at = now
	h.cancel()
	var jobs []tasks.Info
	for _, i := range w.mgr.List(sid) {
		if i.RunID == r.Run && w.fgTasks[taskKey(sid, i.ID)] {
			jobs = append(jobs, i)
		}
	}
	w.mu.Unlock()
	w.cfg.Log.Info().Str("session", sid).Str("run", r.Run).Int("commands", len(jobs)).Msg("jobs: foreground commands handed to the background")
	return jobsapi.HandOffResponse{Jobs: w.wireAll(jobs)}, nil
}

// purgeHandOffsLocked forgets hand-offs older than handOffKeep with no
// call in flight, so the map holds only recent ones; w.mu is held.
func (w *Worker) purgeHandOffsLocked(now time.Time) {
	for k, h := range w.handOffs {
		if h.calls == 0 && !h.at.IsZero() && now.Sub(h.at) > handOffKeep {
			h.cancel()
			delete(w.handOffs, k)
		}
	}
}

// errHandedOff refuses a run call that arrives after its run's hand-off:
// the run was interrupted before the command started, so it does not start.
func errHandedOff(run string) error {
	return &jobsapi.Error{Code: jobsapi.CodeConflict, Message: fmt.Sprintf(
		"refused: run %s was interrupted before this command started, so it was not started", run)}
}
