// Package subagents is a session's sub-agents: a run starts a child
// session (any runner may run it) with an agent profile and a prompt,
// waits for its answer up to a bound and then leaves it in the background,
// as the shell tool does with a command. The child's work reaches it as
// io.jetway.agent.input and its end reaches the parent as
// io.jetway.agent.finished, both on jetway.agentevents.…, which only
// runners may publish: a tenant can neither give a child work as its
// parent nor forge a child's answer.
//
// It lives apart from the session actor so that the actor stays the
// delivery and run state machine: the actor holds one Session per session
// and one Run per live run, and calls them at a run's start (tools,
// lineage), on a sub-agent event (Take) and at a run's end (RunEnded).
package subagents

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/pkg/control/sessionrec"
	"jetway/pkg/events"
	"jetway/pkg/llm"
)

// Config is what sub-agents need of the runner they live in.
type Config struct {
	JS jetstream.JetStream
	// Records is the sessions bucket.
	Records jetstream.KeyValue
	// Source is the CE source of the events published.
	Source string
	// Known is nil when the tenant has the agent profile name, else an
	// error a model can read (unknown, or unreadable).
	Known func(ctx context.Context, tenant, name string) error
	// LastAnswer is the last assistant text in a session's transcript.
	LastAnswer func(ctx context.Context, tenant, session string) (string, error)
	Log        zerolog.Logger
}

// Service is the sub-agents of one runner's sessions.
type Service struct{ cfg Config }

// New makes the sub-agents of one runner.
func New(cfg Config) *Service { return &Service{cfg: cfg} }

// Host is what a Session needs of the actor that drives its session.
type Host struct {
	// Do runs fn in the actor's goroutine, so what touches the session's
	// state is ordered with its deliveries; false when the session is no
	// longer driven here (fn never runs).
	Do func(fn func()) bool
	// Record reads the session record (the actor's copy where it has one);
	// PutRecord CAS-writes it, keeping that copy in step.
	Record    func(ctx context.Context) (sessionrec.Record, uint64, error)
	PutRecord func(ctx context.Context, rec sessionrec.Record, rev uint64) (uint64, error)
}

// Session is one session's sub-agent side: its lineage and the last run
// whose end its transcript records. Apart from the lineage, which Ground
// Stop reads from another goroutine, it is the actor goroutine's alone.
type Session struct {
	svc             *Service
	host            Host
	tenant, session string
	log             zerolog.Logger

	lineage atomic.Pointer[[]string]
	ended   Ended
}

// Session is the sub-agent side of tenant/session, driven by host.
func (svc *Service) Session(host Host, tenant, session string, log zerolog.Logger) *Session {
	return &Session{svc: svc, host: host, tenant: tenant, session: session, log: log}
}

// Ended is the last run whose end the session's transcript records, with
// what a finished event says of it.
type Ended struct {
	Run, Reason, Answer string
	Started             time.Time
}

// Run is the sub-agent side of one live run: the foreground agent_start
// calls waiting for a child's end, by child session, and, when the session
// is itself a sub-agent, whom it reports to. The actor goroutine's alone.
type Run struct {
	id      string
	cancel  func()
	parent  *parentOf
	waiters map[string]chan events.AgentFinished
	// stopAsked: the parent stopped it; over: it is no longer the live run.
	stopAsked, over bool
}

// parentOf is whom a sub-agent's run reports to, and as what.
type parentOf struct {
	session string
	number  int
	agent   string
}

// FinishedEventID is the CE id of a child run's finished event: made from
// the run, so a publish repeated after a crash is the same event (dropped
// by JETWAY_AGENTEVENTS's dedupe window, and by the parent's transcript).
func FinishedEventID(child, run string) string { return "agent-finished." + child + "." + run }

// ReasonAnsweredInWait is the transcript's note on a child's finished
// event that a foreground agent_start call returned to the model.
const ReasonAnsweredInWait = "delivered as the result of the agent_start call that waited for it"

// SetLineage notes the session's ancestors, root first (they never change).
func (s *Session) SetLineage(l []string) {
	if len(l) > 0 && s.lineage.Load() == nil {
		c := append([]string(nil), l...)
		s.lineage.Store(&c)
	}
}

// Lineage is the session's ancestors as far as known (none until a run
// start read its record): Ground Stop of any of them covers it.
func (s *Session) Lineage() []string {
	if l := s.lineage.Load(); l != nil {
		return *l
	}
	return nil
}

// Loaded notes the last run end a freshly loaded transcript records.
func (s *Session) Loaded(e Ended) { s.ended = e }

// StartRun is the sub-agent side of run id, claimed with rec; cancel ends
// it when its parent asks.
func (s *Session) StartRun(id string, rec sessionrec.Record, cancel func()) *Run {
	r := &Run{id: id, cancel: cancel, waiters: map[string]chan events.AgentFinished{}}
	if parent := rec.Parent(); parent != "" {
		r.parent = &parentOf{session: parent, number: rec.Number, agent: rec.Agent}
	}
	return r
}

// End notes that the run is no longer live: its tools start no child from
// here on.
func (r *Run) End() { r.over = true }

// Take handles the sub-agent events that are not notices: a stop asked of
// this session, and a child's end a foreground agent_start call of run
// (nil when none is live) is waiting for. When it took ev, the actor
// records it as taken for reason and acks it.
func (r *Run) Take(ev events.HostEvent) (reason string, took bool) {
	if !ev.FromRunner {
		return "", false
	}
	switch p := ev.Payload.(type) {
	case events.AgentStop:
		if r == nil {
			return "stop asked by the parent session " + p.Parent + ": no run to stop", true
		}
		r.stopAsked = true
		r.cancel()
		return "stop asked by the parent session " + p.Parent, true
	case events.AgentFinished:
		if r == nil {
			return "", false
		}
		fin, ok := r.waiters[p.Child]
		if !ok {
			return "", false
		}
		delete(r.waiters, p.Child)
		fin <- p
		// The answer reaches the model as the result of the call that
		// waited for it: recorded as taken, so it is not a notice too.
		return ReasonAnsweredInWait, true
	}
	return "", false
}

// RunEnded notes a run's recorded end and, for a sub-agent, tells its
// parent (grounded: Ground Stop covers the session now). An error means
// the parent was not told: the actor hands the session over, its record
// still naming the run, so whoever recovers it finds the end recorded and
// publishes it again, with the same id.
func (s *Session) RunEnded(ctx context.Context, r *Run, end Ended, grounded bool) error {
	if r.parent != nil {
		switch {
		case r.stopAsked:
			end.Reason = "stopped"
		case grounded:
			end.Reason = "ground_stop"
		}
	}
	s.ended = end
	if r.parent == nil {
		return nil
	}
	if err := s.reportEnd(ctx, r.parent, end); err != nil {
		return fmt.Errorf("tell the parent session a sub-agent's run ended: %w", err)
	}
	return nil
}

// reportEnd publishes a sub-agent run's end onto its parent's events.
func (s *Session) reportEnd(ctx context.Context, p *parentOf, end Ended) error {
	answer, cut := events.CapAnswer(end.Answer)
	f := events.AgentFinished{Child: s.session, Agent: p.agent, Number: p.number, Run: end.Run, Reason: end.Reason,
		Answer: answer, Truncated: cut, RunningForMS: events.ElapsedMS(time.Since(end.Started))}
	return s.svc.publish(ctx, s.tenant, p.session, FinishedEventID(s.session, end.Run), f)
}

// FinishRecorded settles a running record whose run's end is already in
// the transcript (its runner died between recording the end and writing
// the record): a sub-agent's end is published (again: same id), and the
// record says idle. It reports whether it did.
func (s *Session) FinishRecorded(ctx context.Context, rec sessionrec.Record, rev uint64) bool {
	if rec.State != sessionrec.StateRunning || rec.Run == "" || s.ended.Run != rec.Run {
		return false
	}
	if parent := rec.Parent(); parent != "" {
		if err := s.reportEnd(ctx, &parentOf{session: parent, number: rec.Number, agent: rec.Agent}, s.ended); err != nil {
			s.log.Warn().Err(err).Msg("publish a sub-agent's end")
			return false
		}
	}
	rec.State, rec.Reason = sessionrec.StateIdle, s.ended.Reason
	_, err := s.host.PutRecord(ctx, rec, rev)
	return err == nil
}

// Refused tells a sub-agent's parent that the child's run was refused (a
// rail: its root's fuel, its run cap), so the parent does not wait for an
// answer that will not come, and marks the child's record so it no longer
// counts as at work. The event's id is made from the first refused
// event's (firstEvent), so a redelivered refusal reports nothing new.
func (s *Session) Refused(ctx context.Context, firstEvent, reason string) {
	if len(s.Lineage()) == 0 {
		return
	}
	rec, rev, err := s.host.Record(ctx)
	if err != nil || rec.Parent() == "" {
		return
	}
	run := "refused-" + firstEvent
	f := events.AgentFinished{Child: s.session, Agent: rec.Agent, Number: rec.Number, Run: run, Reason: "refused",
		Answer: "Its run was refused: " + reason}
	if err := s.svc.publish(ctx, s.tenant, rec.Parent(), FinishedEventID(s.session, run), f); err != nil {
		s.log.Warn().Err(err).Msg("tell the parent session a sub-agent's run was refused")
	}
	if rec.State == sessionrec.StateIdle && rec.Reason == "" {
		rec.Reason = "refused: " + reason
		_, _ = s.host.PutRecord(ctx, rec, rev)
	}
}

// publish publishes p on tenant/session's agentevents subject; id "" is a
// fresh one.
func (svc *Service) publish(ctx context.Context, tenant, session, id string, p events.Payload) error {
	ev, err := events.New(tenant, session, svc.cfg.Source, p)
	if err != nil {
		return err
	}
	if id != "" {
		ev.SetID(id)
	}
	subj, err := events.AgentEventsSubject(tenant, session)
	if err != nil {
		return err
	}
	var last error
	for attempt := range 5 {
		msg, err := events.Encode(ctx, subj, ev)
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, last = svc.cfg.JS.PublishMsg(pctx, msg)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("publish %s: %w", p.EventType(), last)
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
	return fmt.Errorf("publish %s: %w", p.EventType(), last)
}

// AnswerOf is the text of the last assistant message of msgs that has any.
func AnswerOf(msgs []llm.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != llm.RoleAssistant {
			continue
		}
		var parts []string
		for _, b := range m.Content {
			if b.Type == llm.BlockText && strings.TrimSpace(b.Text) != "" {
				parts = append(parts, b.Text)
			}
		}
		if len(parts) > 0 {
			return strings.Join(parts, "\n")
		}
	}
	return ""
}
