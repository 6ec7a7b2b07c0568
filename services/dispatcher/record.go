package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/handover"
)

// sessionRecord is what the dispatcher reads of the session record the
// runner writes: the fields its answers show. Unknown fields are ignored
// here and kept by the writes (casPolicy passes them through as bytes).
type sessionRecord struct {
	State  string                     `json:"state"`
	Run    string                     `json:"run,omitempty"`
	Cause  string                     `json:"cause,omitempty"`
	Reason string                     `json:"reason,omitempty"`
	Since  time.Time                  `json:"since"`
	Runs   int                        `json:"runs"`
	Agent  string                     `json:"agent,omitempty"`
	Policy *handover.RecoveryOverride `json:"policy,omitempty"`
}

// storedRecord is one read of a session record: the entry as stored and
// its decoded fields. Found is false when the session has no record (a
// missing record is an idle session, as the runner reads it).
type storedRecord struct {
	Found    bool
	Raw      []byte
	Revision uint64
	Updated  time.Time
	Rec      sessionRecord
	// Err is why Raw did not decode: the record is shown as it is, and the
	// routes that need its fields say it is unreadable.
	Err error
}

// readRecord is the one place the dispatcher reads a session record (the
// policy write's compare-and-swap aside, which must see the bytes it
// replaces). The record's type belongs to its writer, the runner; reading
// it through this one function keeps the dispatcher's view of it in one
// place.
func (d *Dispatcher) readRecord(ctx context.Context, tenant, session string) (storedRecord, error) {
	kv, err := d.bucket(ctx, bus.BucketSessions)
	if err != nil || kv == nil {
		return storedRecord{Rec: sessionRecord{State: "idle"}}, err
	}
	e, err := kv.Get(ctx, tenant+"."+session)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return storedRecord{Rec: sessionRecord{State: "idle"}}, nil
	case err != nil:
		return storedRecord{}, unavailable("read session record", err)
	}
	sr := storedRecord{Found: true, Raw: e.Value(), Revision: e.Revision(), Updated: e.Created()}
	if _, err := recordFields(tenant, session, e.Value()); err != nil {
		sr.Err = err
		return sr, nil
	}
	if err := json.Unmarshal(e.Value(), &sr.Rec); err != nil {
		sr.Err = err
	}
	if sr.Rec.State == "" {
		sr.Rec.State = "idle"
	}
	return sr, nil
}
