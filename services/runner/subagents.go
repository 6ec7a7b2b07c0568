package runner

import (
	"context"
	"fmt"
	"strings"
	"time"

	"jetway/pkg/control/agents"
	"jetway/pkg/events"
	"jetway/pkg/handover"
	"jetway/pkg/llm"
)

// This file is sub-agents: a run starts a child session (any runner may
// run it) with an agent profile and a prompt, waits for its answer up to a
// bound and then leaves it in the background, as the shell tool does with
// a command. The child's work reaches it as io.jetway.agent.input and its
// end reaches the parent as io.jetway.agent.finished, both on
// jetway.agentevents.…, which only runners may publish: a tenant can
// neither give a child work as its parent nor forge a child's answer.

// childRun is what a sub-agent's live run needs to report its end.
type childRun struct {
	parent string
	number int
	agent  string
}

// endedRun is the last run whose end the session's transcript records,
// with what a finished event says of it.
type endedRun struct {
	run, reason, answer string
	started             time.Time
}

// FinishedEventID is the CE id of a child run's finished event: made from the
// run, so a publish repeated after a crash is the same event (dropped by
// JETWAY_AGENTEVENTS's dedupe window, and by the parent's transcript).
func FinishedEventID(child, run string) string { return "agent-finished." + child + "." + run }

// childAllowed applies the depth and fan-out limits of the parent's
// profile, with errors that say which limit and how to go on.
func (r *Runner) childAllowed(ctx context.Context, rec SessionRecord, prof agents.Profile) error {
	maxDepth, maxKids := agents.SubagentLimits(prof)
	if depth := len(rec.Lineage) + 1; depth > maxDepth {
		return fmt.Errorf("depth limit: the sub-agent would be at depth %d below its root session, and agent profile %q allows %d (limits.max_subagent_depth); do the work here instead",
			depth, profileName(prof), maxDepth)
	}
	atWork := 0
	for _, ch := range rec.Children {
		crec, _, err := r.records.get(ctx, rec.Tenant, ch.Session)
		if err != nil {
			return fmt.Errorf("read sub-agent %d's record: %w", ch.Number, err)
		}
		if childAtWork(crec) {
			atWork++
		}
	}
	if atWork >= maxKids {
		return fmt.Errorf("fan-out limit: %d sub-agents of this session are at work, and agent profile %q allows %d at once (limits.max_subagents); wait for one to finish or stop one with agent_stop",
			atWork, profileName(prof), maxKids)
	}
	return nil
}

func profileName(prof agents.Profile) string {
	if prof.Name == "" {
		return agents.DefaultName
	}
	return prof.Name
}

// childAtWork: a child that runs, or has not yet run its first prompt
// (and was not refused it).
func childAtWork(rec SessionRecord) bool {
	return rec.State == StateRunning || (rec.Runs == 0 && rec.State == StateIdle && rec.Reason == "")
}

// rootFuelLeft refuses work for a sub-agent tree whose root has spent its
// fuel: a child's tokens count against its root's budget.
func (r *Runner) rootFuelLeft(ctx context.Context, rec SessionRecord, fuel int64) (string, bool) {
	if fuel <= 0 {
		return "", true
	}
	root := rec.Root()
	used := rec.TokensUsed
	if root != rec.Session {
		rrec, _, err := r.records.get(ctx, rec.Tenant, root)
		if err != nil {
			return "root session's fuel unreadable: " + err.Error(), false
		}
		used = rrec.TokensUsed
	}
	if used >= fuel {
		return fmt.Sprintf("out of fuel: the root session %s has used %d of its %d tokens (its sub-agents' use counts)", root, used, fuel), false
	}
	return "", true
}

// addRootTokens counts a sub-agent run's tokens against its root session.
func (r *Runner) addRootTokens(ctx context.Context, tenant, root string, n int64) {
	if n <= 0 {
		return
	}
	for range 10 {
		rec, rev, err := r.records.get(ctx, tenant, root)
		if err != nil || rev == 0 {
			return
		}
		rec.TokensUsed += n
		if _, err := r.records.put(ctx, rec, rev); err == nil {
			return
		}
	}
	r.log.Warn().Str("root", root).Int64("tokens", n).Msg("could not count a sub-agent's tokens against its root session")
}

// publishAgentEvent publishes p on tenant/session's agentevents subject;
// id "" is a fresh one.
func (r *Runner) publishAgentEvent(ctx context.Context, tenant, session, id string, p events.Payload) error {
	ev, err := events.New(tenant, session, source, p)
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
		_, last = r.js.PublishMsg(pctx, msg)
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

// answerOf is the text of the last assistant message of msgs that has any.
func answerOf(msgs []llm.Message) string {
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

// agentEvent handles the sub-agent events that are not notices: a stop
// asked of this session, and a child's end that a foreground agent_start
// call is waiting for. It reports whether it handled d.
func (a *actor) agentEvent(ctx context.Context, d delivery, run *liveRun) bool {
	if !d.ev.FromRunner {
		return false
	}
	switch p := d.ev.Payload.(type) {
	case events.AgentStop:
		if run == nil {
			a.drop(ctx, d.ev.ID, d.ev.Type, d.msg, "stop asked by the parent session "+p.Parent+": no run to stop")
			return true
		}
		run.stopAsked = true
		run.cancel()
		a.drop(ctx, d.ev.ID, d.ev.Type, d.msg, "stop asked by the parent session "+p.Parent)
		return true
	case events.AgentFinished:
		if run == nil {
			return false
		}
		fin, ok := run.waiters[p.Child]
		if !ok {
			return false
		}
		delete(run.waiters, p.Child)
		fin <- p
		// The answer reaches the model as the result of the call that
		// waited for it: recorded here as taken, so it is not a notice too.
		a.drop(ctx, d.ev.ID, d.ev.Type, d.msg, ReasonAnsweredInWait)
		return true
	}
	return false
}

// ReasonAnsweredInWait is the transcript's note on a child's finished
// event that a foreground agent_start call returned to the model.
const ReasonAnsweredInWait = "delivered as the result of the agent_start call that waited for it"

// reportEnd publishes a sub-agent run's end onto its parent's events.
func (a *actor) reportEnd(ctx context.Context, lr *liveRun, end endedRun) error {
	ch := lr.child
	answer, cut := events.CapAnswer(end.answer)
	f := events.AgentFinished{Child: a.session, Agent: ch.agent, Number: ch.number, Run: end.run, Reason: end.reason,
		Answer: answer, Truncated: cut, RunningForMS: events.ElapsedMS(time.Since(end.started))}
	return a.r.publishAgentEvent(ctx, a.tenant, ch.parent, FinishedEventID(a.session, end.run), f)
}

// endedOf reads the last recorded run end from a loaded transcript.
func endedOf(recs []Record) endedRun {
	var e endedRun
	starts := map[string]time.Time{}
	answers := map[string]string{}
	for _, r := range recs {
		switch r.Kind {
		case RecordRunStarted:
			starts[r.Run] = r.Time
		case RecordMessage:
			if r.Message != nil {
				if t := answerOf([]llm.Message{*r.Message}); t != "" {
					answers[r.Run] = t
				}
			}
		case RecordRunEnded:
			e = endedRun{run: r.Run, reason: r.Reason, started: starts[r.Run], answer: answers[r.Run]}
		}
	}
	return e
}

// finishRecorded settles a running record whose run's end is already in
// the transcript (its runner died between recording the end and writing
// the record): a sub-agent's end is published (again: same id), and the
// record says idle. It reports whether it did.
func (a *actor) finishRecorded(ctx context.Context, rec SessionRecord, rev uint64) bool {
	if rec.State != StateRunning || rec.Run == "" || a.ended.run != rec.Run {
		return false
	}
	if parent := rec.Parent(); parent != "" {
		lr := &liveRun{child: &childRun{parent: parent, number: rec.Number, agent: rec.Agent}}
		if err := a.reportEnd(ctx, lr, a.ended); err != nil {
			a.log.Warn().Err(err).Msg("publish a sub-agent's end")
			return false
		}
	}
	rec.State, rec.Reason = StateIdle, a.ended.reason
	_, err := a.putRecord(ctx, rec, rev)
	return err == nil
}

// reportRunEnd notes the run's recorded end and, for a sub-agent, tells
// its parent. A publish that fails hands the session over (lost): its
// record still names the run, so whoever recovers it finds the end
// recorded and publishes it again, with the same id. False then.
func (a *actor) reportRunEnd(ctx context.Context, lr *liveRun, reason string) bool {
	var answer string
	if a.tr == lr.tr && lr.histLen <= len(a.hist) {
		answer = answerOf(a.hist[lr.histLen:])
	}
	a.ended = endedRun{run: lr.id, reason: reason, answer: answer, started: lr.start}
	if lr.child == nil {
		return true
	}
	end := a.ended
	switch {
	case lr.stopAsked:
		end.reason = "stopped"
	case func() bool { _, on := a.grounded(); return on }():
		end.reason = "ground_stop"
	}
	a.ended.reason = end.reason
	if err := a.reportEnd(ctx, lr, end); err != nil {
		a.log.Warn().Err(err).Str("run", lr.id).Msg("tell the parent session a sub-agent's run ended")
		a.lost(ctx, err)
		return false
	}
	return true
}

// childrenAtWork lists, for a recovered run's brief, rec's sub-agents that
// are still at work, and those the interrupted run started that have
// finished (their answers may have been lost with it). The interrupted run
// was waiting in the foreground for those it started itself when one of
// its agent_start calls has no result.
func (r *Runner) childrenAtWork(ctx context.Context, rec SessionRecord, calls []handover.ToolCall) []handover.Child {
	waiting := false
	for _, c := range calls {
		if c.Name == AgentStartTool && !c.Finished {
			waiting = true
		}
	}
	var out []handover.Child
	for _, ch := range rec.Children {
		crec, _, err := r.records.get(ctx, rec.Tenant, ch.Session)
		if err != nil {
			continue
		}
		atWork := childAtWork(crec)
		if !atWork && ch.Run != rec.Run {
			continue
		}
		line, err := r.childLine(ctx, rec.Tenant, ch)
		if err != nil {
			continue
		}
		state := line[strings.LastIndex(line, " · ")+len(" · "):]
		out = append(out, handover.Child{Number: ch.Number, Agent: agentOrDefault(ch.Agent), Session: ch.Session, State: state,
			Waited: atWork && waiting && ch.Run == rec.Run, Finished: !atWork})
	}
	return out
}

func agentOrDefault(name string) string {
	if name == "" {
		return agents.DefaultName
	}
	return name
}

// reportRefusal tells a sub-agent's parent that the child's run was
// refused (a rail: its root's fuel, its run cap), so the parent does not
// wait for an answer that will not come, and marks the child's record so
// it no longer counts as at work. The event's id is made from the first
// refused event's, so a redelivered refusal reports nothing new.
func (a *actor) reportRefusal(ctx context.Context, p plan, reason string) {
	l := a.lineage.Load()
	if l == nil || len(*l) == 0 || len(p.ins) == 0 {
		return
	}
	rec, rev, _, err := a.record(ctx)
	if err != nil || rec.Parent() == "" {
		return
	}
	run := "refused-" + p.ins[0].id
	f := events.AgentFinished{Child: a.session, Agent: rec.Agent, Number: rec.Number, Run: run, Reason: "refused",
		Answer: "Its run was refused: " + reason}
	if err := a.r.publishAgentEvent(ctx, a.tenant, rec.Parent(), FinishedEventID(a.session, run), f); err != nil {
		a.log.Warn().Err(err).Msg("tell the parent session a sub-agent's run was refused")
	}
	if rec.State == StateIdle && rec.Reason == "" {
		rec.Reason = "refused: " + reason
		_, _ = a.putRecord(ctx, rec, rev)
	}
}
