package runner

import (
	"context"
	"fmt"
	"time"

	"jetway/pkg/handover"
)

// DefaultRecoveryWait bounds how long a recovery waits for a jobs worker
// that does not answer (Config.RecoveryWait).
const DefaultRecoveryWait = 2 * time.Minute

// childAskTimeout bounds one child_state question. A worker cut off from
// NATS answers nothing; the actor asks again at its next try rather than
// holding the session for the client's 30 s.
const childAskTimeout = 5 * time.Second

// childState asks whether an interrupted run's foreground processes are
// gone. A runner with no process-running tools started none. The error
// says the jobs worker could not be asked at all.
func (r *Runner) childState(ctx context.Context, s SessionRef) (handover.ChildState, error) {
	if r.cfg.ChildState != nil {
		ctx, cancel := context.WithTimeout(ctx, childAskTimeout)
		defer cancel()
		return r.cfg.ChildState(ctx, s)
	}
	if r.cfg.Tools == nil {
		return handover.ChildGone, nil
	}
	return handover.ChildUnknown, nil
}

// waitForWorker decides whether a recovery whose jobs worker could not be
// asked (why) waits for it. A worker that is merely unreachable — its link
// cut for a few seconds, a restart — is no reason to leave the session
// interrupted for a person; nor is it a reason to recover beside commands
// that may still run. So the recovery waits, the session record saying so
// (its reason, shown in the session detail, and since when in WorkerWait,
// so the bound holds whichever runner asks next), and is refused as before
// once the worker has been silent for bound. put writes the record at *rev.
func waitForWorker(ctx context.Context, rec *SessionRecord, rev *uint64, why error, bound time.Duration,
	put func(context.Context, SessionRecord, uint64) (uint64, error)) bool {
	now := time.Now().UTC()
	if rec.WorkerWait == nil {
		rec.WorkerWait = &now
		rec.Reason = fmt.Sprintf("recovery of run %s waits for the session's jobs worker, which did not answer whether the run's commands are gone "+
			"(%v); waiting since %s, at most %s", rec.Run, why, now.Format(time.RFC3339), bound)
		if n, err := put(ctx, *rec, *rev); err == nil {
			*rev = n
		}
	}
	return now.Sub(*rec.WorkerWait) < bound
}

// workerSilence is what a refused recovery adds when its worker never
// answered.
func workerSilence(rec SessionRecord, why error) string {
	if rec.WorkerWait == nil || why == nil {
		return ""
	}
	return fmt.Sprintf("; its jobs worker did not answer for %s (%v)", time.Since(*rec.WorkerWait).Round(time.Second), why)
}
