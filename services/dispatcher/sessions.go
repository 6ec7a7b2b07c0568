package dispatcher

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
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

// follow reads the session's output and headlines from JETWAY_OUT, in
// order, with an ordered consumer: gap-free delivery, and nothing to clean
// up when the follower goes. last, when set, is the stream sequence the
// follower has already (an SSE event's id): the read starts after it.
// Otherwise from "new" starts with the next message, and anything else
// with what the stream still holds for the session.
func (d *sessionsCore) follow(ctx context.Context, p auth.Principal, session, last, from string) (jetstream.MessagesContext, error) {
	out, err := events.OutSubject(p.Tenant, session)
	if err != nil {
		return nil, err
	}
	notify, err := events.NotifySubject(p.Tenant, session)
	if err != nil {
		return nil, err
	}
	cc := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{out, notify},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if err := startAt(&cc, last, from); err != nil {
		return nil, err
	}
	cons, err := d.js.OrderedConsumer(ctx, bus.StreamOut, cc)
	if err != nil {
		return nil, unavailable("follow "+bus.StreamOut, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, unavailable("follow "+bus.StreamOut, err)
	}
	return it, nil
}

// startAt sets where a follow starts (see follow).
func startAt(cc *jetstream.OrderedConsumerConfig, last, from string) error {
	switch {
	case last != "":
		seq, err := strconv.ParseUint(last, 10, 64)
		// The stream is read from seq+1: the largest uint64 would wrap to 0,
		// which JetStream refuses; it is no sequence a stream ever had.
		if err == nil && seq == math.MaxUint64 {
			err = strconv.ErrRange
		}
		if err != nil {
			return problemf(http.StatusBadRequest, "bad-request", "Invalid Last-Event-ID",
				"Last-Event-ID %q is not a stream sequence number", shortenQ(last))
		}
		cc.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cc.OptStartSeq = seq + 1
	case from == "new":
		cc.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	return nil
}
