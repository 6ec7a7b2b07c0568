package agent_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"jetway/pkg/agent"
	"jetway/pkg/agent/compact"
	"jetway/pkg/agent/permission"
	"jetway/pkg/agent/tool"
	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
)

// allReasons is every TerminalReason a run can end with, record_failed
// included. A reason added to agent.go belongs here too.
var allReasons = []agent.TerminalReason{
	agent.ReasonCompleted, agent.ReasonBlockingLimit, agent.ReasonImageError, agent.ReasonModelError,
	agent.ReasonAbortedStreaming, agent.ReasonAbortedTools, agent.ReasonPromptTooLong,
	agent.ReasonStopHookPrevented, agent.ReasonHookStopped, agent.ReasonMaxTurns, agent.ReasonTimeout,
	agent.ReasonRecordFailed,
}

// TestQuery_reaches_every_terminal_reason drives one small run to each
// reason, so none is only defined and never produced.
func TestQuery_reaches_every_terminal_reason(t *testing.T) {
	scenarios := map[agent.TerminalReason]func(t *testing.T) *agent.Terminal{
		agent.ReasonCompleted: func(t *testing.T) *agent.Terminal {
			_, term := run(t, t.Context(), agent.QueryInput{Provider: newModel(reply{text: "hi"}), Messages: userInput("hi")}, agent.QueryDeps{})
			return term
		},
		agent.ReasonBlockingLimit: func(t *testing.T) *agent.Terminal {
			_, term := run(t, t.Context(), agent.QueryInput{Provider: newModel(), Messages: userInput(strings.Repeat("x", 8000)), Compactor: compact.New(compact.Config{ContextWindow: 1000})}, agent.QueryDeps{})
			return term
		},
		agent.ReasonImageError: func(t *testing.T) *agent.Terminal {
			s := llmtest.NewAnthropic(t, llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "toolu_1", Name: "screenshot"}}})
			_, term := run(t, t.Context(), agent.QueryInput{
				Provider: anthropicProvider(t, s), Messages: userInput("look"),
				Tools: registry(t, screenshot(llm.NewImage("image/tiff", []byte("II*\x00")))),
			}, agent.QueryDeps{})
			return term
		},
		agent.ReasonModelError: func(t *testing.T) *agent.Terminal {
			_, term := run(t, t.Context(), agent.QueryInput{Provider: newModel(reply{err: errors.New("boom")}), Messages: userInput("hi")}, agent.QueryDeps{})
			return term
		},
		agent.ReasonAbortedStreaming: func(t *testing.T) *agent.Terminal {
			ctx, cancel := context.WithCancel(t.Context())
			m := newModel(reply{text: "partial", hold: make(chan struct{}), before: func(llm.CompletionRequest) { cancel() }})
			_, term := run(t, ctx, agent.QueryInput{Provider: m, Messages: userInput("hi")}, agent.QueryDeps{})
			return term
		},
		agent.ReasonAbortedTools: func(t *testing.T) *agent.Terminal {
			ctx, cancel := context.WithCancel(t.Context())
			stall := tool.Func{Name: "stall", Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
				cancel()
				<-ctx.Done()
				return tool.Result{}, ctx.Err()
			}}
			m := newModel(reply{tools: []llm.ContentBlock{call("s", "stall", "")}})
			_, term := run(t, ctx, agent.QueryInput{Provider: m, Messages: userInput("go"), Tools: registry(t, stall), PermissionMode: permission.AcceptAll}, agent.QueryDeps{})
			return term
		},
		agent.ReasonPromptTooLong: func(t *testing.T) *agent.Terminal {
			overflow := &llm.Error{Kind: llm.ErrKindOverflow, Provider: "fake", Err: errors.New("prompt is too long")}
			_, term := run(t, t.Context(), agent.QueryInput{Provider: newModel(reply{err: overflow}), Messages: userInput("hi")}, agent.QueryDeps{})
			return term
		},
		agent.ReasonStopHookPrevented: func(t *testing.T) *agent.Terminal {
			h := &hooks{stops: []stopAnswer{{prevent: true, message: "policy"}}}
			_, term := run(t, t.Context(), agent.QueryInput{Provider: newModel(reply{text: "done"}), Messages: userInput("go"), Hooks: h}, agent.QueryDeps{})
			return term
		},
		agent.ReasonHookStopped: func(t *testing.T) *agent.Terminal {
			done := tool.Func{Name: "finish", IsReadOnly: true, Fn: func(context.Context, tool.Call) (tool.Result, error) {
				return tool.Result{Content: "bye", Stop: true}, nil
			}}
			_, term := run(t, t.Context(), agent.QueryInput{Provider: newModel(reply{tools: []llm.ContentBlock{call("1", "finish", "")}}), Messages: userInput("go"), Tools: registry(t, done)}, agent.QueryDeps{})
			return term
		},
		agent.ReasonMaxTurns: func(t *testing.T) *agent.Terminal {
			m := newModel(reply{tools: []llm.ContentBlock{call("1", "echo", "")}})
			_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("go"), Tools: registry(t, echo()), MaxTurns: 1}, agent.QueryDeps{})
			return term
		},
		agent.ReasonTimeout: func(t *testing.T) *agent.Terminal {
			c := &clock{now: time.Unix(1000, 0)}
			m := newModel(reply{tools: []llm.ContentBlock{call("1", "echo", "")}, before: func(llm.CompletionRequest) { c.advance(time.Hour) }})
			_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("go"), Tools: registry(t, echo()), MaxDuration: time.Minute}, agent.QueryDeps{Now: c.Now})
			return term
		},
		agent.ReasonRecordFailed: func(t *testing.T) *agent.Terminal {
			rec := &recorder{refuse: func(llm.Message) error { return errors.New("fenced") }}
			_, term := run(t, t.Context(), agent.QueryInput{Provider: newModel(reply{text: "hi"}), Messages: userInput("hi"), Recorder: rec}, agent.QueryDeps{})
			return term
		},
	}
	for _, reason := range allReasons {
		t.Run(string(reason), func(t *testing.T) {
			scenario, ok := scenarios[reason]
			if !ok {
				t.Fatalf("no scenario reaches %s", reason)
			}
			term := scenario(t)
			if term.Reason != reason {
				t.Fatalf("ended with %s (%v), want %s", term.Reason, term.Err, reason)
			}
			assertPaired(t, term.Messages)
		})
	}
}
