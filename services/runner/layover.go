package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/events"
)

// LayoverToolName is the tool a run uses to set its work down.
const LayoverToolName = "layover"

// Layover bounds: a check sooner than a second is a busy loop, one later than
// a week is a forgotten session.
const (
	MinLayover = time.Second
	MaxLayover = 7 * 24 * time.Hour
)

// Layover is work a run set down on purpose, waiting for something; a
// JetStream message schedule fires an io.jetway.resume at At. It lives in
// the control bucket under layover.<tenant>.<session>, one per session.
type Layover struct {
	Tenant     string    `json:"tenant"`
	Session    string    `json:"session"`
	ID         string    `json:"id"`    // the schedule id, also the resume event's CE id
	Event      string    `json:"event"` // CE id of the io.jetway.resume it fires
	WaitingFor string    `json:"waiting_for"`
	BookedBy   string    `json:"booked_by"` // the run that set it down
	BookedAt   time.Time `json:"booked_at"`
	At         time.Time `json:"at"`
	Checks     uint32    `json:"checks"`
}

func layoverKey(tenant, session string) string { return "layover." + tenant + "." + session }

// layoverInput is the tool's input.
type layoverInput struct {
	WaitingFor string `json:"waiting_for"`
	CheckAfter string `json:"check_after"`
}

var layoverSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"waiting_for":{"type":"string","description":"what you are waiting for, so the run that picks the work up knows what to check"},` +
	`"check_after":{"type":"string","description":"when to check again, as a Go duration: 90s, 10m, 2h (1s to 168h)"}},` +
	`"required":["waiting_for","check_after"]}`)

// layoverTool lets the model set the work down: the run ends cleanly and a
// Resumed run picks it up after check_after.
func (a *actor) layoverTool(run string, checks uint32) tool.Tool {
	return tool.Func{
		Name: LayoverToolName,
		Description: "Set the work down while waiting for something that takes time (CI, a review, a deploy). " +
			"The run ends now; a new run resumes the work after check_after and is told what it was waiting for. " +
			"Prefer this to polling in a loop.",
		Schema: layoverSchema,
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
			var in layoverInput
			if err := json.Unmarshal(c.Input, &in); err != nil {
				return tool.Result{Content: "invalid input: " + err.Error(), IsError: true}, nil
			}
			d, err := time.ParseDuration(strings.TrimSpace(in.CheckAfter))
			if err != nil || d < MinLayover || d > MaxLayover {
				return tool.Result{Content: fmt.Sprintf("check_after %q: want a duration from %s to %s, like 10m", in.CheckAfter, MinLayover, MaxLayover), IsError: true}, nil
			}
			if strings.TrimSpace(in.WaitingFor) == "" {
				return tool.Result{Content: "waiting_for: say what you are waiting for", IsError: true}, nil
			}
			l, err := a.r.bookLayover(ctx, a.tenant, a.session, run, in.WaitingFor, d, checks)
			if err != nil {
				return tool.Result{Content: "could not set the work down: " + err.Error(), IsError: true}, nil
			}
			msg := fmt.Sprintf("Set down, waiting for: %s. The work resumes at %s (check %d).", l.WaitingFor, l.At.Format(time.RFC3339), l.Checks+1)
			return tool.Result{Content: msg, Stop: true, StopMessage: "layover: " + msg}, nil
		},
	}
}

// bookLayover schedules the resume and records the layover, replacing any
// earlier one of the session.
func (r *Runner) bookLayover(ctx context.Context, tenant, session, run, waitingFor string, d time.Duration, checks uint32) (Layover, error) {
	now := time.Now().UTC()
	// @at has second resolution: round up so the wait is never shorter.
	at := now.Add(d).Truncate(time.Second).Add(time.Second)
	ev, err := events.New(tenant, session, source, events.Resume{BookedBy: run, WaitingFor: waitingFor, BookedAt: now, Checks: checks})
	if err != nil {
		return Layover{}, err
	}
	id := newID("l-")
	l := Layover{Tenant: tenant, Session: session, ID: id, Event: ev.ID(), WaitingFor: waitingFor, BookedBy: run, BookedAt: now, At: at, Checks: checks}
	if err := r.CancelLayover(ctx, tenant, session); err != nil {
		return Layover{}, err
	}
	holder, err := events.ScheduleSubject(tenant, session, id)
	if err != nil {
		return Layover{}, err
	}
	target, _ := events.EventsSubject(tenant, session)
	msg, err := events.Encode(ctx, holder, ev)
	if err != nil {
		return Layover{}, err
	}
	if _, err := r.js.PublishMsg(ctx, msg, jetstream.WithScheduleAt(at), jetstream.WithScheduleTarget(target)); err != nil {
		return Layover{}, fmt.Errorf("schedule resume: %w", err)
	}
	data, _ := json.Marshal(l)
	if _, err := r.control.Put(ctx, layoverKey(tenant, session), data); err != nil {
		return Layover{}, fmt.Errorf("record layover: %w", err)
	}
	return l, nil
}

// Layovers lists the layovers of a tenant ("" for all tenants).
func (r *Runner) Layovers(ctx context.Context, tenant string) ([]Layover, error) {
	return ListLayovers(ctx, r.control, tenant)
}

// ListLayovers lists the layovers recorded in the control bucket.
func ListLayovers(ctx context.Context, control jetstream.KeyValue, tenant string) ([]Layover, error) {
	filter := "layover.>"
	if tenant != "" {
		filter = "layover." + tenant + ".*"
	}
	lister, err := control.ListKeysFiltered(ctx, filter)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("list layovers: %w", err)
	}
	var out []Layover
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

// CancelLayover removes a session's layover: its schedule is purged so it
// never fires, and its record deleted. Cancelling none is not an error.
func (r *Runner) CancelLayover(ctx context.Context, tenant, session string) error {
	return CancelLayover(ctx, r.js, r.control, tenant, session)
}

// CancelLayover is Runner.CancelLayover for any client with the rights.
func CancelLayover(ctx context.Context, js jetstream.JetStream, control jetstream.KeyValue, tenant, session string) error {
	e, err := control.Get(ctx, layoverKey(tenant, session))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cancel layover: %w", err)
	}
	var l Layover
	if json.Unmarshal(e.Value(), &l) == nil && l.ID != "" {
		holder, err := events.ScheduleSubject(tenant, session, l.ID)
		if err == nil {
			st, err := js.Stream(ctx, bus.StreamEvents)
			if err != nil {
				return fmt.Errorf("cancel layover: %w", err)
			}
			if err := st.Purge(ctx, jetstream.WithPurgeSubject(holder)); err != nil {
				return fmt.Errorf("cancel layover: purge schedule: %w", err)
			}
		}
	}
	if err := control.Delete(ctx, layoverKey(tenant, session)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("cancel layover: %w", err)
	}
	return nil
}

// currentLayover reports whether a resume event belongs to the session's
// current layover. A resume for a layover that was cancelled or replaced is
// stale and refused.
func (r *Runner) currentLayover(ctx context.Context, tenant, session, eventID string) (bool, error) {
	e, err := r.control.Get(ctx, layoverKey(tenant, session))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var l Layover
	return json.Unmarshal(e.Value(), &l) == nil && l.Event == eventID, nil
}

// dropLayover deletes the record of a layover whose resume was taken.
func (r *Runner) dropLayover(ctx context.Context, tenant, session, eventID string) {
	if ok, err := r.currentLayover(ctx, tenant, session, eventID); err == nil && ok {
		_ = r.control.Delete(ctx, layoverKey(tenant, session))
	}
}
