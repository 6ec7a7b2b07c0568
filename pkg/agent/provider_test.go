package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"jetway/pkg/agent"
	"jetway/pkg/agent/compact"
	"jetway/pkg/agent/guide"
	"jetway/pkg/agent/permission"
	"jetway/pkg/agent/tool"
	"jetway/pkg/llm"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/llmtest"
	"jetway/pkg/llm/retry"
)

// These tests drive the loop through the real Anthropic provider (the
// official SDK's decoder) against a local server speaking the Messages API's
// SSE format, which refuses what the real API refuses (a tool call without
// its result, two user turns in a row, ...).

func anthropicProvider(tb testing.TB, s *llmtest.Anthropic) *anthropic.Provider {
	tb.Helper()
	p, err := anthropic.New(anthropic.Config{APIKey: "test-key", BaseURL: s.URL(), Model: "claude-test", Retry: retry.Policy{MaxRetries: -1}})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func TestQuery_through_the_anthropic_wire_protocol(t *testing.T) {
	s := llmtest.NewAnthropic(t,
		llmtest.Reply{Thinking: "look first", Signature: "sig", Text: "Let me look.", ToolCalls: []llmtest.ToolCall{
			{ID: "toolu_1", Name: "echo", Input: `{"a":1}`},
			{ID: "toolu_2", Name: "write", Input: `{"path":"x"}`},
		}, Usage: llm.Usage{InputTokens: 100, OutputTokens: 20}},
		llmtest.Reply{Text: "All done.", Usage: llm.Usage{InputTokens: 150, OutputTokens: 5}},
	)
	write := tool.Func{Name: "write", Fn: func(context.Context, tool.Call) (tool.Result, error) { return tool.Result{Content: "wrote x"}, nil }}
	g := guide.NewNoticeGuide()
	g.Push("ce-7", "[background job notice] job 7 (make) still running after 10m.")
	rec := &recorder{}
	evs, term := run(t, t.Context(), agent.QueryInput{
		Provider: anthropicProvider(t, s), Model: "claude-test", System: []string{"You are a test."},
		Messages: userInput("go"), Tools: registry(t, echo(), write), Notices: g, Recorder: rec,
		PermissionMode: permission.AcceptAll, SystemReminder: "<system-reminder>today</system-reminder>",
		Compactor: compact.New(compact.Config{}),
	}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted || term.Text != "All done." {
		t.Fatalf("terminal %+v", term)
	}
	if term.Usage.OutputTokens != 25 || term.Usage.InputTokens != 250 {
		t.Errorf("usage %+v", term.Usage)
	}
	var kindsSeen []agent.EventKind
	for _, e := range evs {
		if len(kindsSeen) == 0 || kindsSeen[len(kindsSeen)-1] != e.Kind {
			kindsSeen = append(kindsSeen, e.Kind)
		}
	}
	if kindsSeen[0] != agent.KindThinking {
		t.Errorf("events start with %v", kindsSeen)
	}
	assertPaired(t, term.Messages)
	reqs := s.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	first := string(reqs[0].Body)
	if !strings.Contains(first, "job 7 (make) still running") || !strings.Contains(first, "today") || strings.Contains(first, "ce-7") {
		t.Errorf("first request lacks the notice or reminder, or leaks the CE id: %s", first)
	}
	second := reqs[1].JSON()
	msgs, _ := second["messages"].([]any)
	if len(msgs) != 3 {
		t.Fatalf("second request has %d messages: %v", len(msgs), second)
	}
	results, _ := msgs[2].(map[string]any)["content"].([]any)
	if len(results) < 2 || results[0].(map[string]any)["tool_use_id"] != "toolu_1" || results[1].(map[string]any)["tool_use_id"] != "toolu_2" {
		t.Errorf("results not first and in call order: %v", results)
	}
	var delivered []string
	for _, m := range rec.recorded() {
		delivered = append(delivered, m.Delivers...)
	}
	if len(delivered) != 1 || delivered[0] != "ce-7" {
		t.Errorf("recorded Delivers %v", delivered)
	}
}

func TestQuery_overflow_from_the_wire_compacts_and_retries(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Error: llmtest.PromptTooLong()}, llmtest.Reply{Text: "fits"})
	input := []llm.Message{
		llm.UserText("first question " + strings.Repeat("x", 2000)),
		{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "first answer"}}},
		llm.UserText("second question"),
	}
	rec := &recorder{}
	_, term := run(t, t.Context(), agent.QueryInput{Provider: anthropicProvider(t, s), Messages: input, Compactor: compact.New(compact.Config{}), Recorder: rec}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted || len(term.Continues) != 1 || term.Continues[0] != agent.ContinueReactiveCompactRetry {
		t.Fatalf("terminal %+v", term)
	}
	retry := string(s.Requests()[1].Body)
	if strings.Contains(retry, strings.Repeat("x", 2000)) || !strings.Contains(retry, "second question") {
		t.Fatalf("retry still sends the folded part or lost the question: %.300s", retry)
	}
}

// BenchmarkLoopTurn compares one model turn through the loop with a bare
// provider call against the same local server: the difference is the
// loop's overhead per turn (view, recorder, events, executor).
func BenchmarkLoopTurn(b *testing.B) {
	s := llmtest.StartAnthropic()
	b.Cleanup(s.Close)
	s.SetRecording(false)
	s.SetFallback(llmtest.Reply{Text: "ok, done", Usage: llm.Usage{InputTokens: 50, OutputTokens: 3}})
	p := anthropicProvider(b, s)
	msgs := []llm.Message{llm.UserText("hello")}
	reg, _ := tool.NewRegistry(echo())

	b.Run("bare_provider", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, err := range p.Stream(context.Background(), llm.CompletionRequest{Model: "claude-test", Messages: msgs, MaxTokens: 1024}) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("loop", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for ev, err := range agent.Query(context.Background(), agent.QueryInput{Provider: p, Model: "claude-test", Messages: msgs, Tools: reg, Recorder: &recorder{}, MaxTokens: 1024}, agent.QueryDeps{}) {
				if ev.Kind == agent.KindResult && (err != nil || ev.Terminal.Reason != agent.ReasonCompleted) {
					b.Fatal(ev.Terminal.Reason, err)
				}
			}
		}
	})
}

func TestQuery_cancelled_mid_stream_over_the_wire(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: strings.Repeat("word ", 200), Chunks: 50, ChunkDelay: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rec := &recorder{}
	var term *agent.Terminal
	for ev := range agent.Query(ctx, agent.QueryInput{Provider: anthropicProvider(t, s), Messages: userInput("talk"), Recorder: rec}, agent.QueryDeps{}) {
		if ev.Kind == agent.KindText {
			cancel()
		}
		if ev.Kind == agent.KindResult {
			term = ev.Terminal
		}
	}
	if term == nil || term.Reason != agent.ReasonAbortedStreaming {
		t.Fatalf("terminal %+v", term)
	}
	if n := len(rec.recorded()); n != 0 {
		t.Fatalf("%d messages recorded from a cut stream", n)
	}
}

func TestQuery_resumes_a_truncated_answer_over_the_wire(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "first half", StopReason: llm.StopMaxTokens}, llmtest.Reply{Text: " second half"})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: anthropicProvider(t, s), Messages: userInput("write")}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted || term.Err != nil || len(term.Continues) != 1 || term.Continues[0] != agent.ContinueMaxOutputTokensRecovery {
		t.Fatalf("terminal %+v", term)
	}
	if !strings.Contains(string(s.Requests()[1].Body), "Output token limit hit") {
		t.Fatal("resume prompt not sent")
	}
}

func TestQuery_non_streaming_over_the_wire(t *testing.T) {
	s := llmtest.NewAnthropic(t,
		llmtest.Reply{Text: "checking", ToolCalls: []llmtest.ToolCall{{ID: "toolu_9", Name: "echo", Input: `{"q":1}`}}},
		llmtest.Reply{Text: "fine"},
	)
	evs, term := run(t, t.Context(), agent.QueryInput{Provider: anthropicProvider(t, s), Messages: userInput("hi"), Tools: registry(t, echo()), NonStreaming: true}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted || term.Text != "fine" {
		t.Fatalf("terminal %+v", term)
	}
	var result string
	for _, e := range evs {
		if e.Kind == agent.KindToolResult {
			result = e.ToolResult.Content
		}
	}
	if result != `echo {"q":1}` {
		t.Fatalf("tool result %q", result)
	}
	if body := string(s.Requests()[0].Body); strings.Contains(body, `"stream":true`) {
		t.Fatalf("non-streaming run streamed: %.200s", body)
	}
}
