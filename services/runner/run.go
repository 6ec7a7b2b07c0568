package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"jetway/pkg/agent"
	"jetway/pkg/agent/compact"
	"jetway/pkg/agent/guide"
	"jetway/pkg/agent/tool"
	"jetway/pkg/events"
	"jetway/pkg/handover"
	"jetway/pkg/llm"
	"jetway/pkg/redact"
)

// liveRun is a run this runner is driving for one session.
type liveRun struct {
	id     string
	cause  string
	start  time.Time
	guide  *guide.NoticeGuide
	cancel context.CancelFunc
	done   chan runResult
	rev    uint64 // the session record's revision while the run is live
	usage  llm.Usage
	// The loop grows the session's history in a.hist's own array
	// (agent.QueryInput.AppendInPlace), so while the run lasts a.hist stays
	// as it was at launch (histLen messages, in the transcript tr) and the
	// turns the run records are kept in recorded; finishRun takes the
	// loop's grown history back.
	tr       *transcript
	histLen  int
	recorded []llm.Message
}

type runResult struct {
	term   *agent.Terminal
	fenced bool
}

// start begins a run from p: its first user turn carries p's events and the
// handover brief. It returns false when the events must wait (another
// runner's run is live, Ground Stop, the session is interrupted, or the
// store is unreachable); they stay queued and un-acked.
func (a *actor) start(ctx context.Context, p plan) bool {
	if stop, on := a.r.grounded(a.tenant, a.session); on {
		a.log.Debug().Str("reason", stop.Reason).Msg("ground stop: holding events")
		return false // the watcher pokes every actor when it lifts
	}
	rec, rev, cached, err := a.record(ctx)
	if err != nil {
		a.log.Warn().Err(err).Msg("read session record")
		a.retryLater()
		return false
	}
	if cached && (len(p.ins) == 0 || rec.State != StateIdle) {
		// The copy speaks only for the hot path, an idle session starting a
		// run, where the claim's compare-and-swap checks it. A decision to
		// do nothing (a recovery "someone else made", events parked) would
		// rest on it unchecked: a sweep asking this actor to recover a dead
		// runner's run found its own old "idle" and did nothing, for ever.
		a.dropRecord()
		return a.start(ctx, p)
	}
	stored := rec.Clone() // what revision rev holds, to undo a claim
	text, ids := joinInputs(p.ins)
	if len(p.ins) == 0 && rec.State != StateRunning {
		return true // a recovery someone else already made
	}
	if rec.State == StateInterrupted {
		a.mu.Lock()
		if p.steer == nil && !personInput(p) {
			// Recovery was refused: only a person sends the work on. The
			// events wait, un-acked, and go to the run the person starts.
			a.parked = append(a.parked, p.ins...)
			a.mu.Unlock()
			return true
		}
		p.ins = append(a.parked, p.ins...)
		a.parked = nil
		a.mu.Unlock()
		text, ids = joinInputs(p.ins)
	}
	var h handover.Handover
	switch {
	case rec.State == StateRunning:
		st := selfCrashed // our own record, no live run here: it died in this process
		if rec.Runner != a.r.cfg.ID || rec.Incarnation != a.r.incarnation {
			st, err = a.r.peers.status(ctx, rec.Runner, rec.Incarnation)
			if err != nil || st == alive {
				// Another runner's run is live (a takeover in progress, or
				// a stalled runner): never start a second one beside it.
				a.waitForOther()
				return false
			}
		}
		var ok bool
		if h, ok = a.recover(ctx, &rec, &rev, st, text); !ok {
			if len(p.ins) == 0 {
				return true
			}
			return a.start(ctx, p) // the session is interrupted now
		}
	case p.steer != nil || rec.State == StateInterrupted:
		note := text
		if p.steer != nil {
			note = p.steer.note
		}
		inputs := append([]string(nil), rec.Inputs...)
		if p.steer != nil && text != "" {
			inputs = append(inputs, text)
		}
		h = handover.Steered(handover.Steer{Previous: rec.Run, Note: note, At: time.Now().UTC()}, inputs...)
		rec.Inputs, rec.Attempts = inputs, handover.Attempts{}
	case p.resume != nil:
		r := p.resume
		h = handover.Resumed(handover.Resumption{BookedBy: r.BookedBy, WaitingFor: r.WaitingFor, BookedAt: r.BookedAt, Checks: int(r.Checks)}, rec.Inputs...)
		rec.Attempts = handover.Attempts{}
		rec.Checks = r.Checks + 1
	default:
		h = handover.Dispatch(text)
		rec.Attempts, rec.Inputs = handover.Attempts{}, []string{text}
	}
	if p.resume == nil {
		rec.Checks = 0
	}
	if reason, ok := a.r.rails.allow(ctx, &rec); !ok {
		a.refuseRun(ctx, p, reason)
		return true
	}
	runID := newID("r-")
	cause := causeName(h.Cause.Kind)
	rec.State, rec.Run, rec.Runner, rec.Incarnation = StateRunning, runID, a.r.cfg.ID, a.r.incarnation
	rec.Since, rec.Cause, rec.Reason = time.Now().UTC(), cause, ""
	rec.Runs++
	newRev, err := a.putRecord(ctx, rec, rev)
	if err != nil {
		if cached && errors.Is(err, ErrLostSession) {
			return a.start(ctx, p) // the copy was stale: decide again on a fresh read
		}
		a.log.Info().Err(err).Msg("session record changed; retrying")
		a.retryLater()
		return false
	}
	a.mu.Lock()
	a.waitingSince = time.Time{}
	a.mu.Unlock()
	// Record before you act: the run's first turn is in the transcript
	// before the model is called, and its events are acked only after that.
	turn := llm.UserText(h.Compose())
	turn.ID = newID("m-")
	turn.Delivers = ids
	// The run's start and its first turn are one record, one fenced
	// append: a round trip off every run start, and no run can be recorded
	// as started without the turn it started with.
	tr := a.transcript()
	begun := Record{Kind: RecordRunStarted, Run: runID, Runner: a.r.cfg.ID, Cause: cause, Time: time.Now().UTC(), Message: &turn}
	err = tr.append(ctx, begun)
	// A refusal may be our own append answering late: the client retries a
	// publish whose answer was lost (a node restart), and the retry finds
	// the first try's record in the way. Then run_started is in the
	// transcript, and undoing the claim would leave it "never ended" with
	// the session idle, which the chaos suite's recovery check catches.
	started := err == nil || (errors.Is(err, ErrFenced) && tr.landedAtFence(ctx, begun))
	if err == nil {
		a.mu.Lock()
		if a.tr != tr {
			err = ErrFenced // forgotten meanwhile
		} else {
			a.hist = append(a.hist, turn)
			for _, id := range ids {
				a.seen[id] = struct{}{}
			}
		}
		a.mu.Unlock()
	}
	if err != nil {
		// Another runner wrote the transcript after we claimed the record:
		// take the claim back (if nobody changed it since), so the record
		// names the run that is really live, not one that never started.
		// But once run_started is in the transcript (or may be: an append
		// without an answer can land), the run exists and must end or be
		// recovered; undoing the claim left it "never ended" with the
		// session idle. Then lost() hands it over for recovery instead.
		if errors.Is(err, ErrFenced) && !started {
			if _, rerr := a.putRecord(ctx, stored, newRev); rerr != nil {
				a.log.Warn().Err(rerr).Msg("undo the claim on the session record")
			}
		}
		a.lost(ctx, err)
		return false
	}
	a.settle(msgsOf(p.ins)...)
	if p.resume != nil && len(ids) > 0 {
		a.r.dropLayover(ctx, a.tenant, a.session, ids[0])
	}
	a.launch(ctx, p.trace, runID, cause, newRev, ids, rec.Checks)
	return true
}

// personInput reports whether p carries a line a person typed.
func personInput(p plan) bool {
	for _, in := range p.ins {
		if in.person {
			return true
		}
	}
	return false
}

// refuseRun records that a run was refused (a rail), tells the person, and
// acks the events: they are answered, not lost — the refusal is in the
// transcript with their ids.
func (a *actor) refuseRun(ctx context.Context, p plan, reason string) {
	a.log.Warn().Str("reason", reason).Msg("run refused")
	tr := a.transcript()
	for _, in := range p.ins {
		if err := tr.append(ctx, Record{Kind: RecordRefused, Runner: a.r.cfg.ID, Event: in.id, Reason: reason}); err != nil {
			a.lost(ctx, err)
			return
		}
		a.noteSeen(tr, in.id)
	}
	a.settle(msgsOf(p.ins)...)
	a.r.publishOut(ctx, a.tenant, a.session, events.RunRefused{Reason: reason})
}

// recover decides what to do with a run that was interrupted: recover it
// with a handover brief, or record the refusal and tell the person. ok is
// false when the session is left interrupted.
func (a *actor) recover(ctx context.Context, rec *SessionRecord, rev *uint64, st liveness, text string) (handover.Handover, bool) {
	intr := handover.Interruption{Kind: handover.LostContact}
	switch st {
	case restarted:
		intr.Kind = handover.RunnerRestart
	case selfCrashed:
		intr.Kind = handover.Crashed
	}
	old := SessionRef{Tenant: a.tenant, Session: a.session, Run: rec.Run}
	child := a.r.childState(ctx, old)
	if child == handover.ChildAlive && a.r.cfg.KillRun != nil {
		// Definitely still running: end it, then ask again. Recovery beside
		// a live copy of the work would do the work twice.
		if err := a.r.cfg.KillRun(ctx, old); err != nil {
			a.log.Warn().Err(err).Str("run", rec.Run).Msg("kill the interrupted run's processes")
		}
		child = a.r.childState(ctx, old)
	}
	settings := handover.DefaultRecoverySettings()
	if rec.Policy != nil {
		settings = settings.With(*rec.Policy)
	}
	if err := settings.Authorize(intr, child, rec.Attempts); err != nil {
		reason := fmt.Sprintf("run %s was interrupted (%s) and not recovered: %v", rec.Run, intr, err)
		a.log.Warn().Str("run", rec.Run).Err(err).Msg("recovery refused")
		rec.State, rec.Reason = StateInterrupted, reason
		if n, err := a.putRecord(ctx, *rec, *rev); err == nil {
			*rev = n
		}
		a.r.publishOut(ctx, a.tenant, a.session, events.RunRefused{Reason: reason})
		return handover.Handover{}, false
	}
	recovery, attempts := rec.Attempts.Restart(rec.Run, intr)
	rec.Attempts = attempts
	inputs := append([]string(nil), rec.Inputs...)
	if text != "" {
		inputs = append(inputs, text)
	}
	rec.Inputs = inputs
	a.mu.Lock()
	calls := toolCalls(a.hist, rec.Run)
	a.mu.Unlock()
	a.log.Info().Str("previous", rec.Run).Int("attempt", recovery.Attempt).Msg("recovering interrupted run")
	return handover.Recovered(recovery, inputs...).WithToolCalls(calls...), true
}

// childState asks whether an interrupted run's foreground processes are
// gone. A runner with no process-running tools started none.
func (r *Runner) childState(ctx context.Context, s SessionRef) handover.ChildState {
	if r.cfg.ChildState != nil {
		return r.cfg.ChildState(ctx, s)
	}
	if r.cfg.Tools == nil {
		return handover.ChildGone
	}
	return handover.ChildUnknown
}

// toolCalls reads an earlier run's tool calls back from the history, with
// their results when they were recorded.
func toolCalls(hist []llm.Message, run string) []handover.ToolCall {
	var calls []handover.ToolCall
	index := map[string]int{}
	for _, m := range hist {
		for _, b := range m.Content {
			switch b.Type {
			case llm.BlockToolUse:
				index[b.ID] = len(calls)
				calls = append(calls, handover.ToolCall{Name: b.Name, Input: string(b.Input)})
			case llm.BlockToolResult:
				if i, ok := index[b.ToolUseID]; ok {
					calls[i].Result, calls[i].IsError, calls[i].Finished = b.Content, b.IsError, true
				}
			}
		}
	}
	return calls
}

func causeName(k handover.CauseKind) string {
	switch k {
	case handover.CauseRecovered:
		return "recovered"
	case handover.CauseSteered:
		return "steered"
	case handover.CauseResumed:
		return "resumed"
	}
	return "dispatch"
}

// launch starts the agent loop for a run whose first turn is recorded.
func (a *actor) launch(ctx context.Context, parent context.Context, runID, cause string, rev uint64, ids []string, checks uint32) {
	runCtx, cancel := context.WithCancel(context.Background())
	lr := &liveRun{id: runID, cause: cause, start: time.Now(), guide: guide.NewNoticeGuide(), cancel: cancel, done: make(chan runResult, 1), rev: rev}
	a.mu.Lock()
	a.run = lr
	// The loop appends to the history in place, past its length; nothing
	// here writes there until finishRun takes the history back.
	hist := a.hist
	lr.tr, lr.histLen = a.tr, len(a.hist)
	a.mu.Unlock()
	ref := SessionRef{Tenant: a.tenant, Session: a.session, Run: runID}
	a.r.publishOut(ctx, a.tenant, a.session, events.RunStarted{Run: runID, Cause: cause, Model: a.r.cfg.Provider.Name(), Runner: a.r.cfg.ID, Events: ids})
	in := agent.QueryInput{
		Provider:      a.r.cfg.Provider,
		System:        a.r.cfg.System,
		Messages:      hist,
		AppendInPlace: true,
		Notices:       lr.guide,
		Recorder:      &recorder{a: a, run: runID, lr: lr},
		// Tool calls and results are redacted in the loop, before the
		// transcript, jetway.out (and so SSE) and the model read them.
		Redactor:       redact.Redactor{},
		MaxTurns:       a.r.cfg.MaxTurns,
		MaxDuration:    a.r.cfg.MaxDuration,
		ToolOutputDir:  a.r.cfg.ToolOutputDir,
		PermissionMode: a.r.cfg.Permissions,
		Disallowed:     a.r.cfg.Deny,
	}
	tools := []tool.Tool{a.layoverTool(runID, checks)}
	if a.r.cfg.Tools != nil {
		tools = append(tools, a.r.cfg.Tools(ref)...)
	}
	if reg, err := tool.NewRegistry(tools...); err != nil {
		a.log.Error().Err(err).Msg("tools")
	} else {
		in.Tools = reg
	}
	in.Compactor = compact.New(compact.Config{ContextWindow: a.r.cfg.ContextWindow, Summariser: a.r.cfg.Provider, Views: &a.views})
	if a.r.cfg.Configure != nil {
		a.r.cfg.Configure(ref, &in)
		if len(in.Messages) != len(hist) || (len(hist) > 0 && &in.Messages[0] != &hist[0]) {
			in.AppendInPlace = false // not the history this runner lent
		}
	}
	// The run joins the trace of the event that started it.
	if parent == nil {
		parent = context.Background()
	}
	runCtx, span := otel.Tracer("jetway/runner").Start(trace.ContextWithRemoteSpanContext(runCtx, trace.SpanContextFromContext(parent)), "run",
		trace.WithAttributes(attribute.String("jetway.tenant", a.tenant), attribute.String("jetway.session", a.session),
			attribute.String("jetway.run", runID), attribute.String("jetway.cause", cause)))
	go func() {
		defer span.End()
		var term *agent.Terminal
		for ev, err := range agent.Query(runCtx, in, agent.QueryDeps{}) {
			if err != nil {
				a.log.Debug().Err(err).Str("run", runID).Msg("loop error")
				continue
			}
			a.r.publishRunEvent(runCtx, a.tenant, a.session, runID, ev)
			if ev.Kind == agent.KindResult {
				term = ev.Terminal
			}
		}
		if term != nil {
			span.SetAttributes(attribute.String("jetway.reason", string(term.Reason)), attribute.Int("jetway.turns", term.Turns))
			a.log.Debug().Str("run", runID).Str("reason", string(term.Reason)).AnErr("error", term.Err).Int("turns", term.Turns).Msg("run ended")
		}
		fenced := term != nil && term.Reason == agent.ReasonRecordFailed && errors.Is(term.Err, ErrFenced)
		lr.done <- runResult{term: term, fenced: fenced}
		a.poke()
	}()
}

// finishRun closes a run: pending notices start the next run at once;
// otherwise the session goes idle.
func (a *actor) finishRun(ctx context.Context, res runResult) {
	a.mu.Lock()
	lr := a.run
	a.run = nil
	a.mu.Unlock()
	if lr == nil {
		return
	}
	lr.cancel()
	a.takeHistory(lr, res.term)
	reason, turns := "unknown", 0
	var usage llm.Usage
	var errText string
	if t := res.term; t != nil {
		reason, turns, usage = string(t.Reason), t.Turns, t.Usage
		lr.usage = t.Usage
		if t.Err != nil {
			// A provider's error can echo a key ("invalid x-api-key
			// sk-…"); run.ended is its one source for the stream and the
			// run's headline.
			errText = redact.Text(t.Err.Error())
		}
	}
	a.r.publishOut(ctx, a.tenant, a.session, events.RunEnded{
		Run: lr.id, Reason: reason, Turns: turns, ElapsedMS: events.ElapsedMS(time.Since(lr.start)),
		Usage: events.RunUsage{InputTokens: usage.InputTokens, OutputTokens: usage.OutputTokens}, Error: errText,
	})
	if res.fenced {
		a.lost(ctx, ErrFenced)
		return
	}
	select {
	case <-a.r.stopping():
		// The runner is leaving: the record keeps saying running, so the
		// session's next owner recovers the work (its events are un-acked).
		return
	default:
	}
	// A run whose end is not in the transcript reads as interrupted: the
	// record would say idle while the transcript says the run never ended.
	// So the end is written through a store that is briefly away (outside
	// the lock: deliveries must not wait on it; the run is over, so nothing
	// else writes the transcript meanwhile).
	a.mu.Lock()
	tr := a.tr
	steer := a.steering
	a.steering = nil
	a.mu.Unlock()
	err := tr.appendSure(ctx, Record{Kind: RecordRunEnded, Run: lr.id, Runner: a.r.cfg.ID, Reason: reason}, 15*time.Second)
	if err != nil {
		// Fenced, or the store stayed away: the end is not recorded, so the
		// run must not be called finished. lost() hands it over for
		// recovery and leaves its events to be redelivered.
		a.log.Warn().Err(err).Str("run", lr.id).Msg("record the end of the run")
		a.lost(ctx, err)
		return
	}

	// Notices the model never got go to the next run, in order.
	var ins []input
	a.mu.Lock()
	for _, n := range lr.guide.TakePending() {
		if m, ok := a.held[n.ID]; ok {
			ins = append(ins, input{id: n.ID, text: n.Text, msg: m})
			delete(a.held, n.ID)
		}
	}
	a.mu.Unlock()
	if stop, on := a.r.grounded(a.tenant, a.session); on {
		// Ground Stop: nothing restarts through it. Its events wait.
		if steer != nil {
			ins = append(ins, steer.in)
		}
		a.requeue(ins)
		a.setState(ctx, lr, StateStopped, "ground stop: "+stop.Reason)
		return
	}
	if !a.setState(ctx, lr, StateIdle, reason) {
		return
	}
	switch {
	case steer != nil:
		ins = append(ins, steer.in)
		if !a.start(ctx, plan{ins: ins, steer: steer}) {
			a.requeue(ins)
		}
	case len(ins) > 0:
		if !a.start(ctx, plan{ins: ins}) {
			a.requeue(ins)
		}
	}
}

// takeHistory makes the loop's grown history the session's again: the
// history at launch and the run's recorded turns, in the array the loop
// grew. A loop that hands back anything else (no result, or a history that
// does not add up) is not trusted with it: the recorded turns are appended
// to a copy instead. A history forgotten meanwhile (a lost fence) is left
// alone: the next event reloads it.
func (a *actor) takeHistory(lr *liveRun, term *agent.Terminal) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tr == nil || a.tr != lr.tr {
		return
	}
	if term != nil && len(a.hist) == lr.histLen && len(term.Messages) == lr.histLen+len(lr.recorded) {
		a.hist = term.Messages
	} else {
		a.hist = append(slices.Clip(a.hist), lr.recorded...)
	}
	lr.recorded = nil
}

// setState records the end of a run in the session record: idle, or
// stopped by Ground Stop. A record that no longer names the run means
// another runner took the session.
func (a *actor) setState(ctx context.Context, lr *liveRun, state, reason string) bool {
	rec, rev, cached, err := a.record(ctx)
	if cached && (rec.Run != lr.id || rec.Incarnation != a.r.incarnation) {
		a.dropRecord() // giving the session up is decided on a fresh read
		return a.setState(ctx, lr, state, reason)
	}
	if err != nil || rec.Run != lr.id || rec.Incarnation != a.r.incarnation {
		a.lost(ctx, fmt.Errorf("%w: record names run %s", ErrLostSession, rec.Run))
		return false
	}
	rec.State, rec.Reason = state, reason
	rec.TokensUsed += int64(lr.usage.InputTokens + lr.usage.OutputTokens)
	if !strings.HasPrefix(reason, "aborted") && reason != string(agent.ReasonModelError) {
		rec.Attempts = handover.Attempts{}
	}
	if _, err := a.putRecord(ctx, rec, rev); err != nil {
		if cached && errors.Is(err, ErrLostSession) {
			return a.setState(ctx, lr, state, reason) // decide again on a fresh read
		}
		a.lost(ctx, err)
		return false
	}
	return true
}

// requeue puts taken inputs back at the head of the queue (their original
// order, before newer events).
func (a *actor) requeue(ins []input) {
	a.mu.Lock()
	defer a.mu.Unlock()
	front := make([]delivery, 0, len(ins))
	for _, in := range ins {
		in.inBrief = false // a put-back steer goes as its notice text
		front = append(front, delivery{msg: in.msg, taken: &in})
	}
	a.queue = append(front, a.queue...)
}

// lost gives up a session whose fence another runner moved: nothing more
// runs here, held events are left un-acked for the real owner, and the cached
// transcript is dropped.
func (a *actor) lost(ctx context.Context, err error) {
	a.log.Warn().Err(err).Msg("lost the session to another runner; stopping work on it")
	a.mu.Lock()
	if a.run != nil {
		a.run.cancel()
	}
	a.held = make(map[string]jetstream.Msg)
	a.queue = nil
	a.ordered = orderMark{}
	a.dropped++
	a.mu.Unlock()
	a.forget()
	// A record that still names one of our runs would keep every other
	// runner waiting on a run that no longer goes on: hand it back. Not as
	// idle: the run may have recorded turns but not its end (an append whose
	// answer was lost landed, and ours then looked fenced), so it is handed
	// over for recovery, as if its runner had restarted.
	a.dropRecord()
	if rec, rev, err := a.r.records.get(ctx, a.tenant, a.session); err == nil &&
		rec.State == StateRunning && rec.Runner == a.r.cfg.ID && rec.Incarnation == a.r.incarnation {
		rec.Incarnation, rec.Reason = "", "lost the session's fence"
		_, _ = a.r.records.put(ctx, rec, rev)
	}
}

// recorder is the agent loop's Recorder for one run: the fenced transcript
// append, then the acks of the events the recorded turn delivered.
type recorder struct {
	a   *actor
	run string
	lr  *liveRun
}

func (rc *recorder) RecordMessage(m llm.Message, usage llm.Usage) error {
	a := rc.a
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var u *llm.Usage
	if usage != (llm.Usage{}) {
		u = &usage
	}
	tr := a.transcript()
	if err := tr.append(ctx, Record{Kind: RecordMessage, Run: rc.run, Runner: a.r.cfg.ID, Message: &m, Usage: u}); err != nil {
		return err
	}
	var err error
	a.mu.Lock()
	if a.tr != tr {
		err = ErrFenced // the session was lost while the append was under way
	} else {
		rc.lr.recorded = append(rc.lr.recorded, m) // a.hist is the loop's until the run ends
		var acks []jetstream.Msg
		for _, id := range m.Delivers {
			a.seen[id] = struct{}{}
			if msg, ok := a.held[id]; ok {
				acks = append(acks, msg)
				delete(a.held, id)
			}
		}
		a.settleLocked(acks...)
	}
	a.mu.Unlock()
	if err == nil && len(m.Delivers) > 0 {
		// Tell the person their line (or a job's notice) reached the model.
		a.r.publishOut(ctx, a.tenant, a.session, events.RunDelivered{Run: rc.run, Events: m.Delivers})
	}
	return err
}

func (rc *recorder) RecordBoundary(meta llm.BoundaryMeta) {
	a := rc.a
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if tr := a.transcript(); tr != nil {
		_ = tr.append(ctx, Record{Kind: RecordBoundary, Run: rc.run, Runner: a.r.cfg.ID, Boundary: &meta})
	}
}
