package subagents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"jetway/pkg/agent/tool"
	"jetway/pkg/control/agents"
	"jetway/pkg/control/sessionrec"
	"jetway/pkg/events"
)

// The sub-agent tools a run gets (see subagents.go for the events behind
// them). A tool call runs in the run's goroutine; what touches the
// session's state (its record, the live run's waiters) goes through the
// actor (Host.Do).

// Sub-agent tool names.
const (
	StartTool  = "agent_start"
	StatusTool = "agent_status"
	SendTool   = "agent_send"
	StopTool   = "agent_stop"
	// ReportTool is a sub-agent's own: a progress report to its parent.
	ReportTool = "agent_report"
)

// Foreground wait bounds of agent_start, in seconds.
const (
	DefaultWait = 120
	MaxWait     = 600
)

// tools are the sub-agent tools of one run.
type tools struct {
	s    *Session
	run  *Run
	prof agents.Profile
	fuel int64 // the fuel of this run's session (a root's own budget)
}

// Tools are the sub-agent tools of run, which goes by prof with fuel (its
// session's own budget, a root's): agent_start, _status, _send and
// _stop, and agent_report when the session is itself a sub-agent.
func (s *Session) Tools(run *Run, prof agents.Profile, fuel int64) []tool.Tool {
	t := &tools{s: s, run: run, prof: prof, fuel: fuel}
	out := []tool.Tool{
		tool.Func{Name: StartTool, Schema: startSchema, Fn: t.start,
			Description: "Start a sub-agent: a new session with its own context that works on prompt with the agent profile named. " +
				"Waits up to wait seconds for its answer; past that it goes on in the background and its answer arrives later as a notice. " +
				"Use agent_status, agent_send and agent_stop to follow it."},
		tool.Func{Name: StatusTool, Schema: statusSchema, Fn: t.status,
			Description: "List this session's sub-agents and their state, or show one (agent: its number) with its last answer in full."},
		tool.Func{Name: SendTool, Schema: sendSchema, Fn: t.send,
			Description: "Send a sub-agent more input; its answer arrives as a notice."},
		tool.Func{Name: StopTool, Schema: stopSchema, Fn: t.stop,
			Description: "Stop a sub-agent's run; its end arrives as a notice."},
	}
	if run.parent != nil {
		out = append(out, tool.Func{Name: ReportTool, Schema: reportSchema, Fn: t.report,
			Description: "You are a sub-agent: tell the session that started you how far you got, while you go on working. " +
				"Your final answer reaches it by itself when your run ends."})
	}
	return out
}

// report is agent_report: a child's progress, a notice for its parent.
func (t *tools) report(ctx context.Context, c tool.Call) (tool.Result, error) {
	var in struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(c.Input, &in); err != nil || strings.TrimSpace(in.Text) == "" {
		return toolError("invalid input: want {\"text\": \"...\"}")
	}
	ch := t.run.parent
	p := events.AgentProgress{Child: t.s.session, Agent: agentOrDefault(ch.agent), Number: ch.number, Text: in.Text}
	if err := t.s.svc.publish(ctx, t.s.tenant, ch.session, "", p); err != nil {
		return toolError("could not report to session %s: %v", ch.session, err)
	}
	return tool.Result{Content: "Reported to session " + ch.session + "."}, nil
}

var (
	startSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"agent":{"type":"string","description":"agent profile name (default: the default profile)"},` +
		`"prompt":{"type":"string","description":"what the sub-agent is to do; it knows nothing else of your work"},` +
		`"name":{"type":"string","description":"its session name, 1-64 of A-Z a-z 0-9 _ - (default: <this session>-a<n>)"},` +
		`"wait":{"type":"integer","minimum":0,"maximum":600,"description":"seconds to wait for its answer before it goes on in the background (default 120)"}},` +
		`"required":["prompt"]}`)
	statusSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"agent":{"type":"integer","description":"a sub-agent's number; absent lists them all"}}}`)
	sendSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"agent":{"type":"integer","description":"the sub-agent's number"},` +
		`"text":{"type":"string"}},"required":["agent","text"]}`)
	stopSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"agent":{"type":"integer","description":"the sub-agent's number"},` +
		`"reason":{"type":"string"}},"required":["agent"]}`)
	reportSchema = json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","description":"a short progress report"}},"required":["text"]}`)
)

func toolError(format string, args ...any) (tool.Result, error) {
	return tool.Result{Content: fmt.Sprintf(format, args...), IsError: true}, nil
}

type startInput struct {
	Agent  string `json:"agent"`
	Prompt string `json:"prompt"`
	Name   string `json:"name"`
	Wait   *int   `json:"wait"`
}

// start is agent_start.
func (t *tools) start(ctx context.Context, c tool.Call) (tool.Result, error) {
	var in startInput
	if err := json.Unmarshal(c.Input, &in); err != nil {
		return toolError("invalid input: %v", err)
	}
	if strings.TrimSpace(in.Prompt) == "" {
		return toolError("prompt: say what the sub-agent is to do")
	}
	wait := DefaultWait
	if in.Wait != nil {
		wait = *in.Wait
	}
	if wait < 0 || wait > MaxWait {
		return toolError("wait %d: want 0 to %d seconds", wait, MaxWait)
	}
	if in.Agent == agents.DefaultName {
		in.Agent = ""
	}
	if err := t.s.svc.cfg.Known(ctx, t.s.tenant, in.Agent); err != nil {
		return toolError("%v", err)
	}
	var ch sessionrec.Child
	var fin chan events.AgentFinished
	var startErr error
	done := make(chan struct{})
	if !t.s.host.Do(func() {
		defer close(done)
		ch, fin, startErr = t.startChild(ctx, in, wait > 0)
	}) {
		return toolError("the session is no longer driven here")
	}
	select {
	case <-done:
	case <-ctx.Done():
		return tool.Result{}, ctx.Err()
	}
	if startErr != nil {
		return toolError("sub-agent not started: %v", startErr)
	}
	if err := t.s.svc.publish(ctx, t.s.tenant, ch.Session, "", events.AgentInput{Text: in.Prompt, Parent: t.s.session}); err != nil {
		t.unwait(ch.Session)
		marked := "it is marked not started, so it does not count against the fan-out limit"
		if merr := t.s.svc.promptNotSent(ctx, t.s.tenant, ch.Session, err); merr != nil {
			marked = fmt.Sprintf("its record could not be marked not started (%v), so it counts as starting until it runs or is stopped", merr)
		}
		return toolError("sub-agent %d (session %s) was made but its prompt could not be sent: %v; %s. Send it the prompt again with agent_send, or do the work another way",
			ch.Number, ch.Session, err, marked)
	}
	name := agentLabel(ch.Number, ch.Agent)
	if wait == 0 {
		return tool.Result{Content: fmt.Sprintf("%s started as session %s in the background. %s", name, ch.Session, followUp)}, nil
	}
	timer := time.NewTimer(time.Duration(wait) * time.Second)
	defer timer.Stop()
	select {
	case f := <-fin:
		return tool.Result{Content: answerText(f)}, nil
	case <-timer.C:
	case <-ctx.Done():
	}
	t.unwait(ch.Session)
	select {
	case f := <-fin: // it came as the wait ended
		return tool.Result{Content: answerText(f)}, nil
	default:
	}
	return tool.Result{Content: fmt.Sprintf("%s (session %s) is still working after %ds; it goes on in the background. %s",
		name, ch.Session, wait, followUp)}, nil
}

const followUp = "Its answer arrives as a notice when it finishes; follow it with agent_status, send it more with agent_send, stop it with agent_stop."

// unwait ends a foreground wait: from here the child's end is a notice.
// It returns when the actor has dropped the waiter, so no answer goes to
// it afterwards.
func (t *tools) unwait(child string) {
	done := make(chan struct{})
	if !t.s.host.Do(func() {
		delete(t.run.waiters, child)
		close(done)
	}) {
		return
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// answerText is agent_start's result when the answer came in the wait.
func answerText(f events.AgentFinished) string {
	head, _ := events.Headline(f)
	var b strings.Builder
	fmt.Fprintf(&b, "%s (session %s).\n", head, f.Child)
	if strings.TrimSpace(f.Answer) == "" {
		b.WriteString("It gave no answer.")
	} else {
		b.WriteString("Its answer:\n" + strings.TrimSpace(f.Answer))
	}
	if f.Truncated {
		fmt.Fprintf(&b, "\n… (cut: read all of it with agent_status {\"agent\": %d})", f.Number)
	}
	return b.String()
}

// startChild makes the child's session record and names it in the
// parent's, in the actor so two calls of one turn number their children
// in turn. With wait, the live run gets a waiter for the child's end.
func (t *tools) startChild(ctx context.Context, in startInput, wait bool) (sessionrec.Child, chan events.AgentFinished, error) {
	s, svc := t.s, t.s.svc
	if t.run.over {
		return sessionrec.Child{}, nil, errors.New("the run that asked has ended")
	}
	// A fresh read, not the actor's copy: the copy of a runner that was
	// taken over still names its run, and the start is an effect.
	rec, rev, err := svc.record(ctx, s.tenant, s.session)
	if err != nil {
		return sessionrec.Child{}, nil, fmt.Errorf("read this session's record: %w", err)
	}
	if err := liveFence(rec, t.run.id); err != nil {
		return sessionrec.Child{}, nil, err
	}
	if err := svc.allowed(ctx, rec, t.prof); err != nil {
		return sessionrec.Child{}, nil, err
	}
	rootFuel := rec.RootFuel
	if len(rec.Lineage) == 0 {
		rootFuel = t.fuel
	}
	if reason, ok := svc.RootFuelLeft(ctx, rec, rootFuel); !ok {
		return sessionrec.Child{}, nil, errors.New(reason)
	}
	number := len(rec.Children) + 1
	name := in.Name
	if name == "" {
		name = childName(s.session, number)
	}
	if err := events.ValidateToken("name", name); err != nil {
		return sessionrec.Child{}, nil, err
	}
	child := sessionrec.Record{Tenant: s.tenant, Session: name, State: sessionrec.StateIdle, Since: time.Now().UTC(), Agent: in.Agent,
		Lineage: append(append([]string(nil), rec.Lineage...), s.session), Number: number, RootFuel: rootFuel}
	if _, err := sessionrec.Put(ctx, svc.cfg.Records, child, 0); err != nil {
		if errors.Is(err, sessionrec.ErrLost) {
			return sessionrec.Child{}, nil, fmt.Errorf("session %q exists already: choose another name", name)
		}
		return sessionrec.Child{}, nil, fmt.Errorf("make session %s: %w", name, err)
	}
	ch := sessionrec.Child{Session: name, Agent: in.Agent, Number: number, Run: t.run.id, Started: child.Since}
	rec.Children = append(rec.Children, ch)
	if _, err := s.host.PutRecord(ctx, rec, rev); err != nil {
		// A stale copy: once more on a fresh read.
		if rec, rev, err = svc.record(ctx, s.tenant, s.session); err == nil {
			if err = liveFence(rec, t.run.id); err == nil {
				rec.Children = append(rec.Children, ch)
				_, err = s.host.PutRecord(ctx, rec, rev)
			}
		}
		if err != nil {
			return sessionrec.Child{}, nil, fmt.Errorf("name the child in this session's record: %w", err)
		}
	}
	var fin chan events.AgentFinished
	if wait {
		fin = make(chan events.AgentFinished, 1)
		t.run.waiters[name] = fin
	}
	return ch, fin, nil
}

// liveFence refuses a sub-agent start of a run that is no longer its
// session's live run: one whose runner was frozen or cut off while another
// recovered the session. Its next write would be refused, but a child is
// an effect before that write. The record names exactly one run while the
// session runs, and every claim writes a new run id: the id is the fence.
func liveFence(rec sessionrec.Record, run string) error {
	if rec.State == sessionrec.StateRunning && rec.Run == run {
		return nil
	}
	now := "says " + rec.State
	if rec.State == sessionrec.StateRunning {
		now = fmt.Sprintf("names run %s on runner %s", rec.Run, rec.Runner)
	}
	return fmt.Errorf("refused: run %s is no longer this session's live run (its record %s): the session moved on, so this run starts no sub-agent", run, now)
}

// childOf finds a child by number in a fresh read of the session record.
func (t *tools) childOf(ctx context.Context, number int) (sessionrec.Child, error) {
	rec, _, err := t.s.svc.record(ctx, t.s.tenant, t.s.session)
	if err != nil {
		return sessionrec.Child{}, err
	}
	for _, ch := range rec.Children {
		if ch.Number == number {
			return ch, nil
		}
	}
	return sessionrec.Child{}, fmt.Errorf("this session has no sub-agent %d (it has %d; agent_status lists them)", number, len(rec.Children))
}

type numberInput struct {
	Agent  *int   `json:"agent"`
	Text   string `json:"text"`
	Reason string `json:"reason"`
}

// status is agent_status.
func (t *tools) status(ctx context.Context, c tool.Call) (tool.Result, error) {
	var in numberInput
	if len(c.Input) > 0 {
		if err := json.Unmarshal(c.Input, &in); err != nil {
			return toolError("invalid input: %v", err)
		}
	}
	if in.Agent != nil {
		ch, err := t.childOf(ctx, *in.Agent)
		if err != nil {
			return toolError("%v", err)
		}
		line, err := t.s.svc.childLine(ctx, t.s.tenant, ch)
		if err != nil {
			return toolError("%v", err)
		}
		answer, err := t.s.svc.cfg.LastAnswer(ctx, t.s.tenant, ch.Session)
		if err != nil {
			return toolError("read sub-agent %d's transcript: %v", ch.Number, err)
		}
		if answer == "" {
			answer = "(no answer yet)"
		}
		return tool.Result{Content: line + "\nLast answer:\n" + answer}, nil
	}
	rec, _, err := t.s.svc.record(ctx, t.s.tenant, t.s.session)
	if err != nil {
		return toolError("read this session's record: %v", err)
	}
	if len(rec.Children) == 0 {
		return tool.Result{Content: "This session has started no sub-agents."}, nil
	}
	var lines []string
	for _, ch := range rec.Children {
		line, err := t.s.svc.childLine(ctx, t.s.tenant, ch)
		if err != nil {
			line = fmt.Sprintf("%s: %v", agentLabel(ch.Number, ch.Agent), err)
		}
		lines = append(lines, line)
	}
	return tool.Result{Content: strings.Join(lines, "\n")}, nil
}

// send is agent_send.
func (t *tools) send(ctx context.Context, c tool.Call) (tool.Result, error) {
	var in numberInput
	if err := json.Unmarshal(c.Input, &in); err != nil || in.Agent == nil {
		return toolError("invalid input: want {\"agent\": <number>, \"text\": \"...\"}")
	}
	if strings.TrimSpace(in.Text) == "" {
		return toolError("text: say what to send")
	}
	ch, err := t.childOf(ctx, *in.Agent)
	if err != nil {
		return toolError("%v", err)
	}
	if err := t.s.svc.publish(ctx, t.s.tenant, ch.Session, "", events.AgentInput{Text: in.Text, Parent: t.s.session}); err != nil {
		return toolError("could not send to %s: %v", agentLabel(ch.Number, ch.Agent), err)
	}
	t.s.svc.promptSent(ctx, t.s.tenant, ch.Session)
	return tool.Result{Content: fmt.Sprintf("Sent to %s (session %s). Its answer arrives as a notice.", agentLabel(ch.Number, ch.Agent), ch.Session)}, nil
}

// stop is agent_stop.
func (t *tools) stop(ctx context.Context, c tool.Call) (tool.Result, error) {
	var in numberInput
	if err := json.Unmarshal(c.Input, &in); err != nil || in.Agent == nil {
		return toolError("invalid input: want {\"agent\": <number>}")
	}
	ch, err := t.childOf(ctx, *in.Agent)
	if err != nil {
		return toolError("%v", err)
	}
	if err := t.s.svc.publish(ctx, t.s.tenant, ch.Session, "", events.AgentStop{Parent: t.s.session, Reason: in.Reason}); err != nil {
		return toolError("could not stop %s: %v", agentLabel(ch.Number, ch.Agent), err)
	}
	return tool.Result{Content: fmt.Sprintf("Asked %s (session %s) to stop. If it was running, its end arrives as a notice.", agentLabel(ch.Number, ch.Agent), ch.Session)}, nil
}
