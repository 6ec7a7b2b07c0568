package subagents

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"jetway/pkg/control/agents"
	"jetway/pkg/control/sessionrec"
	"jetway/pkg/events"
	"jetway/pkg/handover"
)

// This file reads and writes across a sub-agent tree: the limits a
// profile sets on it, its root's fuel, and its children's state.

// allowed applies the depth and fan-out limits of the parent's profile,
// with errors that say which limit and how to go on.
func (svc *Service) allowed(ctx context.Context, rec sessionrec.Record, prof agents.Profile) error {
	maxDepth, maxKids := agents.SubagentLimits(prof)
	if depth := len(rec.Lineage) + 1; depth > maxDepth {
		return fmt.Errorf("depth limit: the sub-agent would be at depth %d below its root session, and agent profile %q allows %d (limits.max_subagent_depth); do the work here instead",
			depth, agentOrDefault(prof.Name), maxDepth)
	}
	atWork := 0
	for _, ch := range rec.Children {
		crec, _, err := svc.record(ctx, rec.Tenant, ch.Session)
		if err != nil {
			return fmt.Errorf("read sub-agent %d's record: %w", ch.Number, err)
		}
		if childAtWork(crec) {
			atWork++
		}
	}
	if atWork >= maxKids {
		return fmt.Errorf("fan-out limit: %d sub-agents of this session are at work, and agent profile %q allows %d at once (limits.max_subagents); wait for one to finish or stop one with agent_stop",
			atWork, agentOrDefault(prof.Name), maxKids)
	}
	return nil
}

func agentOrDefault(name string) string {
	if name == "" {
		return agents.DefaultName
	}
	return name
}

// childAtWork: a child that runs, or has not yet run its first prompt
// (and was neither refused it nor left without it: a reason says why).
func childAtWork(rec sessionrec.Record) bool {
	return rec.State == sessionrec.StateRunning || (rec.Runs == 0 && rec.State == sessionrec.StateIdle && rec.Reason == "")
}

// reasonPromptNotSent begins the reason on the record of a child whose
// first prompt agent_start could not publish.
const reasonPromptNotSent = "prompt not sent: "

// promptNotSent marks the record of child, made by agent_start, as not
// started because its prompt could not be published (cause). Unmarked it
// would say "starting" and count against its parent's fan-out limit for
// good, with no work on its way to it. A record that no longer waits for
// its first prompt is left as it is: the publish that reported failure may
// have been stored all the same, and the child has run it.
func (svc *Service) promptNotSent(ctx context.Context, tenant, child string, cause error) error {
	// Marked even when the run that asked is being cancelled: the child
	// is left behind either way.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return svc.updateChild(ctx, tenant, child, func(rec *sessionrec.Record) bool {
		if rec.State != sessionrec.StateIdle || rec.Runs != 0 || rec.Reason != "" {
			return false
		}
		rec.Reason = reasonPromptNotSent + cause.Error()
		return true
	})
}

// promptSent undoes promptNotSent once agent_send gave the child work:
// it is starting again, and counts as at work until its run ends. Best
// effort: the child's first run clears the reason anyway when it claims
// the session.
func (svc *Service) promptSent(ctx context.Context, tenant, child string) {
	err := svc.updateChild(ctx, tenant, child, func(rec *sessionrec.Record) bool {
		if rec.State != sessionrec.StateIdle || rec.Runs != 0 || !strings.HasPrefix(rec.Reason, reasonPromptNotSent) {
			return false
		}
		rec.Reason = ""
		return true
	})
	if err != nil {
		svc.cfg.Log.Warn().Err(err).Str("child", child).Msg("clear a sub-agent's prompt-not-sent mark")
	}
}

// updateChild applies change to a fresh read of child's record and
// compare-and-swaps it back, again on a lost swap; change returns false
// to leave the record as it is.
func (svc *Service) updateChild(ctx context.Context, tenant, child string, change func(*sessionrec.Record) bool) error {
	var err error
	for range 5 {
		var rec sessionrec.Record
		var rev uint64
		if rec, rev, err = svc.record(ctx, tenant, child); err != nil {
			return fmt.Errorf("read sub-agent session %s: %w", child, err)
		}
		if rev == 0 || !change(&rec) {
			return nil
		}
		if _, err = sessionrec.Put(ctx, svc.cfg.Records, rec, rev); err == nil || !errors.Is(err, sessionrec.ErrLost) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("write sub-agent session %s: %w", child, err)
	}
	return nil
}

func (svc *Service) record(ctx context.Context, tenant, session string) (sessionrec.Record, uint64, error) {
	return sessionrec.Get(ctx, svc.cfg.Records, tenant, session)
}

// RootFuelLeft refuses work for a sub-agent tree whose root has spent its
// fuel: a child's tokens count against its root's budget.
func (svc *Service) RootFuelLeft(ctx context.Context, rec sessionrec.Record, fuel int64) (string, bool) {
	if fuel <= 0 {
		return "", true
	}
	root := rec.Root()
	used := rec.TokensUsed
	if root != rec.Session {
		rrec, _, err := svc.record(ctx, rec.Tenant, root)
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

// AddRootTokens counts a sub-agent run's tokens against its root session.
func (svc *Service) AddRootTokens(ctx context.Context, tenant, root string, n int64) {
	if n <= 0 {
		return
	}
	for range 10 {
		rec, rev, err := svc.record(ctx, tenant, root)
		if err != nil || rev == 0 {
			return
		}
		rec.TokensUsed += n
		if _, err := sessionrec.Put(ctx, svc.cfg.Records, rec, rev); err == nil {
			return
		}
	}
	svc.cfg.Log.Warn().Str("root", root).Int64("tokens", n).Msg("could not count a sub-agent's tokens against its root session")
}

// ChildrenAtWork lists, for a recovered run's brief, rec's sub-agents that
// are still at work, and those the interrupted run started that have
// finished (their answers may have been lost with it). The interrupted run
// was waiting in the foreground for those it started itself when one of
// its agent_start calls has no result.
func (svc *Service) ChildrenAtWork(ctx context.Context, rec sessionrec.Record, calls []handover.ToolCall) []handover.Child {
	waiting := false
	for _, c := range calls {
		if c.Name == StartTool && !c.Finished {
			waiting = true
		}
	}
	var out []handover.Child
	for _, ch := range rec.Children {
		crec, _, err := svc.record(ctx, rec.Tenant, ch.Session)
		if err != nil {
			continue
		}
		atWork := childAtWork(crec)
		if !atWork && ch.Run != rec.Run {
			continue
		}
		line, err := svc.childLine(ctx, rec.Tenant, ch)
		if err != nil {
			continue
		}
		state := line[strings.LastIndex(line, " · ")+len(" · "):]
		out = append(out, handover.Child{Number: ch.Number, Agent: agentOrDefault(ch.Agent), Session: ch.Session, State: state,
			Waited: atWork && waiting && ch.Run == rec.Run, Finished: !atWork})
	}
	return out
}

// childLine is one line on a child: `agent 2 (reviewer) · session s-a2 · running for 3m`.
func (svc *Service) childLine(ctx context.Context, tenant string, ch sessionrec.Child) (string, error) {
	rec, _, err := svc.record(ctx, tenant, ch.Session)
	if err != nil {
		return "", fmt.Errorf("read sub-agent %d's record: %w", ch.Number, err)
	}
	state := rec.State
	switch {
	case rec.State == sessionrec.StateRunning:
		state = "running for " + events.FmtElapsed(time.Since(rec.Since))
	case rec.State == sessionrec.StateIdle && rec.Runs == 0 && rec.Reason == "":
		state = "starting"
	case rec.State == sessionrec.StateIdle && rec.Runs == 0:
		state = "not started (" + rec.Reason + ")"
	case rec.State == sessionrec.StateIdle:
		state = "finished (" + rec.Reason + ")"
	}
	return fmt.Sprintf("%s · session %s · %s", agentLabel(ch.Number, ch.Agent), ch.Session, state), nil
}

func agentLabel(number int, agent string) string {
	return fmt.Sprintf("agent %d (%s)", number, agentOrDefault(agent))
}

// childName is the default session name of a session's child n: the
// parent's name (cut to fit the token rule) and -a<n>.
func childName(parent string, n int) string {
	suffix := fmt.Sprintf("-a%d", n)
	if len(parent)+len(suffix) > events.MaxTokenLen {
		parent = parent[:events.MaxTokenLen-len(suffix)]
	}
	return parent + suffix
}
