// Package layovers reads and cancels layovers: work a run set down on
// purpose, waiting for something, with a JetStream message schedule that
// fires an io.jetway.resume when it is time to check again. The schedule's
// holder lives in JETWAY_SCHEDULES (jetway.schedules.<t>.<s>.<id>) and
// fires onto jetway.fired.<t>.<s>, which JETWAY_EVENTS sources as the
// session's events subject. Runners book them; the dispatcher and
// operators list and cancel them. It is its own small package so they
// need not import the runner.
package layovers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/events"
)

// Layover is work a run set down. It lives in the control bucket under
// layover.<tenant>.<session>, one per session.
type Layover struct {
	Tenant     string    `json:"tenant"`
	Session    string    `json:"session"`
	ID         string    `json:"id"`    // the schedule id
	Event      string    `json:"event"` // CE id of the io.jetway.resume it fires
	WaitingFor string    `json:"waiting_for"`
	BookedBy   string    `json:"booked_by"` // the run that set it down
	BookedAt   time.Time `json:"booked_at"`
	At         time.Time `json:"at"`
	Checks     uint32    `json:"checks"`
}

// Key is the control-bucket key of a session's layover.
func Key(tenant, session string) string { return "layover." + tenant + "." + session }

// List lists the layovers of a tenant ("" for all tenants), optionally of
// one session.
func List(ctx context.Context, control jetstream.KeyValue, tenant, session string) ([]Layover, error) {
	filter := "layover.>"
	switch {
	case tenant != "" && session != "":
		filter = Key(tenant, session)
	case tenant != "":
		filter = "layover." + tenant + ".*"
	}
	lister, err := control.ListKeysFiltered(ctx, filter)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("list layovers: %w", err)
	}
	out := []Layover{}
	for key := range lister.Keys() {
		e, err := control.Get(ctx, key)
		if err != nil {
			continue
		}
		var l Layover
		if json.Unmarshal(e.Value(), &l) == nil {
			out = append(out, l)
		}
	}
	return out, nil
}

// Get returns a session's layover and whether it has one.
func Get(ctx context.Context, control jetstream.KeyValue, tenant, session string) (Layover, bool, error) {
	e, err := control.Get(ctx, Key(tenant, session))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Layover{}, false, nil
	}
	if err != nil {
		return Layover{}, false, fmt.Errorf("layover %s/%s: %w", tenant, session, err)
	}
	var l Layover
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		return Layover{}, false, fmt.Errorf("layover %s/%s: %w", tenant, session, err)
	}
	return l, true, nil
}

// Put records a layover, replacing the session's earlier one.
func Put(ctx context.Context, control jetstream.KeyValue, l Layover) error {
	data, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if _, err := control.Put(ctx, Key(l.Tenant, l.Session), data); err != nil {
		return fmt.Errorf("record layover: %w", err)
	}
	return nil
}

// Cancel removes a session's layover: its schedule is purged so it never
// fires, and its record deleted. The purge is on JETWAY_SCHEDULES, the
// only stream where runners and the dispatcher have purge rights.
// Cancelling none is not an error; it reports whether there was one.
func Cancel(ctx context.Context, js jetstream.JetStream, control jetstream.KeyValue, tenant, session string) (bool, error) {
	l, ok, err := Get(ctx, control, tenant, session)
	if err != nil || !ok {
		return false, err
	}
	if l.ID != "" {
		holder, err := events.ScheduleSubject(tenant, session, l.ID)
		if err == nil {
			st, err := js.Stream(ctx, bus.StreamSchedules)
			if err != nil {
				return false, fmt.Errorf("cancel layover: %w", err)
			}
			if err := st.Purge(ctx, jetstream.WithPurgeSubject(holder)); err != nil {
				return false, fmt.Errorf("cancel layover: purge schedule: %w", err)
			}
		}
	}
	if err := control.Delete(ctx, Key(tenant, session)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, fmt.Errorf("cancel layover: %w", err)
	}
	return true, nil
}
