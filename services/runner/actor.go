package runner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/pkg/events"
	"jetway/pkg/llm"
	"jetway/services/runner/internal/subagents"
)

// delivery is one message from a work consumer, decoded (or not).
type delivery struct {
	msg jetstream.Msg
	ev  events.HostEvent
	err error // decode error: the event is refused and recorded
	// recover asks the actor to recover an interrupted run of another
	// runner; it carries no message.
	recover bool
	// taken is an event already turned into an input once (a notice the
	// model never got, a steer), put back in line in its original form.
	taken *input
	// tenure is the partition's tenure it was delivered in.
	tenure uint64
}

// input is an event taken for a run's first turn or as a notice.
type input struct {
	id   string
	text string
	msg  jetstream.Msg
	// inBrief: the event's content is in the handover brief (a steer's
	// note, a resume), not one of the run's inputs.
	inBrief bool
	// person: a line a person typed, which may send on interrupted work.
	person bool
}

// steerReq is a steer waiting for the live run to stop.
type steerReq struct {
	in   input
	note string
	at   time.Time
}

// plan is what a run starts from.
type plan struct {
	ins    []input
	steer  *steerReq
	resume *events.Resume
	// trace carries the trace context of the event that started the run.
	trace context.Context
}

// actor is the one place a session's events are handled inside a runner.
// One goroutine owns its state; everything else — deliveries, a run's
// progress and end, Ground Stop, retries — sends it a
// message (a function it runs), so a slow session never blocks another
// and nothing in the session's state needs a lock. The goroutine lives
// only while the session has work in hand: an idle session costs its
// cached state, not a goroutine (see mailbox).
type actor struct {
	r               *Runner
	tenant, session string
	key             string
	part            int
	log             zerolog.Logger

	box mailbox

	// record is the actor's copy of the session record (record.go).
	record recordCopy

	// Everything below is the actor goroutine's alone.

	queue []delivery
	// rebind is an agent named by an event a live run took as a notice:
	// the session binds to it at its next run's start.
	rebind string
	// held are events handed to the live run's notice guide, not yet acked:
	// they are acked when the turn that carries them is recorded.
	held map[string]jetstream.Msg
	run  *liveRun
	// steering is a steer that cancelled the live run; the Steered run
	// starts when it has stopped.
	steering *steerReq
	// parked are events that arrived while the session is interrupted; they
	// go to the run a person starts.
	parked []input
	// touched is when each event in hand was last told "in progress" (or
	// first seen by keepAlive): only those near their AckWait are told.
	touched map[jetstream.Msg]time.Time
	// waitingSince is when the head of the queue began waiting for another
	// runner's live run; past releaseAfter the queue is given back.
	waitingSince time.Time
	// tasks are the latest notices of function tasks, by task id.
	tasks map[string]taskNotice
	// acks are the events being acked, or acked moments ago (settle.go).
	acks acks
	// ordered is how far the session's order is known to hold (order.go).
	ordered orderMark
	// dropped counts lost() calls: a queue it emptied must not be popped
	// by the drain that was handling its old head.
	dropped int
	// leaving: the runner is stopping; the goroutine waits for the live
	// run to end (serving its recorder) and starts nothing new.
	leaving bool
	// awaiting: the recovery start just tried waits for the session's
	// jobs worker to answer (recoverwait.go).
	awaiting bool

	// While a run is live, the loop grows hist in place past its length
	// (see liveRun).
	loaded bool
	tr     *transcript
	hist   []llm.Message
	seen   map[string]struct{} // CE ids already in the transcript
	// sub is the session's sub-agent side: its lineage (Ground Stop of any
	// ancestor covers it), its children, its end report to a parent.
	sub *subagents.Session

	// views builds each run's request views from what hist added since the
	// last run's, instead of from all of it (used by one run at a time).
	views llm.ViewCache
}

// mailbox is what other goroutines share with an actor: messages waiting
// for it, and whether a goroutine serves them. A message to a parked
// actor starts its goroutine; the goroutine parks (ends) when the mailbox
// is empty and the session has nothing in hand.
type mailbox struct {
	mu      sync.Mutex
	msgs    []func(*actor)
	wake    chan struct{} // a message came for a running goroutine
	running bool
	// evicted: the actor is gone from the runner; deliveries go to a new
	// actor, other messages are moot.
	evicted   bool
	idleSince time.Time // when it last parked
	// busyNow is busyLocked as of the goroutine's last look, for the
	// partition group's question, which must not wake a parked actor.
	busyNow atomic.Bool
}

func (r *Runner) actorFor(tenant, session string, part int) *actor {
	key := sessionKey(tenant, session)
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.actors[key]; ok {
		return a
	}
	a := &actor{
		r: r, tenant: tenant, session: session, key: key, part: part,
		log:    r.log.With().Str("tenant", tenant).Str("session", session).Logger(),
		held:   make(map[string]jetstream.Msg),
		tasks:  make(map[string]taskNotice),
		box:    mailbox{wake: make(chan struct{}, 1), idleSince: time.Now()},
		record: recordCopy{records: r.records, tenant: tenant, session: session},
	}
	a.sub = r.subagents.Session(hostOf(a), tenant, session, a.log)
	r.actors[key] = a
	return a
}

// send hands fn to the actor's goroutine, starting it if the actor is
// parked. It reports false when the actor was evicted (fn will never run).
func (a *actor) send(fn func(*actor)) bool {
	b := &a.box
	b.mu.Lock()
	if b.evicted {
		b.mu.Unlock()
		return false
	}
	b.msgs = append(b.msgs, fn)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if !start {
		select {
		case b.wake <- struct{}{}:
		default:
		}
		return true
	}
	// Once the runner is leaving no goroutine starts: Run waits for the
	// ones there are.
	a.r.mu.Lock()
	if a.r.closing {
		a.r.mu.Unlock()
		b.mu.Lock()
		b.running = false
		b.mu.Unlock()
		return true
	}
	a.r.actorWG.Add(1)
	a.r.mu.Unlock()
	go func() { defer a.r.actorWG.Done(); a.loop() }()
	return true
}

// take empties the mailbox.
func (b *mailbox) take() []func(*actor) {
	b.mu.Lock()
	defer b.mu.Unlock()
	msgs := b.msgs
	b.msgs = nil
	return msgs
}

// park ends the goroutine when the mailbox is empty and the session has
// nothing in hand: an idle session costs its cached state, not a
// goroutine and a ticker (thousands of idle sessions woke a thousand
// tickers a second). The next message starts it again.
func (b *mailbox) park(busy bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if busy || len(b.msgs) > 0 {
		return false
	}
	b.running = false
	b.idleSince = time.Now()
	return true
}

// enqueue puts a delivery in the session's line.
func (a *actor) enqueue(d delivery) {
	if !a.send(func(a *actor) { a.queue = queueUp(a.queue, d) }) {
		// Evicted between actorFor and here: a new actor takes it.
		a.r.actorFor(a.tenant, a.session, a.part).enqueue(d)
	}
}

// queueUp appends d to q, unless d asks for a recovery and q holds such a
// request already: the sweep asks at every beat, and a recovery that waits
// for a jobs worker would otherwise find a line of them behind it.
func queueUp(q []delivery, d delivery) []delivery {
	if d.recover {
		for _, o := range q {
			if o.recover {
				return q
			}
		}
	}
	return append(q, d)
}

// poke makes the actor look at its queue again (a retry, Ground Stop
// lifted).
func (a *actor) poke() { a.send(func(*actor) {}) }

// goroutines reports how many session actors have a live goroutine.
func (r *Runner) goroutines() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, a := range r.actors {
		a.box.mu.Lock()
		if a.box.running {
			n++
		}
		a.box.mu.Unlock()
	}
	return n
}

// sessions reports how many session actors the runner holds in memory.
func (r *Runner) sessions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.actors)
}

// busy reports whether the session has work in hand, or messages on the
// way to it, without waking it.
func (b *mailbox) busy() bool {
	b.mu.Lock()
	waiting := len(b.msgs) > 0
	b.mu.Unlock()
	return waiting || b.busyNow.Load()
}

func (a *actor) busyLocked() bool {
	return a.run != nil || len(a.queue) > 0 || len(a.held) > 0 || a.steering != nil || len(a.parked) > 0
}

// loop is the actor's goroutine: it runs the messages sent to it and
// handles the queue while the session has work in hand, then parks.
func (a *actor) loop() {
	ctx := context.Background()
	keep := time.NewTicker(a.r.cfg.KeepAlive)
	defer keep.Stop()
	stopping := a.r.stopping()
	for {
		if msgs := a.box.take(); len(msgs) > 0 {
			a.box.busyNow.Store(true) // in hand while it is handled
			for _, fn := range msgs {
				fn(a)
			}
		}
		if !a.leaving {
			a.drain(ctx)
		}
		busy := a.busyLocked()
		a.box.busyNow.Store(busy)
		if a.leaving && a.run == nil {
			a.box.park(false) // leaving: every un-acked event goes to the next owner
			return
		}
		if a.box.park(busy) {
			return
		}
		select {
		case <-a.box.wake:
		case now := <-keep.C:
			a.keepAlive(now)
		case <-stopping:
			// Leaving: a live run ends at its next safe point, and every
			// un-acked event is left to the session's next owner. The
			// goroutine serves the run (its recorder) until it has ended.
			stopping = nil
			a.leaving = true
			if a.run != nil {
				a.run.cancel()
			}
		}
	}
}

// evictIdle drops parked actors idle past IdleEvict, so memory stays
// bounded with many sessions: their cached history goes with them.
func (r *Runner) evictIdle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, a := range r.actors {
		b := &a.box
		b.mu.Lock()
		if !b.running && len(b.msgs) == 0 && time.Since(b.idleSince) > r.cfg.IdleEvict {
			delete(r.actors, key)
			b.evicted = true
		}
		b.mu.Unlock()
	}
}

// evictLoop runs evictIdle a few times per IdleEvict.
func (r *Runner) evictLoop(ctx context.Context) {
	every := min(max(r.cfg.IdleEvict/4, 10*time.Millisecond), 15*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.evictIdle()
		}
	}
}

// keepAlive tells the server that events in hand since a third of their
// AckWait ago are still in hand, so a long run's events are not
// redelivered. Most events are acked within a tick or two and cost no
// message: telling every one each tick was half the runner's messages per
// event. An event first seen here is taken to be in hand since the tick
// before (or since it was stored, if earlier), so the first word goes out
// with two thirds of its AckWait to spare at worst.
func (a *actor) keepAlive(now time.Time) {
	due := a.r.group.AckWait() / 3
	var seen map[jetstream.Msg]time.Time // nil while nothing is in hand
	touch := func(m jetstream.Msg) {
		if m == nil {
			return
		}
		if seen == nil {
			seen = make(map[jetstream.Msg]time.Time, len(a.touched)+1)
		}
		at, ok := a.touched[m]
		if !ok {
			at = now.Add(-a.r.cfg.KeepAlive)
			if md, err := m.Metadata(); err == nil && md.Timestamp.Before(at) {
				at = md.Timestamp
			}
		}
		if now.Sub(at) >= due {
			_ = m.InProgress()
			at = now
		}
		seen[m] = at
	}
	for _, m := range a.held {
		touch(m)
	}
	for _, d := range a.queue {
		touch(d.msg)
	}
	for _, in := range a.parked {
		touch(in.msg)
	}
	if a.steering != nil {
		touch(a.steering.in.msg)
	}
	a.touched = seen
}

// load reads the session's transcript once per actor life.
func (a *actor) load(ctx context.Context) error {
	if a.loaded {
		return nil
	}
	tr, recs, err := a.r.transcripts.load(ctx, a.tenant, a.session)
	if err != nil {
		return err
	}
	a.tr, a.hist, a.seen, a.loaded = tr, history(recs), delivered(recs), true
	a.sub.Loaded(endedOf(recs))
	return nil
}

// noteSeen marks ids as recorded, unless the transcript they were recorded
// in has been forgotten meanwhile (the next load reads them back).
func (a *actor) noteSeen(tr *transcript, ids ...string) {
	if a.tr != tr || a.seen == nil {
		return
	}
	for _, id := range ids {
		a.seen[id] = struct{}{}
	}
}

// forget drops the cached transcript: after a lost fence, the next event
// reloads what the session's real owner wrote. A live run writes nothing
// more.
func (a *actor) forget() {
	if a.run != nil {
		a.run.forgotten.Store(true)
	}
	a.loaded, a.tr, a.hist, a.seen = false, nil, nil, nil
	a.record.drop()
}

// drain handles queued deliveries in order.
func (a *actor) drain(ctx context.Context) {
	for len(a.queue) > 0 {
		d := a.queue[0]
		gen := a.dropped
		if !a.handle(ctx, d) {
			return // retry later, the delivery stays first in line
		}
		if gen != a.dropped {
			// lost() emptied the queue while d was handled (a refused
			// append in drop or refuseRun): there is nothing to pop.
			return
		}
		a.queue = a.queue[1:]
	}
}

// handle decides what one event does. It returns false when the event must
// wait (the transcript could not be read, or another runner's run is live).
func (a *actor) handle(ctx context.Context, d delivery) bool {
	if err := a.load(ctx); err != nil {
		a.log.Warn().Err(err).Msg("load transcript")
		a.retryLater()
		return false
	}
	if d.taken != nil {
		return a.startTaken(ctx, *d.taken)
	}
	if d.recover {
		return a.run != nil || a.start(ctx, plan{})
	}
	id := d.ev.ID
	if d.err != nil {
		return a.refuse(ctx, d)
	}
	_, dup := a.seen[id]
	run := a.run
	if _, ok := a.held[id]; ok {
		a.held[id] = d.msg // a redelivery: ack through the newest handle
		dup = true
	}
	if i := slices.IndexFunc(a.parked, func(in input) bool { return in.id == id }); i >= 0 {
		// A redelivery (or a second copy) of an event waiting for a
		// person: it waits once, and is acked through the newest handle.
		a.parked[i].msg = d.msg
		return true
	}
	if dup {
		if run == nil {
			a.settle(d.msg)
		}
		return true
	}
	if !a.inOrder(ctx, d) {
		return false
	}
	if d.ev.Agent != "" {
		known, err := a.r.knownAgent(ctx, a.tenant, d.ev.Agent)
		if err != nil {
			a.log.Warn().Err(err).Msg("read agent profile")
			a.retryLater()
			return false
		}
		if !known {
			return a.refuse(ctx, delivery{msg: d.msg, ev: d.ev, err: unknownAgentError{tenant: a.tenant, name: d.ev.Agent}})
		}
		a.rebind = d.ev.Agent // from the next run's start on
		if run != nil {
			keepRebind(ctx, a, run, d.ev.Agent)
		}
	}
	if reason, took := run.subRun().Take(d.ev); took {
		a.drop(ctx, RecordAnswered, d.ev.ID, d.ev.Type, d.msg, reason)
		return true
	}
	text := modelText(d.ev, run != nil)
	if dec, ok := d.ev.Payload.(events.ApprovalDecided); ok {
		if _, on := a.grounded(); on {
			return false // Ground Stop holds decisions too; its lift pokes us
		}
		if !a.r.group.LeaseHeld() {
			a.retryLater() // an approved call runs only on a lease that is held
			return false
		}
		var err error
		if text, err = a.r.decided(ctx, a.tenant, a.session, id, dec, run); err != nil {
			return a.r.notDecided(ctx, a, d, err)
		}
	}
	if st, ok := d.ev.Payload.(events.Steer); ok {
		return a.steer(ctx, d, st, run)
	}
	if _, ok := d.ev.Payload.(events.Resume); ok {
		current, err := a.r.currentLayover(ctx, a.tenant, a.session, id)
		if err != nil {
			a.retryLater()
			return false
		}
		if !current {
			return a.refuse(ctx, delivery{msg: d.msg, ev: d.ev, err: errStaleLayover})
		}
		if run != nil {
			// The session got other work meanwhile: the model hears what
			// the layover was waiting for as a notice, in the run under way.
			a.held[id] = d.msg
			run.guide.Push(id, text)
			a.r.dropLayover(ctx, a.tenant, a.session, id)
			return true
		}
	}
	if run != nil {
		// Busy: the event becomes a notice for the model's next call; it is
		// acked when the turn that carries it is recorded.
		if a.superseded(ctx, d, run) {
			return true
		}
		a.held[id] = d.msg
		run.guide.Push(id, text)
		return true
	}
	_, typed := d.ev.Payload.(events.Input)
	p := plan{ins: []input{{id: id, text: text, msg: d.msg, person: typed}}, trace: d.ev.TraceContext(ctx)}
	if rs, ok := d.ev.Payload.(events.Resume); ok {
		// An idle session picks the work up as a Resumed run; the brief says
		// what it was waiting for and which check this is.
		p.resume = &rs
		p.ins[0].inBrief = true
	}
	return a.start(ctx, p)
}

// startTaken handles an input put back in line: a notice again when a run
// is live, else the start of a run.
func (a *actor) startTaken(ctx context.Context, in input) bool {
	if a.run != nil {
		a.held[in.id] = in.msg
		a.run.guide.Push(in.id, in.text)
		return true
	}
	return a.start(ctx, plan{ins: []input{in}})
}

// steer redirects the session. A live run is cancelled at its next safe
// point (the loop records a result for every call it started) and a Steered
// run follows; an idle session starts a Steered run over its last run.
func (a *actor) steer(ctx context.Context, d delivery, st events.Steer, run *liveRun) bool {
	in := input{id: d.ev.ID, text: events.SteerNotice(st), msg: d.msg, inBrief: true}
	if run != nil {
		a.steering = &steerReq{in: in, note: st.Note, at: d.ev.Time}
		run.cancel()
		return true
	}
	return a.start(ctx, plan{ins: []input{in}, steer: &steerReq{in: in, note: st.Note, at: d.ev.Time}, trace: d.ev.TraceContext(ctx)})
}

// superseded applies the rule for function tasks that report more than
// once: a newer notice of the same task replaces an older one the model
// has not read yet. The loser is recorded as refused (superseded) and acked;
// it reports whether the event in hand is the loser.
func (a *actor) superseded(ctx context.Context, d delivery, run *liveRun) bool {
	var ref events.TaskRef
	switch p := d.ev.Payload.(type) {
	case events.JobExited:
		ref = p.TaskRef
	case events.JobOverdue:
		ref = p.TaskRef
	case events.JobNotice:
		ref = p.TaskRef
	}
	if ref.Task == "" || !d.ev.FromJobs {
		return false
	}
	prev, ok := a.tasks[ref.Task]
	if ok && !ref.Supersedes(prev.ref) {
		a.drop(ctx, RecordRefused, d.ev.ID, d.ev.Type, d.msg, "superseded by a newer notice of task "+ref.Task)
		return true
	}
	if ok && run.guide.Withdraw(prev.id) {
		m := a.held[prev.id]
		delete(a.held, prev.id)
		a.drop(ctx, RecordRefused, prev.id, d.ev.Type, m, "superseded by a newer notice of task "+ref.Task)
	}
	a.tasks[ref.Task] = taskNotice{id: d.ev.ID, ref: ref}
	return false
}

// drop records that an event will not be a notice of its own (kind
// RecordRefused: not delivered; RecordAnswered: delivered as a waiting
// call's result), and why, then acks it.
func (a *actor) drop(ctx context.Context, kind, id, typ string, m jetstream.Msg, reason string) {
	tr := a.tr
	if err := tr.append(ctx, Record{Kind: kind, Runner: a.r.cfg.ID, Event: id, Type: typ, Reason: reason}); err != nil {
		a.lost(ctx, err)
		return
	}
	a.noteSeen(tr, id)
	a.settle(m)
}

// taskNotice is the latest notice of a function task seen in this session.
type taskNotice struct {
	id  string
	ref events.TaskRef
}

// errStaleLayover refuses a resume whose layover was cancelled or replaced.
var errStaleLayover = errors.New("stale layover: it was cancelled or replaced before it fired")

// modelText is what the model reads for an event: typed input as it stands
// when idle, every other event as its notice.
func modelText(ev events.HostEvent, busy bool) string {
	switch p := ev.Payload.(type) {
	case events.Input:
		if busy {
			return events.InputNotice(p)
		}
		return p.Text
	case events.AgentInput:
		if busy {
			return events.AgentInputNotice(p)
		}
		return p.Text
	case events.Steer:
		return events.SteerNotice(p)
	case events.Resume:
		return events.ResumeNotice(p)
	case events.External:
		return events.ExternalNotice(p)
	}
	if n, ok := ev.Notice(); ok {
		return n
	}
	return "[event " + ev.Type + " from " + ev.Source + "]"
}

// refuse records why an event was refused, tells the person, and acks it
// so it is not redelivered: a refusal is an answer, not a loss. It reports
// false when the refusal could not be recorded and the event must wait
// (the store is away). A refusal another runner's append fenced out is
// that runner's to make: the session is lost here, and the event, left
// un-acked, goes to it.
func (a *actor) refuse(ctx context.Context, d delivery) bool {
	id := d.msg.Headers().Get("ce-id")
	typ := d.msg.Headers().Get("ce-type")
	reason := d.err.Error()
	if _, recorded := a.seen[id]; recorded && id != "" {
		a.settle(d.msg) // refused before, and its ack lost: the answer stands
		return true
	}
	tr := a.tr
	err := tr.append(ctx, Record{Kind: RecordRefused, Runner: a.r.cfg.ID, Event: id, Type: typ, Reason: reason})
	if errors.Is(err, ErrFenced) {
		a.lost(ctx, err)
		return true // lost() emptied the queue
	}
	if err != nil {
		a.log.Warn().Err(err).Str("event", id).Msg("record refusal; the event waits")
		a.retryLater()
		return false
	}
	a.log.Warn().Str("event", id).Str("type", typ).Str("reason", reason).Msg("event refused")
	a.noteSeen(tr, id)
	a.r.publishOut(ctx, a.tenant, a.session, events.RunRefused{Event: id, Type: typ, Reason: reason})
	if d.msg.Term() == nil {
		a.acks.mark(seqOf(d.msg), time.Now())
	}
	return true
}

// releaseAfter is how long events wait for another runner's live run
// before this actor gives them back to the stream (negative ack), so they
// go to whoever holds the partition now instead of being kept alive here.
const releaseAfter = 10 * time.Second

// waitForOther is called while another runner's run of the session is
// live: the events wait, and after releaseAfter they are given back.
func (a *actor) waitForOther() {
	if a.waitingSince.IsZero() {
		a.waitingSince = time.Now()
	}
	if time.Since(a.waitingSince) <= releaseAfter {
		a.retryLater()
		return
	}
	var give []jetstream.Msg
	for _, d := range a.queue {
		if d.msg != nil {
			give = append(give, d.msg)
		}
	}
	a.queue, a.waitingSince = nil, time.Time{}
	a.ordered = orderMark{}
	for _, m := range give {
		_ = m.NakWithDelay(time.Second)
	}
	a.log.Info().Int("events", len(give)).Msg("another runner's run is live; events given back to the stream")
}

func (a *actor) retryLater() {
	time.AfterFunc(500*time.Millisecond, a.poke)
}

// joinInputs is the text of the run inputs among ins, and the ids of all.
func joinInputs(ins []input) (string, []string) {
	var texts []string
	ids := make([]string, len(ins))
	for i, in := range ins {
		ids[i] = in.id
		if !in.inBrief {
			texts = append(texts, in.text)
		}
	}
	return strings.Join(texts, "\n\n"), ids
}
