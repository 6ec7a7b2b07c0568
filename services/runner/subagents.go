package runner

import (
	"context"
	"fmt"
	"time"

	"jetway/pkg/llm"
	"jetway/services/runner/internal/subagents"
)

// Sub-agents live in internal/subagents; this is what the runner lends
// them (its buckets, its profiles, its transcripts) and what its API and
// its transcript reading say of them.

// FinishedEventID is the CE id of a child run's finished event (see
// subagents.FinishedEventID).
func FinishedEventID(child, run string) string { return subagents.FinishedEventID(child, run) }

// ReasonAnsweredInWait is the transcript's note on a child's finished
// event that a foreground agent_start call returned to the model.
const ReasonAnsweredInWait = subagents.ReasonAnsweredInWait

// subagentsOf is the sub-agents of r's sessions.
func (r *Runner) subagentsOf() *subagents.Service {
	return subagents.New(subagents.Config{JS: r.js, Records: r.records.kv, Source: source,
		Known: r.checkAgent, LastAnswer: r.lastAnswer, Log: r.log})
}

// checkAgent is knownAgent as an error a model can read: nil when the
// tenant has the profile name.
func (r *Runner) checkAgent(ctx context.Context, tenant, name string) error {
	known, err := r.knownAgent(ctx, tenant, name)
	if err != nil {
		return fmt.Errorf("could not read agent profile %q: %w", name, err)
	}
	if !known {
		return unknownAgentError{tenant: tenant, name: name}
	}
	return nil
}

// lastAnswer is the last assistant text in a session's transcript.
func (r *Runner) lastAnswer(ctx context.Context, tenant, session string) (string, error) {
	_, recs, err := r.transcripts.load(ctx, tenant, session)
	if err != nil {
		return "", err
	}
	return subagents.AnswerOf(history(recs)), nil
}

// endedOf reads the last recorded run end from a loaded transcript.
func endedOf(recs []Record) subagents.Ended {
	var e subagents.Ended
	starts := map[string]time.Time{}
	answers := map[string]string{}
	for _, r := range recs {
		switch r.Kind {
		case RecordRunStarted:
			starts[r.Run] = r.Time
		case RecordMessage:
			if r.Message != nil {
				if t := subagents.AnswerOf([]llm.Message{*r.Message}); t != "" {
					answers[r.Run] = t
				}
			}
		case RecordRunEnded:
			e = subagents.Ended{Run: r.Run, Reason: r.Reason, Started: starts[r.Run], Answer: answers[r.Run]}
		}
	}
	return e
}

// hostOf is what a's sub-agent side needs of it.
func hostOf(a *actor) subagents.Host {
	return subagents.Host{
		Do: func(fn func()) bool { return a.send(func(*actor) { fn() }) },
		Record: func(ctx context.Context) (SessionRecord, uint64, error) {
			rec, rev, _, err := a.record.get(ctx)
			return rec, rev, err
		},
		PutRecord: a.record.put,
	}
}

// subRun is the sub-agent side of lr (nil when no run is live).
func (lr *liveRun) subRun() *subagents.Run {
	if lr == nil {
		return nil
	}
	return lr.sub
}

// answer is the run's answer: the last assistant text it added to hist,
// when hist is still the history of the transcript tr it grew.
func (lr *liveRun) answer(tr *transcript, hist []llm.Message) string {
	if tr != lr.tr || lr.histLen > len(hist) {
		return ""
	}
	return subagents.AnswerOf(hist[lr.histLen:])
}
