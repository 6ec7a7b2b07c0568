package runner

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	msg, ok := r.outMsg(ctx, tenant, session, "", p)
	if !ok {
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

// publishRefusal tells the session's people that run's recovery was
// refused and why (a run.refused event), and waits until JETWAY_OUT has
// stored it, trying again for up to refusalPublishWait. A refusal is the
// one output that nothing after it repeats: the session waits for a
// person, and the record's reason is overwritten when one sends the work
// on. Published once and not stored (a NATS node stopping answered "no
// response from stream"), it was lost. Its CE id, so its dedupe id, is
// id (the session record's, refusalID), so a publish stored whose answer
// was lost is not stored twice by the next try.
func (r *Runner) publishRefusal(ctx context.Context, tenant, session, id, run, reason string) error {
	msg, ok := r.outMsg(ctx, tenant, session, id, events.RunRefused{Reason: reason})
	if !ok {
		return fmt.Errorf("publish the refusal of run %s: the event could not be built", run)
	}
	if err := publishStored(ctx, r.js, msg, refusalPublishWait); err != nil {
		r.log.Error().Err(err).Str("run", run).Msg("publish output: the refusal was not stored; the session record keeps it untold")
		return err
	}
	return nil
}

// outMsg builds output event p for jetway.out.<tenant>.<session>, with CE
// id id (a random one when id is empty); ok is false, logged, when it
// cannot be built.
func (r *Runner) outMsg(ctx context.Context, tenant, session, id string, p events.Payload) (*nats.Msg, bool) {
	subj, err := events.OutSubject(tenant, session)
	if err != nil {
		return nil, false
	}
	ev, err := events.New(tenant, session, source, p)
	if err != nil {
		r.log.Warn().Err(err).Msg("output event")
		return nil, false
	}
	if id != "" {
		ev.SetID(id)
	}
	msg, err := events.Encode(ctx, subj, ev)
	if err != nil {
		r.log.Warn().Err(err).Msg("output event")
		return nil, false
	}
	return msg, true
}

// refusalPublishWait bounds publishRefusal's tries: longer than a NATS
// node's restart or a stream leader's election. A variable for tests.
var refusalPublishWait = 30 * time.Second

// publishStored publishes msg and waits for its stream's ack, trying again
// with a growing pause (100 ms to 2 s) until one is stored, wait passes or
// ctx ends; it returns the last error.
func publishStored(ctx context.Context, js jetstream.JetStream, msg *nats.Msg, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	pause := 100 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.PublishMsg(pctx, msg)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().Add(pause).After(deadline) {
			return fmt.Errorf("publish %s: not stored in %s: %w", msg.Subject, wait, err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("publish %s: %w (last try: %w)", msg.Subject, ctx.Err(), err)
		case <-t.C:
		}
		pause = min(2*pause, 2*time.Second)
	}
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

// textWindow is how long a run's text that follows its first is gathered
// before it goes out as one run.text event: a model streams a token or two
// per chunk, and a message per chunk was most of what a runner's
// connection carried beyond its deliveries and acks. Twenty milliseconds
// is below what a reader can tell apart, and the first text of a turn is
// never held (runOutput).
const textWindow = 20 * time.Millisecond

// textBound is the gathered text that goes out at once, whatever the
// window: a run.text event stays a small message.
const textBound = 4 << 10

// runOutput is one run's streamed output on jetway.out, in the loop's
// order. Text is coalesced: the first text after anything else (the start
// of a turn, a tool call) is published at once, so the time to first text
// on a person's stream does not grow, and the text that follows is
// gathered for textWindow (or up to textBound) into one event. Every other
// event publishes what is gathered first, so text still comes before the
// tool_use after it, and close, before run.ended.
type runOutput struct {
	publish func(events.Payload)
	run     string
	window  time.Duration

	mu      sync.Mutex
	pending strings.Builder
	flowing bool // text went out since the last other event: more is gathered
	armed   bool // a flush is due at the end of the window
	closed  bool
	timer   *time.Timer
}

func newRunOutput(run string, window time.Duration, publish func(events.Payload)) *runOutput {
	o := &runOutput{publish: publish, run: run, window: window}
	o.timer = time.AfterFunc(time.Hour, o.windowEnded)
	o.timer.Stop()
	return o
}

// runOutput publishes a run's loop events through publishDelta.
func (r *Runner) runOutput(ctx context.Context, tenant, session, run string) *runOutput {
	return newRunOutput(run, textWindow, func(p events.Payload) { r.publishDelta(ctx, tenant, session, p) })
}

// event turns one agent loop event into run output.
func (o *runOutput) event(ev agent.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	switch ev.Kind {
	case agent.KindText:
		o.text(ev.Text)
		return
	case agent.KindThinking, agent.KindProgress:
		return // not published, and no break in the text
	}
	o.flushLocked()
	o.flowing = false
	switch ev.Kind {
	case agent.KindToolUse:
		if b := ev.ToolUse; b != nil {
			o.publish(events.ToolUse{Run: o.run, ID: b.ID, Name: b.Name, Input: b.Input})
		}
	case agent.KindToolResult:
		if b := ev.ToolResult; b != nil {
			line := handover.ToolCall{Name: b.Name, Input: string(b.Input), Result: b.Content, IsError: b.IsError, Finished: true}.Line()
			o.publish(events.ToolResult{Run: o.run, ID: b.ToolUseID, Name: b.Name, Summary: line, IsError: b.IsError})
		}
	}
}

// text publishes the first text of a turn at once and gathers the rest.
func (o *runOutput) text(s string) {
	if s == "" {
		return
	}
	if !o.flowing {
		o.flowing = true
		o.publish(events.RunText{Run: o.run, Text: s})
		return
	}
	o.pending.WriteString(s)
	if o.pending.Len() >= textBound {
		o.flushLocked()
		return
	}
	if !o.armed {
		o.armed = true
		o.timer.Reset(o.window)
	}
}

// windowEnded publishes the text gathered over the window.
func (o *runOutput) windowEnded() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.armed = false
	if !o.closed {
		o.flushLocked()
	}
}

func (o *runOutput) flushLocked() {
	if o.armed {
		o.armed = false
		o.timer.Stop()
	}
	if o.pending.Len() == 0 {
		return
	}
	o.publish(events.RunText{Run: o.run, Text: o.pending.String()})
	o.pending.Reset()
}

// close publishes what is gathered; the run publishes nothing more through o.
func (o *runOutput) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.flushLocked()
	o.closed = true
}
