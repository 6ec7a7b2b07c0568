package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"jetway/pkg/agent/permission"
	"jetway/pkg/agent/tool"
	"jetway/pkg/llm"
)

// Limits of the recovery paths.
const (
	// DefaultMaxTokens is the output cap per call when QueryInput has none.
	DefaultMaxTokens = 8192
	// EscalatedMaxTokens is the raised cap of the one escalation retry.
	EscalatedMaxTokens = 64000
	// MaxOutputTokensRecoveries is how many times a truncated turn is
	// continued with a resume prompt.
	MaxOutputTokensRecoveries = 3
	// MaxReactiveCompactions is how many reactive compactions one request
	// may take before the run ends with ReasonPromptTooLong.
	MaxReactiveCompactions = 3
	// DefaultSettlementTurns is the wrap-up's turn budget when unset.
	DefaultSettlementTurns = 2
	defaultTodoTurns       = 10
	budgetDiminishingDelta = 500
	// histRoom is the room the loop's copy of the history has for the
	// run's turns before it must grow.
	histRoom = 16
)

// Texts the loop injects as user turns.
const (
	// ResumePrompt asks a model cut off at its output cap to go on.
	ResumePrompt     = "Output token limit hit. Resume directly from where you stopped — no apology, no recap of what you were doing. Pick up mid-thought if that is where the cut happened, and break the remaining work into smaller pieces."
	todoReminderHead = "<system-reminder>\nThe todo_write tool has not been used recently."
)

// tracer is looked up per run, so a host that installs its tracer provider
// after start-up (or a test that swaps it) is honoured.
func tracer() trace.Tracer { return otel.Tracer("jetway/pkg/agent") }

// Query runs the agent loop and returns its event stream. The last event is
// always KindResult carrying a Terminal (unless the consumer stops early,
// which cancels whatever still runs). Failures are reported in Terminal.Err
// and the pair's error is always nil, so a consumer that skips pairs with an
// error never loses the terminal event.
func Query(ctx context.Context, in QueryInput, deps QueryDeps) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		l := newLoop(in, deps)
		ctx, span := tracer().Start(ctx, "agent.query", trace.WithAttributes(attribute.String("agent.model", in.Model)))
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		term, ok := l.run(ctx, yield)
		if !ok {
			span.SetAttributes(attribute.Bool("agent.consumer_stopped", true))
			span.End()
			return
		}
		span.SetAttributes(attribute.String("agent.terminal_reason", string(term.Reason)), attribute.Int("agent.turns", term.Turns))
		if term.Err != nil {
			span.SetStatus(codes.Error, term.Err.Error())
		}
		span.End()
		yield(Event{Kind: KindResult, Terminal: term}, nil)
	}
}

type loop struct {
	in     QueryInput
	deps   QueryDeps
	policy permission.Policy

	hist      []llm.Message
	usage     llm.Usage
	turns     int
	toolTurns int
	continues []ContinueReason
	start     time.Time

	maxTokens       int
	escalated       bool
	recoveries      int
	reactive        int
	lastInputTokens int

	settling     bool
	settleReason TerminalReason
	settleTurns  int

	budgetContinues int
	budgetLastUsed  int
	budgetLastDelta int
}

func newLoop(in QueryInput, deps QueryDeps) *loop {
	if deps.NewID == nil {
		deps.NewID = randomID
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.CallModel == nil && in.Provider != nil {
		deps.CallModel = in.Provider.Stream
	}
	if deps.CallModelSync == nil && in.Provider != nil {
		deps.CallModelSync = in.Provider.Complete
	}
	l := &loop{
		in:   in,
		deps: deps,
		policy: permission.Policy{
			Mode: in.PermissionMode, ModeFunc: in.PermissionModeFunc,
			Allow: in.Allowed, Deny: in.Disallowed, CanUseTool: in.CanUseTool,
		},
		hist:      in.Messages,
		maxTokens: in.MaxTokens,
	}
	if !in.AppendInPlace {
		// Room for the run's own turns: a clone of exactly the history's
		// length is copied again by the first append.
		l.hist = append(make([]llm.Message, 0, len(in.Messages)+histRoom), in.Messages...)
	}
	if l.maxTokens <= 0 {
		l.maxTokens = DefaultMaxTokens
	}
	return l
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return "msg_" + hex.EncodeToString(b[:])
}

// yielder wraps the consumer's yield and remembers whether it stopped.
type yielder struct {
	yield   func(Event, error) bool
	stopped bool
}

func (y *yielder) emit(ev Event) bool {
	if y.stopped {
		return false
	}
	if !y.yield(ev, nil) {
		y.stopped = true
	}
	return !y.stopped
}

// run is the state machine. ok=false means the consumer stopped early.
func (l *loop) run(ctx context.Context, yield func(Event, error) bool) (term *Terminal, ok bool) {
	y := &yielder{yield: yield}
	l.start = l.deps.Now()
	if (l.deps.CallModel == nil && !l.in.NonStreaming) || (l.in.NonStreaming && l.deps.CallModelSync == nil) {
		return l.end(ReasonModelError, errors.New("agent: no provider and no CallModel")), true
	}
	for {
		if err := ctx.Err(); err != nil {
			return l.end(ReasonAbortedStreaming, err), true
		}

		// Budgets, at the turn boundary only.
		if !l.settling {
			if reason, hit := l.budgetHit(); hit {
				p := l.in.Settlement.prompt(reason)
				if p == "" {
					return l.end(reason, nil), true
				}
				l.settling, l.settleReason = true, reason
				if err := l.appendReminder(p); err != nil {
					return l.end(ReasonRecordFailed, err), true
				}
			}
		}
		if l.settling && l.settleTurns >= l.settlementTurns() {
			return l.end(l.settleReason, nil), true
		}

		// Guides: notices and todo reminders, each appended and recorded
		// before the call that reads them.
		if err := l.deliverNotices(); err != nil {
			return l.end(ReasonRecordFailed, err), true
		}
		if err := l.remindTodos(); err != nil {
			return l.end(ReasonRecordFailed, err), true
		}

		if c := l.in.Compactor; c != nil {
			comp, err := c.Pre(ctx, l.hist, l.lastInputTokens)
			if errors.Is(err, ErrBlockingLimit) {
				return l.end(ReasonBlockingLimit, err), true
			}
			if err != nil && ctx.Err() != nil {
				return l.end(ReasonAbortedStreaming, ctx.Err()), true
			}
			if comp != nil {
				if err := l.applyCompaction(comp, "proactive"); err != nil {
					return l.end(ReasonRecordFailed, err), true
				}
			}
		}

		exec := l.newExecutor(ctx)
		res := l.callModel(ctx, l.request(ctx), exec, y)
		if y.stopped {
			exec.Discard()
			return nil, false
		}
		if res.err != nil {
			exec.Discard()
			if ctx.Err() != nil {
				return l.end(ReasonAbortedStreaming, ctx.Err()), true
			}
			if l.isOverflow(res.err) {
				if l.in.Compactor == nil || l.reactive >= MaxReactiveCompactions {
					return l.end(ReasonPromptTooLong, res.err), true
				}
				l.reactive++
				comp, err := l.in.Compactor.Reactive(ctx, l.hist, l.reactive)
				if err != nil || comp == nil {
					return l.end(ReasonPromptTooLong, errors.Join(res.err, err)), true
				}
				if err := l.applyCompaction(comp, "reactive"); err != nil {
					return l.end(ReasonRecordFailed, err), true
				}
				l.continueWith(ContinueReactiveCompactRetry)
				continue
			}
			switch llm.KindOf(res.err) {
			case llm.ErrKindMaxTokens:
				if l.escalate() {
					continue
				}
			case llm.ErrKindImage:
				// The same request would be refused again: the run ends.
				// Every result is already recorded, so the history stays
				// whole; the refusal is recorded too, so later requests
				// leave the refused images out and the session goes on.
				if err := l.appendMessage(llm.ImageRefusal(res.err), llm.Usage{}); err != nil {
					return l.end(ReasonRecordFailed, errors.Join(res.err, err)), true
				}
				return l.end(ReasonImageError, res.err), true
			}
			return l.end(ReasonModelError, res.err), true
		}
		l.reactive = 0
		l.usage = l.usage.Add(res.usage)
		l.lastInputTokens = res.usage.ContextTokens() + res.usage.OutputTokens
		if !y.emit(Event{Kind: KindUsage, Usage: ptr(l.usage)}) {
			exec.Discard()
			return nil, false
		}
		if l.settling {
			l.settleTurns++
		}

		uses := res.msg.ToolUses()
		if res.stop == llm.StopMaxTokens && len(uses) == 0 {
			exec.Discard()
			if l.escalate() {
				continue // the truncated message is not kept: the same request goes again
			}
			if err := l.appendMessage(res.msg, res.usage); err != nil {
				return l.end(ReasonRecordFailed, err), true
			}
			l.turns++
			if l.recoveries >= MaxOutputTokensRecoveries {
				return l.end(ReasonCompleted, fmt.Errorf("agent: output token limit hit %d times in a row", l.recoveries+1)), true
			}
			l.recoveries++
			if err := l.appendReminder(ResumePrompt); err != nil {
				return l.end(ReasonRecordFailed, err), true
			}
			l.continueWith(ContinueMaxOutputTokensRecovery)
			continue
		}

		// Record before you act: the assistant message is recorded before
		// any of its calls with side effects starts.
		if err := l.appendMessage(res.msg, res.usage); err != nil {
			exec.Discard()
			return l.end(ReasonRecordFailed, err), true
		}
		l.turns++
		if res.stop != llm.StopMaxTokens {
			l.recoveries = 0
		}

		if len(uses) > 0 {
			term, ok := l.runTools(ctx, exec, res.msg, y)
			exec.Discard()
			if !ok || term != nil {
				return term, ok
			}
			l.toolTurns++
			l.continueWith(ContinueNextTurn)
			continue
		}
		exec.Discard()

		// The model ended its turn.
		if l.settling {
			return l.end(l.settleReason, nil), true
		}
		if l.in.Notices != nil && l.in.Notices.HasPending() {
			l.continueWith(ContinueTaskNotification)
			continue
		}
		if h := l.in.Hooks; h != nil {
			prevent, blocking, msg := h.Stop(ctx, slices.Clone(l.hist))
			if prevent {
				var err error
				if msg != "" {
					err = errors.New(msg)
				}
				return l.end(ReasonStopHookPrevented, err), true
			}
			if len(blocking) > 0 {
				text := "Stop hook feedback — fix these before you finish:\n- " + strings.Join(blocking, "\n- ")
				if err := l.appendReminder(text); err != nil {
					return l.end(ReasonRecordFailed, err), true
				}
				l.continueWith(ContinueStopHookBlocking)
				continue
			}
		}
		if nudge, ok := l.budgetContinuation(); ok {
			if err := l.appendReminder(nudge); err != nil {
				return l.end(ReasonRecordFailed, err), true
			}
			l.continueWith(ContinueTokenBudget)
			continue
		}
		return l.end(ReasonCompleted, nil), true
	}
}

func ptr[T any](v T) *T { return &v }

func (l *loop) continueWith(r ContinueReason) { l.continues = append(l.continues, r) }

// terminalHistory is the history the loop hands back, done with it: capped
// at its length, unless the host lent its own array (AppendInPlace) and
// gets its room back.
func (l *loop) terminalHistory() []llm.Message {
	if l.in.AppendInPlace {
		return l.hist
	}
	return l.hist[:len(l.hist):len(l.hist)]
}

func (l *loop) end(r TerminalReason, err error) *Terminal {
	t := &Terminal{
		Reason:    r,
		Err:       err,
		Usage:     l.usage,
		Turns:     l.turns,
		Messages:  l.terminalHistory(),
		Continues: slices.Clone(l.continues),
	}
	for i := len(l.hist) - 1; i >= 0; i-- {
		if l.hist[i].Role == llm.RoleAssistant {
			t.Text = l.hist[i].Text()
			break
		}
	}
	return t
}

func (l *loop) isOverflow(err error) bool {
	if l.in.Compactor != nil {
		return l.in.Compactor.IsOverflow(err)
	}
	return llm.IsOverflow(err)
}

// escalate raises the output cap once, if configured and not yet done.
func (l *loop) escalate() bool {
	if !l.in.EscalateMaxTokens || l.escalated || l.maxTokens >= EscalatedMaxTokens {
		return false
	}
	l.escalated, l.maxTokens = true, EscalatedMaxTokens
	l.continueWith(ContinueMaxOutputTokensEscalate)
	return true
}

func (l *loop) settlementTurns() int {
	if s := l.in.Settlement; s != nil && s.MaxTurns > 0 {
		return s.MaxTurns
	}
	return DefaultSettlementTurns
}

func (l *loop) budgetHit() (TerminalReason, bool) {
	if l.in.MaxTurns > 0 && l.toolTurns >= l.in.MaxTurns {
		return ReasonMaxTurns, true
	}
	if l.in.MaxDuration > 0 && l.deps.Now().Sub(l.start) >= l.in.MaxDuration {
		return ReasonTimeout, true
	}
	return "", false
}

// budgetContinuation decides whether a turn that ended goes on for the
// token budget: until 90% of it is used, unless the last continuations
// each produced little (diminishing returns).
func (l *loop) budgetContinuation() (string, bool) {
	b := l.in.TokenBudget
	if b <= 0 {
		return "", false
	}
	used := l.usage.OutputTokens
	if used*10 >= b*9 {
		return "", false
	}
	delta := used - l.budgetLastUsed
	if l.budgetContinues >= 3 && delta < budgetDiminishingDelta && l.budgetLastDelta < budgetDiminishingDelta {
		return "", false
	}
	l.budgetContinues++
	l.budgetLastDelta, l.budgetLastUsed = delta, used
	return fmt.Sprintf("<system-reminder>\nToken budget: %d of %d output tokens used (%d%%). Keep working — do not summarise or stop until the task is fully done.\n</system-reminder>",
		used, b, used*100/b), true
}

// appendMessage records m and then adds it to the history: a message the
// Recorder refused is not in the history either.
func (l *loop) appendMessage(m llm.Message, usage llm.Usage) error {
	if m.ID == "" {
		m.ID = l.deps.NewID()
	}
	if r := l.in.Recorder; r != nil {
		if err := r.RecordMessage(m, usage); err != nil {
			return fmt.Errorf("agent: record %s message %s: %w", m.Role, m.ID, err)
		}
	}
	l.hist = append(l.hist, m)
	return nil
}

func (l *loop) appendReminder(text string) error {
	m := llm.UserText(text)
	m.Kind = llm.KindReminder
	return l.appendMessage(m, llm.Usage{})
}

func (l *loop) deliverNotices() error {
	if l.in.Notices == nil {
		return nil
	}
	turn, taken, ok := l.in.Notices.Turn()
	if !ok {
		return nil
	}
	if err := l.appendMessage(turn, llm.Usage{}); err != nil {
		l.in.Notices.Return(taken) // never delivered: back, in order, before newer ones
		return err
	}
	return nil
}

// remindTodos re-surfaces the todo list when the model has not touched it
// for a while; the counts come from the history itself.
func (l *loop) remindTodos() error {
	if l.in.Todos == nil {
		return nil
	}
	sinceWrite := l.in.TodoReminderTurnsSinceWrite
	if sinceWrite <= 0 {
		sinceWrite = defaultTodoTurns
	}
	between := l.in.TodoReminderTurnsBetweenReminder
	if between <= 0 {
		between = defaultTodoTurns
	}
	turnsSinceWrite, turnsSinceReminder := -1, -1
	n := 0
	for i := len(l.hist) - 1; i >= 0 && (turnsSinceWrite < 0 || turnsSinceReminder < 0); i-- {
		m := l.hist[i]
		switch {
		case m.Role == llm.RoleAssistant:
			if turnsSinceWrite < 0 && slices.ContainsFunc(m.ToolUses(), func(b llm.ContentBlock) bool { return b.Name == tool.TodoWriteName }) {
				turnsSinceWrite = n
			}
			n++
		case m.Kind == llm.KindReminder && strings.HasPrefix(m.Text(), todoReminderHead):
			if turnsSinceReminder < 0 {
				turnsSinceReminder = n
			}
		}
	}
	if turnsSinceWrite < 0 {
		turnsSinceWrite = n
	}
	if turnsSinceReminder < 0 {
		turnsSinceReminder = n
	}
	if turnsSinceWrite < sinceWrite || turnsSinceReminder < between {
		return nil
	}
	text := todoReminderHead
	if items := l.in.Todos.List(); len(items) > 0 {
		text += " If it still matches your work, keep it current; here is your todo list:\n\n" + tool.Render(items)
	} else {
		text += " Your todo list is empty; if this task has several steps, use todo_write to plan and track them.\n"
	}
	return l.appendReminder(text + "</system-reminder>")
}

func (l *loop) applyCompaction(c *Compaction, trigger string) error {
	b := c.Boundary
	if b.Trigger == "" {
		b.Trigger = trigger
	}
	if err := l.appendMessage(llm.BoundaryMessage(b), llm.Usage{}); err != nil {
		return err
	}
	s := c.Summary
	s.Kind, s.Role = llm.KindCompactSummary, llm.RoleUser
	if err := l.appendMessage(s, llm.Usage{}); err != nil {
		return err
	}
	if r := l.in.Recorder; r != nil {
		r.RecordBoundary(b.BoundaryMeta)
	}
	l.lastInputTokens = 0
	return nil
}

func (l *loop) hidden(name string) bool {
	return slices.Contains(l.in.DeferredTools, name) || l.disabled(name)
}

func (l *loop) disabled(name string) bool {
	return l.settling && l.in.Settlement != nil && slices.Contains(l.in.Settlement.DisabledTools, name)
}

// request builds this call's request from a pure view of the history.
func (l *loop) request(ctx context.Context) llm.CompletionRequest {
	var view []llm.Message
	settled := 0
	if sv, ok := l.in.Compactor.(SettledView); ok {
		view, settled = sv.ViewSettled(ctx, l.hist)
	} else if cv, ok := l.in.Compactor.(ContextView); ok {
		view = cv.View(ctx, l.hist)
	} else {
		view = llm.MessagesForAPI(l.hist)
	}
	if r := l.in.SystemReminder; r != "" {
		settled = 0 // the reminder goes into the first turn, anew each call
		view = llm.WithReminder(view, r)
	}
	return llm.CompletionRequest{
		Model:           l.in.Model,
		System:          l.in.System,
		DynamicBoundary: l.in.DynamicBoundary,
		Messages:        view,
		Tools:           l.in.Tools.Specs(l.hidden),
		MaxTokens:       l.maxTokens,
		Temperature:     l.in.Temperature,
		ThinkingBudget:  l.in.ThinkingBudget,
		Settled:         settled,
	}
}

func (l *loop) newExecutor(ctx context.Context) *tool.Executor {
	return tool.NewExecutor(ctx, tool.ExecutorConfig{
		Registry:       l.in.Tools,
		MaxConcurrency: l.in.MaxConcurrency,
		Disabled:       l.disabled,
		OutputDir:      l.in.ToolOutputDir,
		MaxOutputChars: l.in.MaxToolOutputChars,
		Gate: func(ctx context.Context, name string, input json.RawMessage, readOnly bool) (json.RawMessage, bool, string) {
			if h := l.in.Hooks; h != nil {
				block, msg, updated := h.PreToolUse(ctx, name, input)
				if block {
					if msg == "" {
						msg = "blocked by a PreToolUse hook"
					}
					return nil, false, msg
				}
				if updated != nil {
					input = updated
				}
			}
			d := l.policy.Check(ctx, name, input, readOnly)
			if !d.Allow {
				return nil, false, d.Reason
			}
			if d.Input != nil {
				input = d.Input
			}
			return input, true, ""
		},
		After: func(ctx context.Context, name string, input json.RawMessage, r tool.Result) (bool, string) {
			if h := l.in.Hooks; h != nil {
				return h.PostToolUse(ctx, name, input, []byte(r.Content), r.IsError)
			}
			return false, ""
		},
	})
}

type modelResult struct {
	msg   llm.Message
	stop  llm.StopReason
	usage llm.Usage
	err   error
}

// callModel performs one model call, surfacing its events and handing each
// complete tool call to exec as soon as it arrives.
func (l *loop) callModel(ctx context.Context, req llm.CompletionRequest, exec *tool.Executor, y *yielder) (res modelResult) {
	ctx, span := tracer().Start(ctx, "agent.model_call", trace.WithAttributes(
		attribute.String("agent.model", req.Model),
		attribute.Int("agent.turn", l.turns+1),
		attribute.Int("agent.messages", len(req.Messages)),
		attribute.Int("agent.max_tokens", req.MaxTokens),
	))
	defer func() {
		span.SetAttributes(
			attribute.String("agent.stop_reason", string(res.stop)),
			attribute.Int("agent.input_tokens", res.usage.InputTokens),
			attribute.Int("agent.output_tokens", res.usage.OutputTokens),
		)
		if res.err != nil {
			span.SetStatus(codes.Error, res.err.Error())
		}
		span.End()
	}()
	added := map[string]bool{}
	addTool := func(b llm.ContentBlock) bool {
		if b.Type != llm.BlockToolUse || added[b.ID] {
			return true
		}
		added[b.ID] = true
		exec.Add(b) // a read-only call starts now, while the stream goes on
		return y.emit(Event{Kind: KindToolUse, ToolUse: ptr(l.redactCall(b))})
	}

	if l.in.NonStreaming {
		msg, stop, usage, err := l.deps.CallModelSync(ctx, req)
		if err != nil {
			return modelResult{err: err}
		}
		for _, b := range msg.Content {
			switch b.Type {
			case llm.BlockText:
				if !y.emit(Event{Kind: KindText, Text: b.Text}) {
					return modelResult{}
				}
			case llm.BlockThinking:
				if !y.emit(Event{Kind: KindThinking, Text: b.Text}) {
					return modelResult{}
				}
			case llm.BlockToolUse:
				if !addTool(b) {
					return modelResult{}
				}
			}
		}
		return modelResult{msg: l.redactCalls(assistant(msg)), stop: stop, usage: usage}
	}

	var end *llm.StreamEvent
	for ev, err := range l.deps.CallModel(ctx, req) {
		if err != nil {
			return modelResult{err: err}
		}
		switch ev.Type {
		case llm.EventTextDelta:
			if !y.emit(Event{Kind: KindText, Text: ev.Text}) {
				return modelResult{}
			}
		case llm.EventThinkingDelta:
			if !y.emit(Event{Kind: KindThinking, Text: ev.Text}) {
				return modelResult{}
			}
		case llm.EventToolUse:
			if ev.Block != nil && !addTool(*ev.Block) {
				return modelResult{}
			}
		case llm.EventMessageEnd:
			end = &ev
		}
	}
	if err := ctx.Err(); err != nil {
		return modelResult{err: err}
	}
	if end == nil || end.Message == nil {
		return modelResult{err: &llm.Error{Kind: llm.ErrKindModel, Provider: l.providerName(), Err: errors.New("stream ended without a message")}}
	}
	msg := assistant(*end.Message)
	for _, b := range msg.ToolUses() { // calls the stream did not announce on their own
		if !addTool(b) {
			return modelResult{}
		}
	}
	var usage llm.Usage
	if end.Usage != nil {
		usage = *end.Usage
	}
	return modelResult{msg: l.redactCalls(msg), stop: end.StopReason, usage: usage}
}

// redactCall is a tool call as it is shown and recorded (see
// QueryInput.Redactor); the executor has the call as the model wrote it.
func (l *loop) redactCall(b llm.ContentBlock) llm.ContentBlock {
	if r := l.in.Redactor; r != nil && b.Type == llm.BlockToolUse {
		b.Input = r.JSON(b.Input)
	}
	return b
}

// redactCalls is the assistant message with its calls redacted, on a copy
// of its content: the executor's calls share nothing with it.
func (l *loop) redactCalls(m llm.Message) llm.Message {
	if l.in.Redactor == nil || len(m.ToolUses()) == 0 {
		return m
	}
	content := make([]llm.ContentBlock, len(m.Content))
	for i, b := range m.Content {
		content[i] = l.redactCall(b)
	}
	m.Content = content
	return m
}

// redactResult is a tool result as it is shown, recorded and sent to the
// model.
func (l *loop) redactResult(b llm.ContentBlock) llm.ContentBlock {
	if r := l.in.Redactor; r != nil {
		b.Content = r.Text(b.Content)
	}
	return b
}

func assistant(m llm.Message) llm.Message {
	m.Role = llm.RoleAssistant
	m.Kind, m.Delivers = llm.KindOrdinary, nil
	return m
}

func (l *loop) providerName() string {
	if l.in.Provider != nil {
		return l.in.Provider.Name()
	}
	return "model"
}

// runTools hands out the turn's results in call order, then records them as
// one user turn. A nil Terminal with ok=true means the loop goes on.
func (l *loop) runTools(ctx context.Context, exec *tool.Executor, msg llm.Message, y *yielder) (*Terminal, bool) {
	calls := map[string]llm.ContentBlock{} // msg's calls, redacted as recorded
	for _, u := range msg.ToolUses() {
		calls[u.ID] = u
	}
	exec.Release()
	var results []llm.ContentBlock
	var stopMsgs []string
	stop := false
	for {
		u, more := exec.Next()
		if !more {
			break
		}
		if p := u.Progress; p != nil {
			call := calls[p.ToolUseID]
			if !y.emit(Event{Kind: KindProgress, Text: p.Text, ToolUse: &call}) {
				return nil, false
			}
			continue
		}
		o := u.Outcome
		o.Block = l.redactResult(o.Block)
		results = append(results, o.Block)
		if o.Stop {
			stop = true
			if o.StopMessage != "" {
				stopMsgs = append(stopMsgs, o.StopMessage)
			}
		}
		if !y.emit(Event{Kind: KindToolResult, ToolResult: ptr(withCall(o.Block, calls[o.Block.ToolUseID]))}) {
			return nil, false
		}
	}
	// Recorded even when cancelled: the history never holds a call without
	// its result.
	if err := l.appendMessage(llm.Message{Role: llm.RoleUser, Content: results}, llm.Usage{}); err != nil {
		return l.end(ReasonRecordFailed, err), true
	}
	if err := ctx.Err(); err != nil {
		return l.end(ReasonAbortedTools, err), true
	}
	if stop {
		var err error
		if len(stopMsgs) > 0 {
			err = errors.New(strings.Join(stopMsgs, "; "))
		}
		return l.end(ReasonHookStopped, err), true
	}
	return nil, true
}

// withCall is a result as the KindToolResult event carries it: with its
// call's name and (redacted) arguments, so a reader shows "name(args) →
// result" without pairing it with the call itself. The recorded result
// leaves them out: the model reads them in the call.
func withCall(result, call llm.ContentBlock) llm.ContentBlock {
	result.Name, result.Input = call.Name, call.Input
	return result
}
