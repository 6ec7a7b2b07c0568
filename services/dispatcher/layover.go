package dispatcher

import (
	"context"

	"jetway/pkg/auth"
	"jetway/pkg/control/layovers"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
)

// LayoverList answers GET /v1/sessions/{session}/layovers.
type LayoverList = api.LayoverList

// Layovers lists one of the caller's sessions' layovers.
func (d *sessionsCore) Layovers(ctx context.Context, p auth.Principal, session string) ([]api.Layover, error) {
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
func (d *sessionsCore) CancelLayover(ctx context.Context, p auth.Principal, session string) (bool, error) {
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
