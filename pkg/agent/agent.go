package agent

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"time"

	"jetway/pkg/agent/guide"
	"jetway/pkg/agent/permission"
	"jetway/pkg/agent/tool"
	"jetway/pkg/llm"
)

// EventKind classifies a loop Event.
type EventKind string

const (
	KindText       EventKind = "text"        // assistant text delta
	KindThinking   EventKind = "thinking"    // reasoning delta
	KindToolUse    EventKind = "tool_use"    // a tool call arrived and will run
	KindToolResult EventKind = "tool_result" // a tool finished (in call order)
	KindProgress   EventKind = "progress"    // mid-tool progress
	KindUsage      EventKind = "usage"       // cumulative token usage after a model turn
	KindResult     EventKind = "result"      // terminal event (loop finished)
)

// Event is one item in the loop's output stream.
type Event struct {
	Kind EventKind
	// Text is set for KindText, KindThinking and KindProgress.
	Text string
	// ToolUse is set for KindToolUse, and for KindProgress is the call
	// that reports.
	ToolUse *llm.ContentBlock
	// ToolResult is set for KindToolResult: the result (ToolUseID,
	// Content, Images, IsError) with its call's Name and Input, redacted as
	// they are recorded, so the event is whole on its own.
	ToolResult *llm.ContentBlock
	// Terminal is set for KindResult.
	Terminal *Terminal
	// Usage is set for KindUsage: cumulative usage after the latest model turn.
	Usage *llm.Usage
}

// TerminalReason explains why the loop stopped.
type TerminalReason string

const (
	// ReasonCompleted: the model ended its turn. Terminal.Err is set when
	// it ended still truncated after MaxOutputTokensRecoveries resumes.
	ReasonCompleted     TerminalReason = "completed"
	ReasonBlockingLimit TerminalReason = "blocking_limit" // hard context limit hit before a request
	// ReasonImageError: the provider refused an image (unsupported media
	// type, too large, unreadable), before sending or from the API
	// (llm.ErrKindImage). Terminal.Err says which image and why; the last
	// message is the llm.ImageRefusal record that keeps later requests of
	// the session from sending the refused image again.
	ReasonImageError        TerminalReason = "image_error"
	ReasonModelError        TerminalReason = "model_error"         // provider/API failure
	ReasonAbortedStreaming  TerminalReason = "aborted_streaming"   // cancelled during streaming (or between turns)
	ReasonAbortedTools      TerminalReason = "aborted_tools"       // cancelled during tool execution
	ReasonPromptTooLong     TerminalReason = "prompt_too_long"     // overflow recovery exhausted
	ReasonStopHookPrevented TerminalReason = "stop_hook_prevented" // a Stop hook blocked continuation
	ReasonHookStopped       TerminalReason = "hook_stopped"        // a tool/hook stopped continuation
	ReasonMaxTurns          TerminalReason = "max_turns"           // hit MaxTurns
	ReasonTimeout           TerminalReason = "timeout"             // hit MaxDuration
	// ReasonRecordFailed: the Recorder refused a message (for a runner: its
	// fenced transcript append was refused, so it has lost the session).
	// Nothing more runs. Added after the first reasons, never replacing one:
	// the reasons only grow.
	ReasonRecordFailed TerminalReason = "record_failed"
)

// ContinueReason names why the loop took another turn; Terminal.Continues
// lists them for telemetry.
type ContinueReason string

const (
	ContinueNextTurn                ContinueReason = "next_turn"
	ContinueReactiveCompactRetry    ContinueReason = "reactive_compact_retry"
	ContinueMaxOutputTokensEscalate ContinueReason = "max_output_tokens_escalate"
	ContinueMaxOutputTokensRecovery ContinueReason = "max_output_tokens_recovery"
	ContinueStopHookBlocking        ContinueReason = "stop_hook_blocking"
	ContinueTokenBudget             ContinueReason = "token_budget_continuation"
	ContinueTaskNotification        ContinueReason = "task_notification"
)

// Terminal is the final state of a Query, delivered as the KindResult event.
type Terminal struct {
	Reason TerminalReason
	Err    error
	Usage  llm.Usage
	// Turns counts model turns that produced a message.
	Turns int
	// Messages is the full history: the input plus every message the loop
	// made, compaction records included (non-destructive).
	Messages []llm.Message
	// Text is the assistant's final text, for convenience.
	Text string
	// Continues lists, in order, why the loop took each further turn.
	Continues []ContinueReason
}

// Recorder persists the conversation as it grows (for a runner: the fenced
// transcript append). RecordMessage is called once per new message, in
// birth order, before anything acts on it; usage is the token usage of the
// model call that produced it (assistant messages only, zero otherwise). An
// error means the message was not recorded and the run must stop: the loop
// ends at once with ReasonRecordFailed. The input messages are the host's
// and are not recorded again. RecordBoundary tells of a compaction, for
// observability; its boundary and summary records also arrive through
// RecordMessage, as they are part of the history.
type Recorder interface {
	RecordMessage(m llm.Message, usage llm.Usage) error
	RecordBoundary(meta llm.BoundaryMeta)
}

// Redactor hides credentials (jetway's is pkg/redact's). The loop is the
// one place every tool call and result passes through on its way to a
// reader: the KindToolUse and KindToolResult events, the Recorder (the
// transcript) and the history the next request is built from (the model).
// So it redacts there, once, and none of those readers has to.
type Redactor interface {
	Text(s string) string
	JSON(raw json.RawMessage) json.RawMessage
}

// HookRunner is the loop's view of the hook system.
type HookRunner interface {
	// PreToolUse may block a call (the model reads message) or rewrite its
	// input (updated non-nil). It runs before the permission check, which
	// judges the input that will actually run.
	PreToolUse(ctx context.Context, name string, input []byte) (block bool, message string, updated []byte)
	// PostToolUse is told of every finished call; stop=true ends the run
	// after this tool turn with ReasonHookStopped.
	PostToolUse(ctx context.Context, name string, input, result []byte, isErr bool) (stop bool, message string)
	// Stop runs when the model ends its turn: prevent ends the run
	// (ReasonStopHookPrevented); blockingErrors are handed to the model as a
	// user turn and the loop goes on (ContinueStopHookBlocking).
	Stop(ctx context.Context, messages []llm.Message) (prevent bool, blockingErrors []string, message string)
}

// Compaction is what a compactor appends to the history: a boundary record
// (which earlier messages the request view keeps) and the summary that
// stands for the rest. Recorded history is never edited.
type Compaction struct {
	Boundary llm.Boundary
	Summary  llm.Message
}

// ErrBlockingLimit is returned by Compactor.Pre when the context is at its
// hard limit and nothing more can be folded: the loop ends with
// ReasonBlockingLimit without sending a request the provider would refuse.
var ErrBlockingLimit = errors.New("context at its hard limit")

// Compactor is the loop's view of context-window management (package
// compact implements it).
type Compactor interface {
	// Pre runs before each model request; lastInputTokens is the context
	// size the previous response reported (0 if none since the last
	// compaction). It returns nil when nothing needs folding.
	Pre(ctx context.Context, msgs []llm.Message, lastInputTokens int) (*Compaction, error)
	// Reactive runs after the provider refused a request as too long;
	// attempt counts from 1. It returns nil when nothing more can be folded.
	Reactive(ctx context.Context, msgs []llm.Message, attempt int) (*Compaction, error)
	// IsOverflow reports whether err means the prompt was too long.
	IsOverflow(err error) bool
}

// ContextView is optionally implemented by a Compactor that builds the
// request messages itself instead of llm.MessagesForAPI (e.g. to clear old
// large tool results). View must be pure: its result is used for one
// request and never written back to the history.
type ContextView interface {
	View(ctx context.Context, msgs []llm.Message) []llm.Message
}

// SettledView is optionally implemented by a ContextView that knows how
// many of its view's first messages are settled: never written again, and
// sent again at the start of the next requests. The request says so
// (llm.CompletionRequest.Settled), and a provider takes what it made of
// them last time instead of reading them all again.
type SettledView interface {
	ViewSettled(ctx context.Context, msgs []llm.Message) (view []llm.Message, settled int)
}

// Settlement configures the wrap-up phase that runs when a budget is hit.
type Settlement struct {
	Prompt        string   // wrap-up instruction injected as a user turn (empty = settlement off unless PromptByReason has one)
	MaxTurns      int      // model turns for the wrap-up itself (0 = 2)
	DisabledTools []string // tools hidden from, and refused to, the model during wrap-up
	// PromptByReason overrides Prompt for the budget that was hit
	// (ReasonTimeout or ReasonMaxTurns).
	PromptByReason map[TerminalReason]string
}

func (s *Settlement) prompt(r TerminalReason) string {
	if s == nil {
		return ""
	}
	if p := s.PromptByReason[r]; p != "" {
		return p
	}
	return s.Prompt
}

// QueryInput is a fully resolved request to run the loop.
type QueryInput struct {
	Provider        llm.Provider
	Model           string
	System          []string
	DynamicBoundary int
	// Messages is the conversation so far, including the latest user turn.
	// It is the host's (already recorded) and is never modified.
	Messages []llm.Message
	// AppendInPlace lets the loop grow its history in Messages' own array,
	// past its length, instead of copying it first (a copy of every
	// message at each run start, 192 KB at 2000 messages). The host
	// promises to write nothing there while the run lasts; Terminal.Messages
	// gives it the grown history back, with its spare room.
	AppendInPlace bool
	// SystemReminder, when set, is put first in every request and never
	// stored, so it never accumulates across turns.
	SystemReminder string
	Tools          *tool.Registry
	// DeferredTools names tools whose schemas are withheld from the model's
	// tool list; they stay callable by name.
	DeferredTools  []string
	MaxTokens      int // output cap per call (0 = 8192)
	Temperature    *float64
	ThinkingBudget int
	// MaxTurns bounds tool turns (0 = off). MaxDuration bounds wall-clock
	// time, checked at turn boundaries so a stream or tool is never cut
	// (cancelling ctx is what cuts) (0 = off).
	MaxTurns       int
	MaxDuration    time.Duration
	MaxConcurrency int // read-only tool calls at once (0 = 10)
	// NonStreaming makes each model call one non-streaming request; the same
	// events are emitted once the whole response is in.
	NonStreaming bool
	// ToolOutputDir, when set, receives the whole output of a call over
	// MaxToolOutputChars (0 = 30000); the result keeps the head and names
	// the file.
	ToolOutputDir      string
	MaxToolOutputChars int

	// Notices, when set, is drained before every model call into one notice
	// turn; a notice still pending when the model ends its turn makes the
	// loop go on (ContinueTaskNotification).
	Notices *guide.NoticeGuide

	// Todos, when set, enables todo reminders: when the model has not used
	// todo_write for TodoReminderTurnsSinceWrite turns and was not reminded
	// for TodoReminderTurnsBetweenReminder turns (0 = 10 each), the list is
	// re-surfaced as a reminder turn. The counts are read from the history,
	// so they survive compaction and recovery.
	Todos                            *tool.TodoStore
	TodoReminderTurnsSinceWrite      int
	TodoReminderTurnsBetweenReminder int

	// Permission policy.
	PermissionMode     permission.Mode
	PermissionModeFunc func() permission.Mode
	Allowed            []string
	Disallowed         []string
	CanUseTool         permission.CanUseTool

	Hooks     HookRunner
	Compactor Compactor
	Recorder  Recorder
	// Redactor, when set, redacts each tool call's input and each tool
	// result before they are emitted, recorded or sent to the model again.
	// A call runs with the input the model wrote: only what is read
	// afterwards is redacted, so a secret the model put in a command
	// still works in that command but is not shown back to it or anyone.
	Redactor Redactor

	// TokenBudget, when > 0, makes a turn without tool calls go on until
	// about 90% of this many output tokens are used, stopping early on
	// diminishing returns.
	TokenBudget int
	// EscalateMaxTokens retries a truncated turn once with a 64k output cap
	// before asking the model to resume.
	EscalateMaxTokens bool
	// Settlement, when set, runs a bounded wrap-up when MaxTurns or
	// MaxDuration is hit; the run still ends with that budget's reason.
	Settlement *Settlement
}

// QueryDeps are the loop's side-effect boundaries, replaceable in tests.
type QueryDeps struct {
	// CallModel streams one completion (default: Provider.Stream).
	CallModel func(ctx context.Context, req llm.CompletionRequest) iter.Seq2[llm.StreamEvent, error]
	// CallModelSync completes one request without streaming (default:
	// Provider.Complete); used when NonStreaming is set.
	CallModelSync func(ctx context.Context, req llm.CompletionRequest) (llm.Message, llm.StopReason, llm.Usage, error)
	// NewID names new messages (default: random).
	NewID func() string
	// Now is the clock for MaxDuration (default: time.Now).
	Now func() time.Time
}
