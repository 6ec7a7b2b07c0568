package jobs

import (
	"context"
	"fmt"

	"jetway/pkg/control/sessionrec"
	"jetway/services/jobs/jobsapi"
)

// checkFence refuses a request made for a run that is no longer its
// session's live run. The runners keep one live run per session at their
// own writes (the transcript's fence, the record's compare-and-swap), but a
// runner frozen or cut off mid-run does not learn it lost the session until
// it writes — and a command is an effect before any write. So the worker,
// where the effect happens, asks the session record itself: one direct get
// per command, small beside starting a process, and exact (a run id names
// one claim of the session; a mirror could lag behind a takeover).
//
// A request with no fence (an operator's tool, a benchmark) is not
// checked. A record that cannot be read refuses the request: a command
// that cannot be shown to be the live run's does not start.
func (w *Worker) checkFence(ctx context.Context, s jobsapi.SessionRequest, what string) error {
	if s.Fence == "" {
		return nil
	}
	rec, _, err := sessionrec.Get(ctx, w.sessKV, s.Tenant, s.Session)
	if err != nil {
		return &jobsapi.Error{Code: jobsapi.CodeUnavailable, Message: fmt.Sprintf(
			"refused: %s for run %s: the session record could not be read to check that the run is still live: %v", what, s.Fence, err)}
	}
	if rec.State == sessionrec.StateRunning && rec.Run == s.Fence {
		return nil
	}
	return &jobsapi.Error{Code: jobsapi.CodeConflict, Message: fmt.Sprintf(
		"refused: %s for run %s, which is no longer session %s/%s's live run (the session record says %s%s): "+
			"the session moved on — another runner took it over or the run ended — so this run starts nothing more",
		what, s.Fence, s.Tenant, s.Session, rec.State, liveRunOf(rec))}
}

// liveRunOf names the run a record says is live, for a refusal's text.
func liveRunOf(rec sessionrec.Record) string {
	if rec.State != sessionrec.StateRunning {
		return ""
	}
	return fmt.Sprintf(", run %s on runner %s", rec.Run, rec.Runner)
}
