package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"jetway/pkg/llm"
)

// DefaultMaxConcurrency is how many read-only calls run at once by default.
const DefaultMaxConcurrency = 10

// Cancelled is the result of a call the run was cancelled before or while
// it ran: whether it had effects is unknown, and the model must know that.
const Cancelled = "cancelled: the run was stopped before this call reported; unknown whether it completed"

// CancelCause is a cause a run's context may be cancelled with
// (context.WithCancelCause) that knows more than Cancelled: its text is
// the result of every call the cancellation cut off.
type CancelCause string

func (c CancelCause) Error() string { return string(c) }

// cancelledText is the result text of a call cut off by ctx's cancellation.
func cancelledText(ctx context.Context) string {
	var c CancelCause
	if errors.As(context.Cause(ctx), &c) {
		return string(c)
	}
	return Cancelled
}

// Gate decides whether a call may run, just before it starts: permissions
// and PreToolUse hooks. It returns the input to run with (possibly
// rewritten), or allowed=false and the message the model reads instead.
type Gate func(ctx context.Context, name string, input json.RawMessage, readOnly bool) (run json.RawMessage, allowed bool, message string)

// After is told of every finished call (PostToolUse hooks); stop=true ends
// the run after this tool turn.
type After func(ctx context.Context, name string, input json.RawMessage, r Result) (stop bool, message string)

// ExecutorConfig configures an Executor.
type ExecutorConfig struct {
	Registry *Registry
	// MaxConcurrency caps the read-only calls running at once
	// (0 = DefaultMaxConcurrency).
	MaxConcurrency int
	// Disabled names tools that may not run now (e.g. during a settlement
	// wrap-up); a call to one gets an error result.
	Disabled func(name string) bool
	Gate     Gate
	After    After
	// OutputDir and MaxOutputChars configure Capture of every result.
	OutputDir      string
	MaxOutputChars int
}

// Progress is mid-tool progress from the call ToolUseID.
type Progress struct {
	ToolUseID string
	Text      string
}

// Outcome is the finished result of one call.
type Outcome struct {
	// Block is the tool_result block for the history.
	Block llm.ContentBlock
	// Stop asks the loop to end after this tool turn.
	Stop        bool
	StopMessage string
}

// Update is one item from Next: progress or the next result in call order.
type Update struct {
	Progress *Progress
	Outcome  *Outcome
}

type callState int

const (
	queued callState = iota
	running
	done
)

type call struct {
	use      llm.ContentBlock
	tool     Tool
	readOnly bool
	state    callState
	out      Outcome
}

// Executor runs the tool calls of one model turn as they stream in. A
// read-only call starts as soon as Add sees it, in parallel with other
// read-only calls up to MaxConcurrency; a call with side effects is a
// barrier: it starts only after Release (its assistant message is recorded:
// record before you act), runs alone, and nothing queued after it starts
// before it ends. Results come out of Next in call order whatever order the
// calls finish in.
type Executor struct {
	cfg    ExecutorConfig
	ctx    context.Context
	cancel context.CancelFunc
	stop   func() bool
	wg     sync.WaitGroup

	mu       sync.Mutex
	calls    []*call
	released bool
	next     int // index of the next result to hand out
	progress []Progress
	notify   chan struct{}
}

// NewExecutor returns an executor whose calls run under ctx.
func NewExecutor(ctx context.Context, cfg ExecutorConfig) *Executor {
	if cfg.MaxConcurrency <= 0 {
		cfg.MaxConcurrency = DefaultMaxConcurrency
	}
	e := &Executor{cfg: cfg, notify: make(chan struct{}, 1)}
	e.ctx, e.cancel = context.WithCancel(ctx)
	e.stop = context.AfterFunc(e.ctx, func() {
		e.mu.Lock()
		e.schedule()
		e.mu.Unlock()
		e.signal()
	})
	return e
}

// Add queues the call use (a tool_use block) and starts it if it may run now.
func (e *Executor) Add(use llm.ContentBlock) {
	c := &call{use: use}
	t, ok := e.cfg.Registry.Get(use.Name)
	switch {
	case !ok:
		c.state, c.out = done, errorOutcome(use.ID, fmt.Sprintf("unknown tool %q", use.Name))
	case e.cfg.Disabled != nil && e.cfg.Disabled(use.Name):
		c.state, c.out = done, errorOutcome(use.ID, fmt.Sprintf("tool %q is not available now", use.Name))
	default:
		if err := e.cfg.Registry.Validate(use.Name, use.Input); err != nil {
			c.state, c.out = done, errorOutcome(use.ID, fmt.Sprintf("invalid input for %s: %v", use.Name, err))
			break
		}
		c.tool, c.readOnly = t, t.ReadOnly(use.Input)
	}
	e.mu.Lock()
	e.calls = append(e.calls, c)
	e.schedule()
	e.mu.Unlock()
	e.signal()
}

// Release says the assistant message carrying the calls is recorded and no
// more calls will be added: calls with side effects may now start.
func (e *Executor) Release() {
	e.mu.Lock()
	e.released = true
	e.schedule()
	e.mu.Unlock()
	e.signal()
}

// Next returns the next progress report or, in call order, the next
// finished result; ok=false when every result has been handed out. Call it
// only after Release. If the executor's context is cancelled, calls that
// never started finish with the Cancelled result.
func (e *Executor) Next() (u Update, ok bool) {
	for {
		e.mu.Lock()
		if len(e.progress) > 0 {
			p := e.progress[0]
			e.progress = e.progress[1:]
			e.mu.Unlock()
			return Update{Progress: &p}, true
		}
		if e.next < len(e.calls) && e.calls[e.next].state == done {
			out := e.calls[e.next].out
			e.next++
			e.mu.Unlock()
			return Update{Outcome: &out}, true
		}
		if e.released && e.next >= len(e.calls) {
			e.mu.Unlock()
			return Update{}, false
		}
		e.mu.Unlock()
		<-e.notify
	}
}

// Discard cancels every running call, finishes the queued ones as Cancelled
// and waits for the running ones to return. Call it when the turn is over:
// after its results were taken, or when the turn was never recorded.
func (e *Executor) Discard() {
	e.cancel()
	e.wg.Wait()
	e.stop()
}

// schedule starts what may run now; e.mu is held.
func (e *Executor) schedule() {
	nRunning, allReadOnly := 0, true
	for _, c := range e.calls {
		if c.state == running {
			nRunning++
			allReadOnly = allReadOnly && c.readOnly
		}
	}
	cancelled := e.ctx.Err() != nil
	for _, c := range e.calls {
		if c.state != queued {
			continue
		}
		if cancelled {
			c.state, c.out = done, errorOutcome(c.use.ID, cancelledText(e.ctx))
			continue
		}
		if c.readOnly {
			if allReadOnly && nRunning < e.cfg.MaxConcurrency {
				nRunning++
				e.start(c)
				continue
			}
			break // keep call order behind a full or exclusive slot
		}
		if e.released && nRunning == 0 {
			e.start(c)
		}
		break // an exclusive call is a barrier for everything after it
	}
}

// start runs c in its own goroutine; e.mu is held.
func (e *Executor) start(c *call) {
	c.state = running
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		out := e.run(c)
		e.mu.Lock()
		c.state, c.out = done, out
		e.schedule()
		e.mu.Unlock()
		e.signal()
	}()
}

func (e *Executor) run(c *call) Outcome {
	ctx, span := otel.Tracer("jetway/pkg/agent/tool").Start(e.ctx, "tool "+c.use.Name)
	defer span.End()
	span.SetAttributes(
		attribute.String("tool.name", c.use.Name),
		attribute.String("tool.use_id", c.use.ID),
		attribute.Bool("tool.read_only", c.readOnly),
	)
	input := c.use.Input
	if e.cfg.Gate != nil {
		in, allowed, msg := e.cfg.Gate(ctx, c.use.Name, input, c.readOnly)
		if !allowed {
			span.SetAttributes(attribute.Bool("tool.denied", true))
			return errorOutcome(c.use.ID, msg)
		}
		if in != nil && string(in) != string(input) {
			// A hook rewrote the input: it must still fit the schema.
			if err := e.cfg.Registry.Validate(c.use.Name, in); err != nil {
				return errorOutcome(c.use.ID, fmt.Sprintf("invalid input for %s after a hook rewrote it: %v", c.use.Name, err))
			}
			input = in
		}
	}
	r, err := c.tool.Run(ctx, Call{ID: c.use.ID, Input: input, Progress: func(text string) {
		e.mu.Lock()
		e.progress = append(e.progress, Progress{ToolUseID: c.use.ID, Text: text})
		e.mu.Unlock()
		e.signal()
	}})
	if ctx.Err() != nil && (err != nil || !r.Stands) {
		// Whatever it returned, it was cut off: say so — unless the tool
		// says what became of the call.
		span.SetStatus(codes.Error, "cancelled")
		return errorOutcome(c.use.ID, cancelledText(ctx))
	}
	if err != nil {
		r = Result{Content: fmt.Sprintf("%s failed: %v", c.use.Name, err), IsError: true}
	}
	content, cerr := Capture(e.cfg.OutputDir, c.use.ID, e.cfg.MaxOutputChars, r.Content)
	if cerr != nil {
		content, _ = Capture("", c.use.ID, e.cfg.MaxOutputChars, r.Content)
		content += "\n[" + cerr.Error() + "]"
	}
	if r.IsError {
		span.SetStatus(codes.Error, "tool reported an error")
	}
	out := Outcome{
		Block:       llm.ContentBlock{Type: llm.BlockToolResult, ToolUseID: c.use.ID, Content: content, Images: slices.Clone(r.Images), IsError: r.IsError},
		Stop:        r.Stop,
		StopMessage: r.StopMessage,
	}
	if e.cfg.After != nil {
		if stop, msg := e.cfg.After(ctx, c.use.Name, input, Result{Content: content, Images: out.Block.Images, IsError: r.IsError}); stop {
			out.Stop, out.StopMessage = true, msg
		}
	}
	return out
}

func (e *Executor) signal() {
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

func errorOutcome(id, msg string) Outcome {
	return Outcome{Block: llm.ContentBlock{Type: llm.BlockToolResult, ToolUseID: id, Content: msg, IsError: true}}
}
