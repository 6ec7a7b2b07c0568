package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"jetway/pkg/agent"
	"jetway/pkg/agent/compact"
	"jetway/pkg/agent/guide"
	"jetway/pkg/agent/tool"
	"jetway/pkg/control/agents"
	"jetway/pkg/events"
	"jetway/pkg/handover"
	"jetway/pkg/llm"
	"jetway/pkg/redact"
	"jetway/services/runner/internal/subagents"
)

// liveRun is a run this runner is driving for one session.
type liveRun struct {
	id     string
	cause  string
	start  time.Time
	guide  *guide.NoticeGuide
	cancel context.CancelFunc
	// stop cancels the run with a cause its tool calls' results tell the
	// model (tool.CancelCause): Ground Stop says what it did.
	stop context.CancelCauseFunc
	rev  uint64 // the session record's revision while the run is live
	// forgotten: the actor dropped the session's transcript (a lost
	// fence) while the run was live; the run records nothing more.
	forgotten atomic.Bool
	// lapsed: the runner's lease ran out while the run was live; it was
	// stopped, and its session goes to recovery (lease.go).
	lapsed atomic.Bool
	usage  llm.Usage
	// The loop grows the session's history in a.hist's own array
	// (agent.QueryInput.AppendInPlace), so while the run lasts a.hist stays
	// as it was at launch (histLen messages, in the transcript tr) and the
	// turns the run records are kept in recorded; finishRun takes the
	// loop's grown history back.
	tr       *transcript
	histLen  int
	recorded []llm.Message

	// sub is the run's sub-agent side: the agent_start calls waiting for a
	// child's end, and whom the run reports to when it is a sub-agent's.
	sub *subagents.Run
}

type runResult struct {
	term   *agent.Terminal
	fenced bool
	mcp    []agents.MCPServerState // the MCP servers not running at the end
}

// start begins a run from p: its first user turn carries p's events and the
// handover brief. It returns false when the events must wait (another
// runner's run is live, Ground Stop, the session is interrupted, or the
// store is unreachable); they stay queued and un-acked.
//
// A start is four steps: decide what p does to the session as its record
// says it is, claim the session with the record's compare-and-swap, record
// the run's first turn, launch the loop. Two things send it back to
// decide, here and nowhere else: a refused recovery (the session is
// interrupted now, which a person's line sends on) and a claim refused on
// the actor's copy of the record (decided again on a fresh read).
func (a *actor) start(ctx context.Context, p plan) bool {
	if !a.r.group.LeaseHeld() {
		a.retryLater() // no run starts on a lease that is out
		return false
	}
	if stop, on := a.grounded(); on {
		a.log.Debug().Str("reason", stop.Reason).Msg("ground stop: holding events")
		return false // the watcher pokes every actor when it lifts
	}
	fresh := false
	for range maxDecisions {
		rec, rev, cached, err := a.record.fresh(ctx, len(p.ins) > 0, fresh)
		if err != nil {
			a.log.Warn().Err(err).Msg("read session record")
			a.retryLater()
			return false
		}
		if len(rec.Lineage) > 0 {
			a.sub.SetLineage(rec.Lineage)
			if stop, on := a.grounded(); on {
				a.log.Debug().Str("reason", stop.Reason).Msg("ground stop of an ancestor: holding events")
				return false
			}
		}
		if rec.State == StateInterrupted && rec.Untold != "" && !a.tellRefusal(ctx, &rec, &rev) && len(p.ins) > 0 {
			// Its runner died between recording the refusal and telling
			// it, and it cannot be told now (JETWAY_OUT does not store
			// it): a run would overwrite the reason, and the refusal
			// would be nowhere. The events wait until it is told.
			a.retryLater()
			return false
		}
		st := a.r.runnerOf(ctx, rec)
		act := decide(p, rec, st)
		if act == actRecover && a.sub.FinishRecorded(ctx, rec, rev) {
			fresh = true
			continue // its end was recorded: nothing to recover
		}
		switch act {
		case actWaitOther:
			a.waitForOther()
			return false
		case actNothing:
			return true
		case actPark:
			// Interrupted: the events wait, un-acked, for the run a
			// person starts.
			a.parked = append(a.parked, p.ins...)
			return true
		}
		stored := rec.Clone() // what revision rev holds, to undo a claim
		prof, err := a.bindAgent(ctx, act, &rec)
		var unknown unknownAgentError
		if err != nil && !errors.As(err, &unknown) {
			a.log.Warn().Err(err).Msg("read agent profile")
			a.retryLater()
			return false
		}
		var rc runConfig
		if err == nil {
			rc, err = a.r.runConfigOf(prof)
		}
		if err != nil {
			a.rebind = ""
			if act != actRecover && !errors.As(err, &unknown) && rec.Agent != stored.Agent {
				// The person named an agent that exists and cannot run
				// here: the session stays bound to it (its next run goes
				// by it, or is refused again), never quietly "default".
				keepBinding(ctx, &a.record, stored, rev, rec.Agent, a.log)
			}
			a.unservable(ctx, act, p, &rec, &rev, err.Error())
			return true
		}
		h, ok := a.prepare(ctx, act, &p, &rec, &rev, st, rc)
		if !ok && a.awaiting {
			a.awaiting = false
			a.retryLater() // the recovery waits for the jobs worker
			return false
		}
		if !ok {
			continue // recovery refused: the session is interrupted now
		}
		if reason, ok := rc.rails.allow(ctx, &rec); !ok {
			a.refuseRun(ctx, p, reason)
			return true
		}
		if reason, ok := a.r.subagents.RootFuelLeft(ctx, rec, rec.RootFuel); len(rec.Lineage) > 0 && !ok {
			a.refuseRun(ctx, p, reason)
			return true
		}
		c, err := a.claim(ctx, rec, rev, h)
		if err != nil {
			if cached && errors.Is(err, ErrLostSession) {
				fresh = true
				continue // the copy was stale: decide again on a fresh read
			}
			a.log.Info().Err(err).Msg("session record changed; retrying")
			a.retryLater()
			return false
		}
		a.rebind = ""
		c.cfg = rc
		_, ids := joinInputs(p.ins)
		if !a.recordStart(ctx, c, h, ids, sourcesOf(p.ins), stored) {
			return false
		}
		a.settle(msgsOf(p.ins)...)
		if p.resume != nil && len(ids) > 0 {
			a.r.dropLayover(ctx, a.tenant, a.session, ids[0])
		}
		a.launch(ctx, p.trace, c, ids)
		return true
	}
	a.retryLater() // the record kept changing under us
	return false
}

// unservable refuses a run whose agent profile this runner cannot serve
// (gone, or its model not configured here). Interrupted work is left
// interrupted for a person, as a refused recovery is, rather than tried
// again at every sweep; the plan's events are answered with the refusal.
func (a *actor) unservable(ctx context.Context, act act, p plan, rec *SessionRecord, rev *uint64, reason string) {
	if act == actRecover {
		a.interrupt(ctx, rec, rev, reason)
		if len(p.ins) == 0 {
			return
		}
	}
	a.refuseRun(ctx, p, reason)
}

// keepBinding stores agent as the binding of the session whose record at
// revision rev is stored, at no version (its next run takes the current
// one). A write the record refuses is logged and left: the binding then
// stays with the events that name the agent.
func keepBinding(ctx context.Context, rc *recordCopy, stored SessionRecord, rev uint64, agent string, log zerolog.Logger) {
	stored.Agent, stored.AgentVersion = agent, 0
	if _, err := rc.put(ctx, stored, rev); err != nil {
		log.Warn().Err(err).Str("agent", agent).Msg("bind the session to the agent its refused run named")
	}
}

// maxDecisions bounds how often one start decides: a refused recovery and
// a claim lost on a stale copy each cost one more.
const maxDecisions = 3

// act is what a plan does to a session.
type act int

const (
	actDispatch  act = iota // an ordinary run over the plan's inputs
	actSteer                // a Steered run: a steer, or a person sending interrupted work on
	actResume               // a Resumed run: a layover fired on an idle session
	actRecover              // the record's run is interrupted: recover it, or refuse and say why
	actWaitOther            // another runner's run is live: the events wait
	actNothing              // a recovery someone else already made
	actPark                 // the session is interrupted: the events wait for a person
)

// decide is what plan p does to a session whose record is rec; st says
// whether the runner a running record names is alive. It reads nothing
// and writes nothing.
func decide(p plan, rec SessionRecord, st liveness) act {
	switch {
	case rec.State == StateRunning && st == alive:
		// A takeover in progress, or a stalled runner: never start a
		// second run beside it.
		return actWaitOther
	case rec.State == StateRunning:
		return actRecover
	case len(p.ins) == 0:
		return actNothing
	case rec.State == StateInterrupted && p.steer == nil && !personInput(p):
		// Recovery was refused: only a person sends the work on.
		return actPark
	case p.steer != nil || rec.State == StateInterrupted:
		return actSteer
	case p.resume != nil:
		return actResume
	}
	return actDispatch
}

// runnerOf is whether the runner a running record names may still drive
// its run (alive for a record that is not running). A question without an
// answer counts as alive: recovering beside a live run does the work twice.
func (r *Runner) runnerOf(ctx context.Context, rec SessionRecord) liveness {
	if rec.State != StateRunning {
		return alive
	}
	if rec.Runner == r.cfg.ID && rec.Incarnation == r.inc() {
		return selfCrashed // our own record, no live run here: it died in this process
	}
	st, err := r.peers.status(ctx, rec.Runner, rec.Incarnation)
	if err != nil {
		return alive
	}
	return st
}

// prepare builds the handover of the run act starts and the record that
// claims it. A recovery may be refused: then the record says interrupted
// (written at *rev) and ok is false, for the plan to be decided again.
func (a *actor) prepare(ctx context.Context, act act, p *plan, rec *SessionRecord, rev *uint64, st liveness, rc runConfig) (h handover.Handover, ok bool) {
	if rec.State == StateInterrupted {
		// A person sends the work on: the parked events go with it.
		p.ins = append(a.parked, p.ins...)
		a.parked = nil
	}
	text, _ := joinInputs(p.ins)
	switch act {
	case actRecover:
		return a.recover(ctx, rec, rev, st, text, rc.recoveryFor(*rec))
	case actSteer:
		note := text
		if p.steer != nil {
			note = p.steer.note
		}
		inputs := append([]string(nil), rec.Inputs...)
		if p.steer != nil && text != "" {
			inputs = append(inputs, text)
		}
		h = handover.Steered(handover.Steer{Previous: rec.Run, Note: note, At: time.Now().UTC()}, inputs...).
			WithToolCalls(handedOff(a.hist)...)
		rec.Inputs, rec.Attempts = inputs, handover.Attempts{}
	case actResume:
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
	return h, true
}

// claimed is a run this runner wrote into the session record.
type claimed struct {
	run, cause string
	rec        SessionRecord
	rev        uint64
	// cfg is what the run takes from the profile it goes by (its version
	// in rec).
	cfg runConfig
}

// claim writes the new run into the session record by compare-and-swap on
// rev: the fence that makes this runner the session's only driver.
func (a *actor) claim(ctx context.Context, rec SessionRecord, rev uint64, h handover.Handover) (claimed, error) {
	c := claimed{run: newID("r-"), cause: causeName(h.Cause.Kind)}
	rec.State, rec.Run, rec.Runner, rec.Incarnation = StateRunning, c.run, a.r.cfg.ID, a.r.inc()
	rec.Since, rec.Cause, rec.Reason, rec.Untold = time.Now().UTC(), c.cause, "", ""
	rec.Runs++
	n, err := a.record.put(ctx, rec, rev)
	if err != nil {
		return claimed{}, err
	}
	c.rec, c.rev = rec, n
	a.waitingSince = time.Time{}
	return c, nil
}

// recordStart records the run's start and first turn: record before you
// act, so the turn is in the transcript before the model is called and its
// events are acked only after that. It is one record, one fenced append:
// no run can be recorded as started without the turn it started with. A
// refused append means the session is lost; false then, after undoing the
// claim (back to stored) where the run cannot have started.
func (a *actor) recordStart(ctx context.Context, c claimed, h handover.Handover, ids, from []string, stored SessionRecord) bool {
	turn := llm.UserText(h.Compose())
	turn.ID = newID("m-")
	turn.Delivers = ids
	tr := a.tr
	begun := Record{Kind: RecordRunStarted, Run: c.run, Runner: a.r.cfg.ID, Cause: c.cause, Time: time.Now().UTC(), Message: &turn,
		From: from, Agent: c.cfg.prof.Name, AgentVersion: c.cfg.prof.Version}
	err := tr.append(ctx, begun)
	// A refusal may be our own append answering late: the client retries a
	// publish whose answer was lost (a node restart), and the retry finds
	// the first try's record in the way. Then run_started is in the
	// transcript, and undoing the claim would leave it "never ended" with
	// the session idle.
	started := err == nil || (errors.Is(err, ErrFenced) && tr.landedAtFence(ctx, begun))
	if err == nil {
		a.hist = append(a.hist, turn)
		for _, id := range ids {
			a.seen[id] = struct{}{}
		}
	}
	if err == nil {
		return true
	}
	// Another runner wrote the transcript after we claimed the record:
	// take the claim back (if nobody changed it since), so the record
	// names the run that is really live, not one that never started. But
	// once run_started is in the transcript (or may be: an append without
	// an answer can land), the run exists and must end or be recovered:
	// lost() hands it over for recovery instead.
	if errors.Is(err, ErrFenced) && !started {
		if _, rerr := a.record.put(ctx, stored, c.rev); rerr != nil {
			a.log.Warn().Err(rerr).Msg("undo the claim on the session record")
		}
	}
	a.lost(ctx, err)
	return false
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
	tr := a.tr
	for _, in := range p.ins {
		if err := tr.append(ctx, Record{Kind: RecordRefused, Runner: a.r.cfg.ID, Event: in.id, Reason: reason}); err != nil {
			a.lost(ctx, err)
			return
		}
		a.noteSeen(tr, in.id)
	}
	a.settle(msgsOf(p.ins)...)
	refused := events.RunRefused{Reason: reason}
	if len(p.ins) > 0 {
		// The event refused, so a sender waiting on the stream knows it
		// is its own.
		refused.Event = p.ins[0].id
	}
	a.r.publishOut(ctx, a.tenant, a.session, refused)
	if len(p.ins) > 0 {
		a.sub.Refused(ctx, p.ins[0].id, reason)
	}
}

// recover decides what to do with a run that was interrupted: recover it
// with a handover brief, or record the refusal and tell the person. ok is
// false when the session is left interrupted.
func (a *actor) recover(ctx context.Context, rec *SessionRecord, rev *uint64, st liveness, text string, settings handover.RecoverySettings) (handover.Handover, bool) {
	intr := handover.Interruption{Kind: handover.LostContact}
	switch st {
	case restarted:
		intr.Kind = handover.RunnerRestart
	case selfCrashed:
		intr.Kind = handover.Crashed
	}
	old := SessionRef{Tenant: a.tenant, Session: a.session, Run: rec.Run}
	child, unreachable := a.r.childState(ctx, old)
	if unreachable == nil && child == handover.ChildAlive && a.r.cfg.KillRun != nil {
		// Definitely still running: end it, then ask again. Recovery beside
		// a live copy of the work would do the work twice.
		if err := a.r.cfg.KillRun(ctx, old); err != nil {
			a.log.Warn().Err(err).Str("run", rec.Run).Msg("kill the interrupted run's processes")
		}
		child, unreachable = a.r.childState(ctx, old)
	}
	if unreachable != nil && waitForWorker(ctx, rec, rev, unreachable, a.r.cfg.RecoveryWait, a.record.put) {
		a.awaiting = true // start waits, and asks again later
		return handover.Handover{}, false
	}
	silence := workerSilence(*rec, unreachable)
	rec.WorkerWait = nil
	if err := settings.Authorize(intr, child, rec.Attempts); err != nil {
		a.log.Warn().Str("run", rec.Run).Err(err).Msg("recovery refused")
		a.interrupt(ctx, rec, rev, fmt.Sprintf("run %s was interrupted (%s) and not recovered: %v%s", rec.Run, intr, err, silence))
		return handover.Handover{}, false
	}
	recovery, attempts := rec.Attempts.Restart(rec.Run, intr)
	rec.Attempts = attempts
	inputs := append([]string(nil), rec.Inputs...)
	if text != "" {
		inputs = append(inputs, text)
	}
	rec.Inputs = inputs
	calls := toolCalls(a.hist, rec.Run)
	a.log.Info().Str("previous", rec.Run).Int("attempt", recovery.Attempt).Msg("recovering interrupted run")
	return handover.Recovered(recovery, inputs...).WithToolCalls(calls...).WithChildren(a.r.subagents.ChildrenAtWork(ctx, *rec, calls)...), true
}

// interrupt leaves the session interrupted for reason (written at *rev),
// waiting for a person, and tells them why. A record another runner
// changed first is left as it says (that runner recovered the run or
// refused it and says so): telling people of a refusal that was not
// recorded could contradict a recovery under way. The refusal is
// recorded untold, then told: a runner that dies in between leaves the
// telling to the partition's next holder (tellRefusal).
func (a *actor) interrupt(ctx context.Context, rec *SessionRecord, rev *uint64, reason string) {
	rec.State, rec.Reason, rec.Untold = StateInterrupted, reason, refusalID(rec.Run)
	n, err := a.record.put(ctx, *rec, *rev)
	if err != nil {
		a.log.Info().Err(err).Str("run", rec.Run).Msg("refusal not recorded: the session record changed first")
		return
	}
	*rev = n
	a.tellRefusal(ctx, rec, rev) // not stored: the sweep asks again
}

// refusalID is the CE id a refusal of run is told with: the run's, and
// random, so nobody who cannot read the session record can occupy it in
// JETWAY_OUT's dedupe window before the refusal is stored.
func refusalID(run string) string { return "jetway.refused/" + run + "/" + newID("") }

// tellRefusal publishes the refusal an interrupted record holds untold
// and, once JETWAY_OUT has stored it, writes the record told (at *rev);
// it reports whether the refusal is stored. Told twice — a runner that
// died after the store, before the write — is stored once: the event's
// dedupe id is the record's (Untold). A refusal not stored stays untold,
// for the sweep to ask again; a write refused means the record changed
// first, and whoever changed it read it untold.
func (a *actor) tellRefusal(ctx context.Context, rec *SessionRecord, rev *uint64) bool {
	if err := a.r.publishRefusal(ctx, a.tenant, a.session, rec.Untold, rec.Run, rec.Reason); err != nil {
		return false
	}
	told := rec.Clone()
	told.Untold = ""
	n, err := a.record.put(ctx, told, *rev)
	if err != nil {
		a.log.Info().Err(err).Str("run", rec.Run).Msg("refusal told; the session record changed before it was written told")
		return true
	}
	*rec, *rev = told, n
	return true
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

// handedOff lists the calls of the history's last tool turn whose
// foreground commands were handed to the background when the run was
// interrupted (handover.HandedOffResult), for a steered run's brief to name
// their jobs: their ends come as notices the new run must expect.
func handedOff(hist []llm.Message) []handover.ToolCall {
	last := -1
	for k := len(hist) - 1; k >= 0 && last < 0; k-- {
		for _, b := range hist[k].Content {
			if b.Type == llm.BlockToolResult {
				last = k
				break
			}
		}
	}
	if last < 0 {
		return nil
	}
	var out []handover.ToolCall
	for _, c := range toolCalls(hist[max(0, last-1):last+1], "") {
		if c.Finished && strings.HasPrefix(c.Result, handover.HandedOffResult) {
			out = append(out, c)
		}
	}
	return out
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
func (a *actor) launch(ctx context.Context, parent context.Context, c claimed, ids []string) {
	runID, cause, rev, checks := c.run, c.cause, c.rev, c.rec.Checks
	runCtx, stop := context.WithCancelCause(context.Background())
	cancel := func() { stop(context.Canceled) }
	lr := &liveRun{id: runID, cause: cause, start: time.Now(), guide: guide.NewNoticeGuide(), cancel: cancel, stop: stop, rev: rev}
	over, ok := a.r.live.add(lr, a.r.group.LeaseHeld)
	if !ok {
		stop(errLeaseLapsed)
		a.lost(ctx, errLeaseLapsed) // claimed but never begun: recovery takes it
		return
	}
	lr.sub = a.sub.StartRun(runID, c.rec, cancel)
	a.run = lr
	// The loop appends to the history in place, past its length; nothing
	// here writes there until finishRun takes the history back.
	hist := a.hist
	lr.tr, lr.histLen = a.tr, len(a.hist)
	rc := c.cfg
	ref := SessionRef{Tenant: a.tenant, Session: a.session, Run: runID, Lineage: c.rec.Lineage, Network: rc.prof.Network}
	ref.Ask = a.r.asker(ref, rc.prof)
	a.r.publishOut(ctx, a.tenant, a.session, events.RunStarted{Run: runID, Cause: cause, Model: rc.provider.Name(), Runner: a.r.cfg.ID, Events: ids,
		Agent: rc.prof.Name, AgentVersion: rc.prof.Version})
	in := agent.QueryInput{
		Provider:      leasedProvider{Provider: rc.provider, held: a.r.group.LeaseHeld},
		System:        rc.system,
		Messages:      hist,
		AppendInPlace: true,
		Notices:       lr.guide,
		Recorder:      &recorder{a: a, run: runID, lr: lr},
		// Tool calls and results are redacted in the loop, before the
		// transcript, jetway.out (and so SSE) and the model read them.
		Redactor:       redact.Redactor{},
		MaxTurns:       rc.maxTurns,
		MaxDuration:    rc.maxDuration,
		ToolOutputDir:  a.r.cfg.ToolOutputDir,
		PermissionMode: a.r.cfg.Permissions,
		Disallowed:     rc.deny,
	}
	tools := append([]tool.Tool{a.r.layoverTool(a.tenant, a.session, runID, checks)}, a.sub.Tools(lr.sub, rc.prof, rc.rails.cfg.Fuel)...)
	if a.r.cfg.Tools != nil {
		tools = append(tools, a.r.cfg.Tools(ref)...)
	}
	tools = a.r.approvals.Tools(approvalRef(ref), rc.prof, tools)
	if reg, err := tool.NewRegistry(allowedTools(tools, rc.prof)...); err != nil {
		a.log.Error().Err(err).Msg("tools")
	} else {
		in.Tools = reg
	}
	in.Compactor = compact.New(compact.Config{ContextWindow: rc.contextWindow, Summariser: rc.provider, Views: &a.views})
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
		in.System = append(slices.Clip(in.System), a.r.instructionBlocks(runCtx, ref, rc.prof)...)
		endMCP := a.r.openMCP(runCtx, ref, rc.prof, in.Tools)
		var term *agent.Terminal
		out := a.r.runOutput(runCtx, a.tenant, a.session, runID)
		for ev, err := range agent.Query(runCtx, in, agent.QueryDeps{}) {
			if err != nil {
				a.log.Debug().Err(err).Str("run", runID).Msg("loop error")
				continue
			}
			out.event(ev)
			if ev.Kind == agent.KindResult {
				term = ev.Terminal
			}
		}
		out.close() // the run's text goes out before its run.ended
		over()
		if term != nil {
			span.SetAttributes(attribute.String("jetway.reason", string(term.Reason)), attribute.Int("jetway.turns", term.Turns))
			a.log.Debug().Str("run", runID).Str("reason", string(term.Reason)).AnErr("error", term.Err).Int("turns", term.Turns).Msg("run ended")
		}
		fenced := term != nil && term.Reason == agent.ReasonRecordFailed && errors.Is(term.Err, ErrFenced)
		mcp := endMCP()
		a.send(func(a *actor) { a.runEnded(ctx, lr, runResult{term: term, fenced: fenced, mcp: mcp}) })
	}()
}

// runEnded is the message a run's goroutine sends when its loop is over.
// A runner that is leaving lets the run go unrecorded: the record keeps
// saying running, and the session's next owner recovers the work.
func (a *actor) runEnded(ctx context.Context, lr *liveRun, res runResult) {
	if a.run != lr {
		return
	}
	a.run = nil
	lr.sub.End()
	lr.cancel()
	if lr.lapsed.Load() {
		// Stopped by a lapse of the lease: its end is not the run's end.
		// The session goes to recovery, here or on another runner.
		a.lost(ctx, errLeaseLapsed)
		return
	}
	if a.leaving {
		return
	}
	a.finishRun(ctx, lr, res)
}

// finishRun closes a run: pending notices start the next run at once;
// otherwise the session goes idle.
func (a *actor) finishRun(ctx context.Context, lr *liveRun, res runResult) {
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
	// So the end is written through a store that is briefly away.
	tr := a.tr
	steer := a.steering
	a.steering = nil
	err := tr.appendSure(ctx, Record{Kind: RecordRunEnded, Run: lr.id, Runner: a.r.cfg.ID, Reason: reason, Error: errText, MCP: res.mcp}, 15*time.Second)
	if err != nil {
		// Fenced, or the store stayed away: the end is not recorded, so the
		// run must not be called finished. lost() hands it over for
		// recovery and leaves its events to be redelivered.
		a.log.Warn().Err(err).Str("run", lr.id).Msg("record the end of the run")
		a.lost(ctx, err)
		return
	}
	_, grounded := a.grounded()
	end := subagents.Ended{Run: lr.id, Reason: reason, Answer: lr.answer(a.tr, a.hist), Started: lr.start}
	if err := a.sub.RunEnded(ctx, lr.sub, end, grounded); err != nil {
		a.log.Warn().Err(err).Str("run", lr.id).Msg("report a sub-agent's end")
		a.lost(ctx, err)
		return
	}

	// Notices the model never got go to the next run, in order.
	var ins []input
	for _, n := range lr.guide.TakePending() {
		if m, ok := a.held[n.ID]; ok {
			ins = append(ins, input{id: n.ID, text: n.Text, msg: m})
			delete(a.held, n.ID)
		}
	}
	if stop, on := a.grounded(); on {
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
// another runner took the session. The actor's copy of the record speaks
// only for a write the compare-and-swap checks: giving the session up is
// decided on a fresh read, and a write refused on the copy is tried once
// more on one.
func (a *actor) setState(ctx context.Context, lr *liveRun, state, reason string) bool {
	for fresh := false; ; fresh = true {
		rec, rev, cached, err := a.record.get(ctx)
		if cached && !fresh && (rec.Run != lr.id || rec.Incarnation != a.r.inc()) {
			a.record.drop()
			continue
		}
		if err != nil || rec.Run != lr.id || rec.Incarnation != a.r.inc() {
			a.lost(ctx, fmt.Errorf("%w: record names run %s", ErrLostSession, rec.Run))
			return false
		}
		// Since is when the session entered this state (docs/openapi.yaml):
		// a finished sub-agent's since is when it finished, which the
		// console's timeline ends its bar at.
		rec.State, rec.Reason, rec.Since = state, reason, time.Now().UTC()
		rec.TokensUsed += int64(lr.usage.InputTokens + lr.usage.OutputTokens)
		// An event the run took as a notice named another agent: the
		// session is bound to it from its next run on.
		applyRebind(&rec, a.rebind)
		if !strings.HasPrefix(reason, "aborted") && reason != string(agent.ReasonModelError) {
			rec.Attempts = handover.Attempts{}
		}
		_, err = a.record.put(ctx, rec, rev)
		if err == nil {
			a.rebind = ""
			if len(rec.Lineage) > 0 {
				// A sub-agent's tokens count against its root's fuel too.
				a.r.subagents.AddRootTokens(ctx, a.tenant, rec.Root(), int64(lr.usage.InputTokens+lr.usage.OutputTokens))
			}
			return true
		}
		if !cached || fresh || !errors.Is(err, ErrLostSession) {
			a.lost(ctx, err)
			return false
		}
	}
}

// requeue puts taken inputs back at the head of the queue (their original
// order, before newer events).
func (a *actor) requeue(ins []input) {
	front := make([]delivery, 0, len(ins))
	for _, in := range ins {
		in.inBrief = false // a put-back steer goes as its notice text
		front = append(front, delivery{msg: in.msg, taken: &in})
	}
	a.queue = append(front, a.queue...)
}

// lost gives up a session whose fence another runner moved: nothing more
// runs here, held, queued and parked events are left un-acked for the real
// owner, and the cached transcript is dropped.
func (a *actor) lost(ctx context.Context, err error) {
	a.log.Warn().Err(err).Msg("lost the session to another runner; stopping work on it")
	if a.run != nil {
		a.run.cancel()
	}
	a.held = make(map[string]jetstream.Msg)
	a.queue, a.parked = nil, nil
	a.ordered = orderMark{}
	a.dropped++
	a.forget()
	// A record that still names one of our runs would keep every other
	// runner waiting on a run that no longer goes on: hand it back. Not as
	// idle: the run may have recorded turns but not its end (an append whose
	// answer was lost landed, and ours then looked fenced), so it is handed
	// over for recovery, as if its runner had restarted.
	a.record.drop()
	if rec, rev, err := a.r.records.get(ctx, a.tenant, a.session); err == nil &&
		rec.State == StateRunning && rec.Runner == a.r.cfg.ID && rec.Incarnation == a.r.inc() {
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
	if rc.lr.forgotten.Load() {
		return ErrFenced // the session was lost: nothing more is recorded
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var u *llm.Usage
	if usage != (llm.Usage{}) {
		u = &usage
	}
	tr := rc.lr.tr
	if err := tr.append(ctx, Record{Kind: RecordMessage, Run: rc.run, Runner: rc.a.r.cfg.ID, Message: &m, Usage: u}); err != nil {
		return err
	}
	// The turn is in the transcript: the actor marks what it delivered as
	// seen and acks it. The loop waits, so the actor's state is the turn's
	// before the loop acts on it.
	done := make(chan error, 1)
	if !rc.a.send(func(a *actor) { done <- a.recorded(tr, rc.lr, m) }) {
		return ErrFenced
	}
	select {
	case err := <-done:
		if err == nil && len(m.Delivers) > 0 {
			// Tell the person their line (or a job's notice) reached the
			// model. Like a text delta it is not acknowledged: the
			// transcript records the delivery, and an answer for every
			// turn was a message per turn on the runner's connection.
			rc.a.r.publishDelta(ctx, rc.a.tenant, rc.a.session, events.RunDelivered{Run: rc.run, Events: m.Delivers})
		}
		return err
	case <-ctx.Done():
		return fmt.Errorf("record a turn: the session's actor did not answer: %w", ctx.Err())
	}
}

// recorded notes a turn the run recorded in tr: what it delivered is seen
// and acked. ErrFenced when the session was lost while the append was
// under way.
func (a *actor) recorded(tr *transcript, lr *liveRun, m llm.Message) error {
	if a.tr != tr {
		return ErrFenced
	}
	lr.recorded = append(lr.recorded, m) // a.hist is the loop's until the run ends
	var acks []jetstream.Msg
	for _, id := range m.Delivers {
		a.seen[id] = struct{}{}
		if msg, ok := a.held[id]; ok {
			acks = append(acks, msg)
			delete(a.held, id)
		}
	}
	a.settle(acks...)
	return nil
}

func (rc *recorder) RecordBoundary(meta llm.BoundaryMeta) {
	if rc.lr.forgotten.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = rc.lr.tr.append(ctx, Record{Kind: RecordBoundary, Run: rc.run, Runner: rc.a.r.cfg.ID, Boundary: &meta})
}
