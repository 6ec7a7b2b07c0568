package runner

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
// actor.

// Sub-agent tool names.
const (
	AgentStartTool  = "agent_start"
	AgentStatusTool = "agent_status"
	AgentSendTool   = "agent_send"
	AgentStopTool   = "agent_stop"
	// AgentReportTool is a sub-agent's own: a progress report to its parent.
	AgentReportTool = "agent_report"
)

// Foreground wait bounds of agent_start, in seconds.
const (
	DefaultAgentWait = 120
	MaxAgentWait     = 600
)

// subagents are the sub-agent tools of one run.
type subagents struct {
	a    *actor
	run  string
	lr   *liveRun
	prof agents.Profile
	fuel int64 // the fuel of this run's session (a root's own budget)
}

// subagentTools are the sub-agent tools of run lr: agent_start, _status,
// _send and _stop, and agent_report when the session is itself a
// sub-agent.
func (a *actor) subagentTools(run string, lr *liveRun, c claimed) []tool.Tool {
	s := &subagents{a: a, run: run, lr: lr, prof: c.agent, fuel: a.r.rails.forProfile(c.agent).cfg.Fuel}
	tools := []tool.Tool{
		tool.Func{Name: AgentStartTool, Schema: startSchema, Fn: s.start,
			Description: "Start a sub-agent: a new session with its own context that works on prompt with the agent profile named. " +
				"Waits up to wait seconds for its answer; past that it goes on in the background and its answer arrives later as a notice. " +
				"Use agent_status, agent_send and agent_stop to follow it."},
		tool.Func{Name: AgentStatusTool, Schema: statusSchema, Fn: s.status,
			Description: "List this session's sub-agents and their state, or show one (agent: its number) with its last answer in full."},
		tool.Func{Name: AgentSendTool, Schema: sendSchema, Fn: s.send,
			Description: "Send a sub-agent more input; its answer arrives as a notice."},
		tool.Func{Name: AgentStopTool, Schema: stopSchema, Fn: s.stop,
			Description: "Stop a sub-agent's run; its end arrives as a notice."},
	}
	if lr.child != nil {
		tools = append(tools, tool.Func{Name: AgentReportTool, Schema: reportSchema, Fn: s.report,
			Description: "You are a sub-agent: tell the session that started you how far you got, while you go on working. " +
				"Your final answer reaches it by itself when your run ends."})
	}
	return tools
}

// report is agent_report: a child's progress, a notice for its parent.
func (s *subagents) report(ctx context.Context, c tool.Call) (tool.Result, error) {
	var in struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(c.Input, &in); err != nil || strings.TrimSpace(in.Text) == "" {
		return toolError("invalid input: want {\"text\": \"...\"}")
	}
	ch := s.lr.child
	p := events.AgentProgress{Child: s.a.session, Agent: agentOrDefault(ch.agent), Number: ch.number, Text: in.Text}
	if err := s.a.r.publishAgentEvent(ctx, s.a.tenant, ch.parent, "", p); err != nil {
		return toolError("could not report to session %s: %v", ch.parent, err)
	}
	return tool.Result{Content: "Reported to session " + ch.parent + "."}, nil
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
func (s *subagents) start(ctx context.Context, c tool.Call) (tool.Result, error) {
	var in startInput
	if err := json.Unmarshal(c.Input, &in); err != nil {
		return toolError("invalid input: %v", err)
	}
	if strings.TrimSpace(in.Prompt) == "" {
		return toolError("prompt: say what the sub-agent is to do")
	}
	wait := DefaultAgentWait
	if in.Wait != nil {
		wait = *in.Wait
	}
	if wait < 0 || wait > MaxAgentWait {
		return toolError("wait %d: want 0 to %d seconds", wait, MaxAgentWait)
	}
	if in.Agent == agents.DefaultName {
		in.Agent = ""
	}
	known, err := s.a.r.knownAgent(ctx, s.a.tenant, in.Agent)
	if err != nil {
		return toolError("could not read agent profile %q: %v", in.Agent, err)
	}
	if !known {
		return toolError("%s", unknownAgentError{tenant: s.a.tenant, name: in.Agent}.Error())
	}
	var ch sessionrec.Child
	var fin chan events.AgentFinished
	var startErr error
	done := make(chan struct{})
	if !s.a.send(func(a *actor) {
		defer close(done)
		ch, fin, startErr = a.startChild(ctx, s, in, wait > 0)
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
	if err := s.a.r.publishAgentEvent(ctx, s.a.tenant, ch.Session, "", events.AgentInput{Text: in.Prompt, Parent: s.a.session}); err != nil {
		s.unwait(ch.Session)
		return toolError("sub-agent %d (session %s) was made but its prompt could not be sent: %v; send it again with agent_send", ch.Number, ch.Session, err)
	}
	name := agentLabel(ch.Number, ch.Agent)
	if wait == 0 {
		return tool.Result{Content: fmt.Sprintf("%s started as session %s in the background. %s", name, ch.Session, followUp)}, nil
	}
	t := time.NewTimer(time.Duration(wait) * time.Second)
	defer t.Stop()
	select {
	case f := <-fin:
		return tool.Result{Content: answerText(f)}, nil
	case <-t.C:
	case <-ctx.Done():
	}
	s.unwait(ch.Session)
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
func (s *subagents) unwait(child string) {
	done := make(chan struct{})
	if !s.a.send(func(a *actor) {
		delete(s.lr.waiters, child)
		close(done)
	}) {
		return
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

func agentLabel(number int, agent string) string {
	if agent == "" {
		agent = agents.DefaultName
	}
	return fmt.Sprintf("agent %d (%s)", number, agent)
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
func (a *actor) startChild(ctx context.Context, s *subagents, in startInput, wait bool) (sessionrec.Child, chan events.AgentFinished, error) {
	if a.run != s.lr {
		return sessionrec.Child{}, nil, errors.New("the run that asked has ended")
	}
	rec, rev, _, err := a.record(ctx)
	if err != nil {
		return sessionrec.Child{}, nil, fmt.Errorf("read this session's record: %w", err)
	}
	if err := a.r.childAllowed(ctx, rec, s.prof); err != nil {
		return sessionrec.Child{}, nil, err
	}
	rootFuel := rec.RootFuel
	if len(rec.Lineage) == 0 {
		rootFuel = s.fuel
	}
	if reason, ok := a.r.rootFuelLeft(ctx, rec, rootFuel); !ok {
		return sessionrec.Child{}, nil, errors.New(reason)
	}
	number := len(rec.Children) + 1
	name := in.Name
	if name == "" {
		name = childName(a.session, number)
	}
	if err := events.ValidateToken("name", name); err != nil {
		return sessionrec.Child{}, nil, err
	}
	child := SessionRecord{Tenant: a.tenant, Session: name, State: StateIdle, Since: time.Now().UTC(), Agent: in.Agent,
		Lineage: append(append([]string(nil), rec.Lineage...), a.session), Number: number, RootFuel: rootFuel}
	if _, err := a.r.records.put(ctx, child, 0); err != nil {
		if errors.Is(err, ErrLostSession) {
			return sessionrec.Child{}, nil, fmt.Errorf("session %q exists already: choose another name", name)
		}
		return sessionrec.Child{}, nil, fmt.Errorf("make session %s: %w", name, err)
	}
	ch := sessionrec.Child{Session: name, Agent: in.Agent, Number: number, Run: s.run, Started: child.Since}
	rec.Children = append(rec.Children, ch)
	if _, err := a.putRecord(ctx, rec, rev); err != nil {
		// A stale copy: once more on a fresh read.
		if rec, rev, err = a.r.records.get(ctx, a.tenant, a.session); err == nil {
			rec.Children = append(rec.Children, ch)
			_, err = a.putRecord(ctx, rec, rev)
		}
		if err != nil {
			return sessionrec.Child{}, nil, fmt.Errorf("name the child in this session's record: %w", err)
		}
	}
	var fin chan events.AgentFinished
	if wait {
		fin = make(chan events.AgentFinished, 1)
		s.lr.waiters[name] = fin
	}
	return ch, fin, nil
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

// childOf finds a child by number in a fresh read of the session record.
func (s *subagents) childOf(ctx context.Context, number int) (sessionrec.Child, error) {
	rec, _, err := s.a.r.records.get(ctx, s.a.tenant, s.a.session)
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
func (s *subagents) status(ctx context.Context, c tool.Call) (tool.Result, error) {
	var in numberInput
	if len(c.Input) > 0 {
		if err := json.Unmarshal(c.Input, &in); err != nil {
			return toolError("invalid input: %v", err)
		}
	}
	if in.Agent != nil {
		ch, err := s.childOf(ctx, *in.Agent)
		if err != nil {
			return toolError("%v", err)
		}
		line, err := s.a.r.childLine(ctx, s.a.tenant, ch)
		if err != nil {
			return toolError("%v", err)
		}
		answer, err := s.a.r.lastAnswer(ctx, s.a.tenant, ch.Session)
		if err != nil {
			return toolError("read sub-agent %d's transcript: %v", ch.Number, err)
		}
		if answer == "" {
			answer = "(no answer yet)"
		}
		return tool.Result{Content: line + "\nLast answer:\n" + answer}, nil
	}
	rec, _, err := s.a.r.records.get(ctx, s.a.tenant, s.a.session)
	if err != nil {
		return toolError("read this session's record: %v", err)
	}
	if len(rec.Children) == 0 {
		return tool.Result{Content: "This session has started no sub-agents."}, nil
	}
	var lines []string
	for _, ch := range rec.Children {
		line, err := s.a.r.childLine(ctx, s.a.tenant, ch)
		if err != nil {
			line = fmt.Sprintf("%s: %v", agentLabel(ch.Number, ch.Agent), err)
		}
		lines = append(lines, line)
	}
	return tool.Result{Content: strings.Join(lines, "\n")}, nil
}

// childLine is one line on a child: `agent 2 (reviewer) · session s-a2 · running for 3m`.
func (r *Runner) childLine(ctx context.Context, tenant string, ch sessionrec.Child) (string, error) {
	rec, _, err := r.records.get(ctx, tenant, ch.Session)
	if err != nil {
		return "", fmt.Errorf("read sub-agent %d's record: %w", ch.Number, err)
	}
	state := rec.State
	switch {
	case rec.State == StateRunning:
		state = "running for " + events.FmtElapsed(time.Since(rec.Since))
	case rec.State == StateIdle && rec.Runs == 0 && rec.Reason == "":
		state = "starting"
	case rec.State == StateIdle:
		state = "finished (" + rec.Reason + ")"
	}
	return fmt.Sprintf("%s · session %s · %s", agentLabel(ch.Number, ch.Agent), ch.Session, state), nil
}

// lastAnswer is the last assistant text in a session's transcript.
func (r *Runner) lastAnswer(ctx context.Context, tenant, session string) (string, error) {
	_, recs, err := r.transcripts.load(ctx, tenant, session)
	if err != nil {
		return "", err
	}
	return answerOf(history(recs)), nil
}

// send is agent_send.
func (s *subagents) send(ctx context.Context, c tool.Call) (tool.Result, error) {
	var in numberInput
	if err := json.Unmarshal(c.Input, &in); err != nil || in.Agent == nil {
		return toolError("invalid input: want {\"agent\": <number>, \"text\": \"...\"}")
	}
	if strings.TrimSpace(in.Text) == "" {
		return toolError("text: say what to send")
	}
	ch, err := s.childOf(ctx, *in.Agent)
	if err != nil {
		return toolError("%v", err)
	}
	if err := s.a.r.publishAgentEvent(ctx, s.a.tenant, ch.Session, "", events.AgentInput{Text: in.Text, Parent: s.a.session}); err != nil {
		return toolError("could not send to %s: %v", agentLabel(ch.Number, ch.Agent), err)
	}
	return tool.Result{Content: fmt.Sprintf("Sent to %s (session %s). Its answer arrives as a notice.", agentLabel(ch.Number, ch.Agent), ch.Session)}, nil
}

// stop is agent_stop.
func (s *subagents) stop(ctx context.Context, c tool.Call) (tool.Result, error) {
	var in numberInput
	if err := json.Unmarshal(c.Input, &in); err != nil || in.Agent == nil {
		return toolError("invalid input: want {\"agent\": <number>}")
	}
	ch, err := s.childOf(ctx, *in.Agent)
	if err != nil {
		return toolError("%v", err)
	}
	if err := s.a.r.publishAgentEvent(ctx, s.a.tenant, ch.Session, "", events.AgentStop{Parent: s.a.session, Reason: in.Reason}); err != nil {
		return toolError("could not stop %s: %v", agentLabel(ch.Number, ch.Agent), err)
	}
	return tool.Result{Content: fmt.Sprintf("Asked %s (session %s) to stop. If it was running, its end arrives as a notice.", agentLabel(ch.Number, ch.Agent), ch.Session)}, nil
}
