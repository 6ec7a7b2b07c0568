package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/control/sessionrec"
)

// storedRecord is one read of a session record: the entry as stored and
// its decoded fields. Found is false when the session has no record (a
// missing record is an idle session, as the runner reads it).
type storedRecord struct {
	Found    bool
	Raw      []byte
	Revision uint64
	Updated  time.Time
	Rec      sessionrec.Record
	// Err is why Raw did not decode: the record is shown as it is, and the
	// routes that need its fields say it is unreadable.
	Err error
}

// readRecord is the one place the dispatcher reads a session record (the
// policy write's compare-and-swap aside, which must see the bytes it
// replaces). The record's type belongs to its writer, the runner; reading
// it through this one function keeps the dispatcher's view of it in one
// place. The record's type is sessionrec.Record, the one the runner
// writes.
func (d *store) readRecord(ctx context.Context, tenant, session string) (storedRecord, error) {
	kv, err := d.bucket(ctx, bus.BucketSessions)
	if err != nil || kv == nil {
		return storedRecord{Rec: sessionrec.Record{State: sessionrec.StateIdle}}, err
	}
	e, err := kv.Get(ctx, sessionrec.Key(tenant, session))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return storedRecord{Rec: sessionrec.Record{State: sessionrec.StateIdle}}, nil
	case err != nil:
		return storedRecord{}, unavailable("read session record", err)
	}
	sr := storedRecord{Found: true, Raw: e.Value(), Revision: e.Revision(), Updated: e.Created()}
	if sr.Rec, err = sessionrec.Decode(e.Value()); err != nil {
		sr.Err = err
	}
	if sr.Rec.State == "" {
		sr.Rec.State = sessionrec.StateIdle
	}
	return sr, nil
}
