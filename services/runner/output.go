package runner

import (
	"context"
	"time"

	"jetway/pkg/agent"
	"jetway/pkg/events"
	"jetway/pkg/handover"
)

// source names the runner as the publisher of run output.
const source = "jetway/runner"

// publishOut publishes one run output event on jetway.out.<tenant>.<session>
// with JetStream's ack, so a lifecycle event JETWAY_OUT did not store is
// logged, not silently lost. The ack is awaited off the run's path: the
// connection keeps the order of what follows (deltas, the next lifecycle
// event), and a run must not wait a round trip to say it started.
func (r *Runner) publishOut(ctx context.Context, tenant, session string, p events.Payload) {
	subj, err := events.OutSubject(tenant, session)
	if err != nil {
		return
	}
	ev, err := events.New(tenant, session, source, p)
	if err != nil {
		r.log.Warn().Err(err).Msg("output event")
		return
	}
	msg, err := events.Encode(ctx, subj, ev)
	if err != nil {
		r.log.Warn().Err(err).Msg("output event")
		return
	}
	fut, err := r.js.PublishMsgAsync(msg)
	if err != nil {
		r.log.Warn().Err(err).Str("type", p.EventType()).Msg("publish output")
		return
	}
	go func() {
		select {
		case <-fut.Ok():
		case err := <-fut.Err():
			r.log.Warn().Err(err).Str("type", p.EventType()).Msg("publish output")
		case <-time.After(outAckWait):
			r.log.Warn().Str("type", p.EventType()).Msg("publish output: no ack from JETWAY_OUT")
		}
	}()
}

// outAckWait is how long an output event's ack may take before it is
// logged as missing.
const outAckWait = 5 * time.Second

// publishDelta publishes streamed output as a core NATS message, which
// JETWAY_OUT stores without an ack round trip: a delta lost to a failure is
// in the transcript anyway, and a flood of deltas must not flood acks.
func (r *Runner) publishDelta(ctx context.Context, tenant, session string, p events.Payload) {
	subj, err := events.OutSubject(tenant, session)
	if err != nil {
		return
	}
	ev, err := events.New(tenant, session, source, p)
	if err != nil {
		return
	}
	msg, err := events.Encode(ctx, subj, ev)
	if err != nil {
		return
	}
	_ = r.cfg.NC.PublishMsg(msg)
}

// publishRunEvent turns one agent loop event into run output.
func (r *Runner) publishRunEvent(ctx context.Context, tenant, session, run string, ev agent.Event) {
	switch ev.Kind {
	case agent.KindText:
		r.publishDelta(ctx, tenant, session, events.RunText{Run: run, Text: ev.Text})
	case agent.KindToolUse:
		if b := ev.ToolUse; b != nil {
			r.publishDelta(ctx, tenant, session, events.ToolUse{Run: run, ID: b.ID, Name: b.Name, Input: b.Input})
		}
	case agent.KindToolResult:
		if b := ev.ToolResult; b != nil {
			line := handover.ToolCall{Name: b.Name, Input: string(b.Input), Result: b.Content, IsError: b.IsError, Finished: true}.Line()
			r.publishDelta(ctx, tenant, session, events.ToolResult{Run: run, ID: b.ToolUseID, Name: b.Name, Summary: line, IsError: b.IsError})
		}
	}
}
