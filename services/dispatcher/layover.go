package dispatcher

import (
	"context"
	"net/http"
	"strings"

	"jetway/pkg/auth"
	"jetway/pkg/control/layovers"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
)

// ResumeNote is the steer a bare resume sends: an interrupted session
// waits for a person, and this is the person saying "go on".
const ResumeNote = "Go on with the interrupted work: check what the earlier run finished before repeating anything."

// ResumeRequest is the optional body of POST /v1/sessions/{session}/resume.
type ResumeRequest = api.ResumeRequest

// Resume sends an interrupted session on: a steer (the person's word, with
// precedence) that starts a Steered run over the interrupted work. On a
// session that is not interrupted it is an ordinary steer.
func (d *Dispatcher) Resume(ctx context.Context, p auth.Principal, session string, req ResumeRequest) (Accepted, error) {
	note := strings.TrimSpace(req.Note)
	if note == "" {
		note = ResumeNote
	}
	return d.Steer(ctx, p, session, SteerRequest{Note: note, ID: req.ID})
}

// LayoverList answers GET /v1/sessions/{session}/layovers.
type LayoverList = api.LayoverList

// Layovers lists one of the caller's sessions' layovers.
func (d *Dispatcher) Layovers(ctx context.Context, p auth.Principal, session string) ([]api.Layover, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return nil, err
	}
	kv, err := d.controlBucket(ctx)
	if err != nil {
		return nil, err
	}
	ls, err := layovers.List(ctx, kv, p.Tenant, session)
	if err != nil {
		return nil, unavailable("list layovers", err)
	}
	out := make([]api.Layover, 0, len(ls))
	for _, l := range ls {
		out = append(out, api.Layover{Tenant: l.Tenant, Session: l.Session, ID: l.ID, Event: l.Event,
			WaitingFor: l.WaitingFor, BookedBy: l.BookedBy, BookedAt: l.BookedAt, At: l.At, Checks: l.Checks})
	}
	return out, nil
}

// CancelLayover cancels one of the caller's sessions' layovers; it reports
// whether there was one.
func (d *Dispatcher) CancelLayover(ctx context.Context, p auth.Principal, session string) (bool, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return false, err
	}
	kv, err := d.controlBucket(ctx)
	if err != nil {
		return false, err
	}
	ok, err := layovers.Cancel(ctx, d.js, kv, p.Tenant, session)
	if err != nil {
		return false, unavailable("cancel layover", err)
	}
	return ok, nil
}

func (d *Dispatcher) handleResume(w http.ResponseWriter, r *http.Request) {
	p, err := d.principal(r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	var req ResumeRequest
	if err := d.decodeJSON(w, r, &req, true); err != nil {
		d.fail(w, r, err)
		return
	}
	acc, err := d.Resume(r.Context(), p, r.PathValue("session"), req)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, acc)
}

func (d *Dispatcher) handleLayovers(w http.ResponseWriter, r *http.Request) {
	p, err := d.principal(r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	ls, err := d.Layovers(r.Context(), p, r.PathValue("session"))
	if err != nil {
		d.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, LayoverList{Layovers: ls})
}

func (d *Dispatcher) handleCancelLayover(w http.ResponseWriter, r *http.Request) {
	p, err := d.principal(r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	ok, err := d.CancelLayover(r.Context(), p, r.PathValue("session"))
	if err != nil {
		d.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.LayoverCancelled{Cancelled: ok})
}
