package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/control/layovers"
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

// Layover is work a run set down on purpose (see package layovers).
type Layover = layovers.Layover

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
func (r *Runner) layoverTool(tenant, session, run string, checks uint32) tool.Tool {
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
			l, err := r.bookLayover(ctx, tenant, session, run, in.WaitingFor, d, checks)
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
	// The target must be in the holder's stream (JETWAY_SCHEDULES); it
	// reaches the session's shard as its events subject by sourcing.
	target, _ := events.FiredSubject(bus.PartitionFor(tenant, session, r.partitions), tenant, session)
	msg, err := events.Encode(ctx, holder, ev)
	if err != nil {
		return Layover{}, err
	}
	if _, err := r.js.PublishMsg(ctx, msg, jetstream.WithScheduleAt(at), jetstream.WithScheduleTarget(target)); err != nil {
		return Layover{}, fmt.Errorf("schedule resume: %w", err)
	}
	if err := layovers.Put(ctx, r.control, l); err != nil {
		return Layover{}, err
	}
	return l, nil
}

// Layovers lists the layovers of a tenant ("" for all tenants).
func (r *Runner) Layovers(ctx context.Context, tenant string) ([]Layover, error) {
	return layovers.List(ctx, r.control, tenant, "")
}

// CancelLayover removes a session's layover so it never fires.
func (r *Runner) CancelLayover(ctx context.Context, tenant, session string) error {
	_, err := layovers.Cancel(ctx, r.js, r.control, tenant, session)
	return err
}

// currentLayover reports whether a resume event belongs to the session's
// current layover. A resume for a layover that was cancelled or replaced is
// stale and refused.
func (r *Runner) currentLayover(ctx context.Context, tenant, session, eventID string) (bool, error) {
	l, ok, err := layovers.Get(ctx, r.control, tenant, session)
	return ok && l.Event == eventID, err
}

// dropLayover deletes the record of a layover whose resume was taken.
func (r *Runner) dropLayover(ctx context.Context, tenant, session, eventID string) {
	if ok, err := r.currentLayover(ctx, tenant, session, eventID); err == nil && ok {
		_ = r.control.Delete(ctx, layovers.Key(tenant, session))
	}
}
