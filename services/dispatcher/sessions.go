package dispatcher

import (
	"context"
	"net/http"
	"strings"

	"github.com/rs/zerolog"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/events"
)

// sessionsCore reads and keeps the sessions: their records and detail
// (detail.go), layovers (layover.go), recovery policy (recovery.go) and
// transcript (transcript.go). What is sent into a session is the events
// core's; its jobs are the jobs core's.
type sessionsCore struct {
	*store
	log        zerolog.Logger
	groundStop *stopCore

	// beforeRecordWrite, when set (tests only), runs between reading a
	// session record and writing it back, so a test can write in between.
	beforeRecordWrite func(key string)
}

// Sessions lists the caller's sessions that have a record.
func (d *sessionsCore) Sessions(ctx context.Context, p auth.Principal) ([]SessionInfo, error) {
	entries, err := d.scan(ctx, bus.BucketSessions, p.Tenant+".*")
	if err != nil {
		return nil, err
	}
	out := make([]SessionInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, SessionInfo{
			Session:  strings.TrimPrefix(e.Key(), p.Tenant+"."),
			Revision: e.Revision(),
			Updated:  e.Created(),
			Record:   asJSON(e.Value()),
		})
	}
	return out, nil
}

// Session reads one of the caller's session records.
func (d *sessionsCore) Session(ctx context.Context, p auth.Principal, session string) (SessionInfo, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return SessionInfo{}, err
	}
	sr, err := d.readRecord(ctx, p.Tenant, session)
	if err != nil {
		return SessionInfo{}, err
	}
	if !sr.Found {
		return SessionInfo{}, noSession(p.Tenant, session)
	}
	return sessionInfo(session, sr), nil
}

func sessionInfo(session string, sr storedRecord) SessionInfo {
	return SessionInfo{Session: session, Revision: sr.Revision, Updated: sr.Updated, Record: asJSON(sr.Raw)}
}

// noSession is the answer for a session the caller's tenant has no trace
// of: the same whether it exists in another tenant or nowhere, so a token
// learns nothing about other tenants' sessions.
func noSession(tenant, session string) *Problem {
	return problemf(http.StatusNotFound, "not-found", "No such session",
		"tenant %q has no record of session %q", tenant, session)
}
