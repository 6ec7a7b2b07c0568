package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"jetway/pkg/llm"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/llmtest"
	"jetway/pkg/llm/retry"
)

func newProvider(t testing.TB, s *llmtest.Anthropic, mod ...func(*anthropic.Config)) (*anthropic.Provider, *llmtest.Waits) {
	t.Helper()
	w := &llmtest.Waits{}
	cfg := anthropic.Config{
		APIKey: "test-key", BaseURL: s.URL(), Model: "claude-test",
		Retry: retry.Policy{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, OnRetry: w.Record},
	}
	for _, m := range mod {
		m(&cfg)
	}
	p, err := anthropic.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, w
}

var toolReply = llmtest.Reply{
	Thinking: "The user wants two files.", Signature: "sig-1",
	Text: "Reading both.",
	ToolCalls: []llmtest.ToolCall{
		{ID: "toolu_a", Name: "read", Input: `{"path":"a.txt","lines":{"from":1,"to":20}}`},
		{ID: "toolu_b", Name: "read", Input: `{"path":"b.txt"}`},
	},
	Usage:  llm.Usage{InputTokens: 30, OutputTokens: 12, CacheCreationInputTokens: 5, CacheReadInputTokens: 400},
	Chunks: 5,
}

func TestStream_delivers_thinking_text_and_each_tool_call_then_the_assembled_message(t *testing.T) {
	s := llmtest.NewAnthropic(t, toolReply)
	p, _ := newProvider(t, s)
	evs, err := llmtest.Collect(p.Stream(context.Background(), llmtest.UserRequest("read a and b")))
	if err != nil {
		t.Fatal(err)
	}
	var thinking, text strings.Builder
	var tools []llm.ContentBlock
	var order []llm.StreamEventType
	for _, ev := range evs {
		switch ev.Type {
		case llm.EventThinkingDelta:
			thinking.WriteString(ev.Text)
		case llm.EventTextDelta:
			text.WriteString(ev.Text)
		case llm.EventToolUse:
			tools = append(tools, *ev.Block)
		}
		if len(order) == 0 || order[len(order)-1] != ev.Type {
			order = append(order, ev.Type)
		}
	}
	wantOrder := []llm.StreamEventType{llm.EventThinkingDelta, llm.EventTextDelta, llm.EventToolUse, llm.EventMessageEnd}
	if !reflect.DeepEqual(order, wantOrder) {
		t.Fatalf("event order %v, want %v", order, wantOrder)
	}
	if thinking.String() != toolReply.Thinking || text.String() != toolReply.Text {
		t.Errorf("thinking %q text %q", thinking.String(), text.String())
	}
	if len(tools) != 2 || tools[0].ID != "toolu_a" || string(tools[0].Input) != toolReply.ToolCalls[0].Input || string(tools[1].Input) != `{"path":"b.txt"}` {
		t.Fatalf("tool events %+v", tools)
	}
	end := evs[len(evs)-1]
	if end.StopReason != llm.StopToolUse {
		t.Errorf("stop %q", end.StopReason)
	}
	if *end.Usage != toolReply.Usage {
		t.Errorf("usage %+v, want %+v", *end.Usage, toolReply.Usage)
	}
	m := end.Message
	if m.Role != llm.RoleAssistant || len(m.Content) != 4 {
		t.Fatalf("message %+v", m)
	}
	if m.Content[0].Type != llm.BlockThinking || m.Content[0].Signature != "sig-1" || m.Content[0].Text != toolReply.Thinking {
		t.Errorf("thinking block %+v", m.Content[0])
	}
	if m.Text() != toolReply.Text || len(m.ToolUses()) != 2 {
		t.Errorf("message text %q tools %d", m.Text(), len(m.ToolUses()))
	}
}

func TestComplete_returns_the_same_message_without_streaming(t *testing.T) {
	s := llmtest.NewAnthropic(t, toolReply)
	p, _ := newProvider(t, s)
	m, stop, usage, err := p.Complete(context.Background(), llmtest.UserRequest("read a and b"))
	if err != nil {
		t.Fatal(err)
	}
	if stop != llm.StopToolUse || usage != toolReply.Usage || len(m.ToolUses()) != 2 || m.Content[0].Signature != "sig-1" {
		t.Fatalf("stop %q usage %+v message %+v", stop, usage, m)
	}
	if body := s.Requests()[0].JSON(); body["stream"] == true {
		t.Fatalf("Complete must not stream: %v", body["stream"])
	}
}

func TestComplete_with_a_large_output_cap_streams_underneath(t *testing.T) {
	s := llmtest.NewAnthropic(t, toolReply)
	p, _ := newProvider(t, s, func(c *anthropic.Config) { c.AdaptiveThinking = true })
	req := llmtest.UserRequest("read a and b")
	req.MaxTokens = 64000 // the SDK refuses this without streaming
	req.ThinkingBudget = 4000
	m, stop, usage, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if stop != llm.StopToolUse || usage != toolReply.Usage || len(m.ToolUses()) != 2 {
		t.Fatalf("stop %q usage %+v message %+v", stop, usage, m)
	}
	body := s.Requests()[0].JSON()
	if body["stream"] != true {
		t.Fatalf("want a streamed request, got stream=%v", body["stream"])
	}
	if th, _ := body["thinking"].(map[string]any); th["type"] != "adaptive" {
		t.Fatalf("thinking %v, want adaptive", body["thinking"])
	}
}

func TestRedacted_thinking_goes_back_to_the_API_unchanged(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{RedactedThinking: "ENCRYPTED==", ToolCalls: []llmtest.ToolCall{{ID: "toolu_r", Name: "ls"}}}, llmtest.Reply{Text: "ok"})
	p, _ := newProvider(t, s)
	evs, err := llmtest.Collect(p.Stream(context.Background(), llmtest.UserRequest("x")))
	if err != nil {
		t.Fatal(err)
	}
	m := *evs[len(evs)-1].Message
	if m.Content[0].Type != llm.BlockThinking || m.Content[0].Signature != anthropic.RedactedPrefix+"ENCRYPTED==" {
		t.Fatalf("redacted block %+v", m.Content[0])
	}
	history := []llm.Message{llm.UserText("x"), m, {Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockToolResult, ToolUseID: "toolu_r", Content: "a"}}}}
	if _, _, _, err := p.Complete(context.Background(), llm.CompletionRequest{Messages: history}); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Messages []struct {
			Content []map[string]any `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(s.Requests()[1].Body, &body); err != nil {
		t.Fatal(err)
	}
	if b := body.Messages[1].Content[0]; b["type"] != "redacted_thinking" || b["data"] != "ENCRYPTED==" {
		t.Fatalf("sent back %v", b)
	}
}

func TestMax_tokens_stop_returns_the_truncated_message_not_an_error(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "half an ans", StopReason: llm.StopMaxTokens},
		llmtest.Reply{Text: "half", StopReason: llm.StopMaxTokens})
	p, _ := newProvider(t, s)
	evs, err := llmtest.Collect(p.Stream(context.Background(), llmtest.UserRequest("long")))
	if err != nil {
		t.Fatal(err)
	}
	end := evs[len(evs)-1]
	if end.Type != llm.EventMessageEnd || end.StopReason != llm.StopMaxTokens || end.Message.Text() != "half an ans" {
		t.Fatalf("end %+v", end)
	}
	_, stop, _, err := p.Complete(context.Background(), llmtest.UserRequest("long"))
	if err != nil || stop != llm.StopMaxTokens {
		t.Fatalf("complete: stop %q err %v", stop, err)
	}
}

func TestPrompt_too_long_is_classified_as_overflow(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Error: llmtest.PromptTooLong()}, llmtest.Reply{Error: llmtest.PromptTooLong()})
	p, w := newProvider(t, s)
	_, err := llmtest.Collect(p.Stream(context.Background(), llmtest.UserRequest("huge")))
	var e *llm.Error
	if !llm.IsOverflow(err) || !errors.As(err, &e) || e.StatusCode != 400 {
		t.Fatalf("stream: want overflow with HTTP 400, got %v", err)
	}
	_, _, _, err = p.Complete(context.Background(), llmtest.UserRequest("huge"))
	if !llm.IsOverflow(err) {
		t.Fatalf("complete: want overflow, got %v", err)
	}
	if len(w.All()) != 0 || s.RequestCount() != 2 {
		t.Fatalf("an overflow must not be retried: %d waits, %d requests", len(w.All()), s.RequestCount())
	}
}

func TestOther_refusals_are_model_errors_and_not_retried(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Error: &llmtest.APIError{Status: 400, Message: "tools.0.name: invalid"}})
	p, _ := newProvider(t, s)
	_, err := llmtest.Collect(p.Stream(context.Background(), llmtest.UserRequest("x")))
	if llm.KindOf(err) != llm.ErrKindModel || !strings.Contains(err.Error(), "tools.0.name") || s.RequestCount() != 1 {
		t.Fatalf("got %v after %d requests", err, s.RequestCount())
	}
}

func TestRate_limit_is_retried_after_the_wait_the_server_asks_for(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Error: llmtest.RateLimited("1")}, llmtest.Reply{Text: "ok"})
	p, w := newProvider(t, s)
	evs, err := llmtest.Collect(p.Stream(context.Background(), llmtest.UserRequest("x")))
	if err != nil {
		t.Fatal(err)
	}
	if got := evs[len(evs)-1].Message.Text(); got != "ok" {
		t.Fatalf("text %q", got)
	}
	if got := w.All(); len(got) != 1 || got[0] != time.Second {
		t.Fatalf("waits %v, want [1s] from retry-after", got)
	}
}

func TestOverloaded_and_server_errors_are_retried_with_backoff(t *testing.T) {
	s := llmtest.NewAnthropic(t,
		llmtest.Reply{Error: llmtest.Overloaded()},
		llmtest.Reply{Error: llmtest.ServerError()},
		llmtest.Reply{Text: "x", StreamError: llmtest.Overloaded()}, // overloaded as an in-stream error event
		llmtest.Reply{Text: "finally"},
	)
	p, w := newProvider(t, s)
	evs, err := llmtest.Collect(p.Stream(context.Background(), llmtest.UserRequest("x")))
	if err != nil {
		t.Fatal(err)
	}
	if got := evs[len(evs)-1].Message.Text(); got != "finally" {
		t.Fatalf("text %q", got)
	}
	if n := len(w.All()); n != 3 || s.RequestCount() != 4 {
		t.Fatalf("%d retries over %d requests, want 3 over 4", n, s.RequestCount())
	}
	s.Enqueue(llmtest.Reply{Error: llmtest.Overloaded()}, llmtest.Reply{Text: "sync ok"})
	m, _, _, err := p.Complete(context.Background(), llmtest.UserRequest("x"))
	if err != nil || m.Text() != "sync ok" {
		t.Fatalf("complete after 529: %q %v", m.Text(), err)
	}
}

func TestRetries_are_bounded(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Error: llmtest.ServerError()}, llmtest.Reply{Error: llmtest.ServerError()}, llmtest.Reply{Error: llmtest.ServerError()})
	p, _ := newProvider(t, s, func(c *anthropic.Config) { c.Retry.MaxRetries = 2 })
	_, err := llmtest.Collect(p.Stream(context.Background(), llmtest.UserRequest("x")))
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.ErrKindModel || e.StatusCode != 500 {
		t.Fatalf("want a model error with HTTP 500, got %v", err)
	}
	if s.RequestCount() != 3 {
		t.Fatalf("%d requests, want 3 (1 + 2 retries)", s.RequestCount())
	}
}

func TestA_failure_after_output_was_yielded_is_not_retried(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "partial answer", StallAfter: 5}, llmtest.Reply{Text: "unused"})
	p, _ := newProvider(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sawText bool
	var err error
	for ev, e := range p.Stream(ctx, llmtest.UserRequest("x")) {
		if e != nil {
			err = e
			break
		}
		if ev.Type == llm.EventTextDelta {
			sawText = true
			s.Disconnect() // the connection breaks mid-answer
		}
	}
	if !sawText || err == nil {
		t.Fatalf("sawText=%v err=%v", sawText, err)
	}
	if s.Pending() != 1 {
		t.Fatalf("the stream was retried after text had been delivered")
	}
}

func TestCancellation_mid_stream_returns_promptly_with_the_context_error(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "one two three four five six", Chunks: 6, StallAfter: 5})
	p, _ := newProvider(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		var last error
		for ev, err := range p.Stream(ctx, llmtest.UserRequest("x")) {
			if err != nil {
				last = err
				break
			}
			if ev.Type == llm.EventTextDelta {
				cancel()
			}
		}
		done <- last
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stream did not end after cancellation")
	}
}

func TestCache_breakpoints_sit_on_the_last_stable_system_block_and_the_last_message(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "a"}, llmtest.Reply{Text: "b"})
	p, _ := newProvider(t, s)
	req := llmtest.UserRequest("hello")
	req.System = []string{"You are jetway.", "Tools guide.", "Now: 12:00"}
	req.DynamicBoundary = 2
	req.Tools = []llm.ToolSpec{{Name: "read", Description: "read a file", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`)}}
	if _, _, _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var body struct {
		System []struct {
			Text         string          `json:"text"`
			CacheControl json.RawMessage `json:"cache_control"`
		} `json:"system"`
		Messages []struct {
			Content []map[string]any `json:"content"`
		} `json:"messages"`
		Tools []map[string]any `json:"tools"`
	}
	if err := json.Unmarshal(s.Requests()[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.System) != 3 || string(body.System[1].CacheControl) != `{"type":"ephemeral"}` || body.System[0].CacheControl != nil || body.System[2].CacheControl != nil {
		t.Fatalf("system blocks %s", s.Requests()[0].Body)
	}
	last := body.Messages[len(body.Messages)-1].Content
	if cc, _ := last[len(last)-1]["cache_control"].(map[string]any); cc["type"] != "ephemeral" {
		t.Fatalf("last message block has no breakpoint: %v", last)
	}
	schema, _ := body.Tools[0]["input_schema"].(map[string]any)
	if schema["type"] != "object" || schema["additionalProperties"] != false || schema["properties"] == nil {
		t.Fatalf("tool schema not passed through: %v", body.Tools[0])
	}

	p2, _ := newProvider(t, s, func(c *anthropic.Config) { c.DisableCache = true })
	if _, _, _, err := p2.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(s.Requests()[1].Body), "cache_control") {
		t.Fatalf("DisableCache still sent breakpoints: %s", s.Requests()[1].Body)
	}
}

func TestRequest_view_merges_roles_puts_results_first_and_leaves_the_history_untouched(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "done"})
	p, _ := newProvider(t, s)
	history := []llm.Message{
		llm.UserText("list files"),
		{Role: llm.RoleAssistant, Content: []llm.ContentBlock{
			{Type: llm.BlockThinking, Text: "ls it", Signature: "sig"},
			{Type: llm.BlockToolUse, ID: "toolu_1", Name: "ls", Input: json.RawMessage(`{"dir":"."}`)},
		}},
		// A notice recorded before the tool result: results must still come first.
		{Role: llm.RoleUser, Kind: llm.KindNotice, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "[background job notice] job 1 exited 0."}}},
		{Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockToolResult, ToolUseID: "toolu_1", Content: "a.txt\nb.txt"}}},
		{Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: ""}}}, // empty: left out
	}
	before, _ := json.Marshal(history)
	req := llm.CompletionRequest{Messages: history, ThinkingBudget: 2000, MaxTokens: 4000}
	temp := 0.5
	req.Temperature = &temp
	if _, _, _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatal(err) // the fake API refuses unpaired tool results, like the real one
	}
	after, _ := json.Marshal(history)
	if string(before) != string(after) {
		t.Fatalf("the caller's history was modified:\n%s\n%s", before, after)
	}
	var body struct {
		Messages []struct {
			Role    string           `json:"role"`
			Content []map[string]any `json:"content"`
		} `json:"messages"`
		Thinking    map[string]any `json:"thinking"`
		Temperature float64        `json:"temperature"`
	}
	if err := json.Unmarshal(s.Requests()[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Messages) != 3 {
		t.Fatalf("want 3 messages (user, assistant, merged user), got %d: %s", len(body.Messages), s.Requests()[0].Body)
	}
	merged := body.Messages[2]
	if merged.Role != "user" || len(merged.Content) != 2 || merged.Content[0]["type"] != "tool_result" || merged.Content[1]["type"] != "text" {
		t.Fatalf("merged user turn %v", merged.Content)
	}
	if th := body.Messages[1].Content[0]; th["type"] != "thinking" || th["signature"] != "sig" {
		t.Fatalf("thinking not sent back with its signature: %v", th)
	}
	if body.Thinking["type"] != "enabled" || body.Thinking["budget_tokens"] != float64(2000) || body.Temperature != 0.5 {
		t.Fatalf("thinking %v temperature %v", body.Thinking, body.Temperature)
	}
}

func TestName_and_config_errors(t *testing.T) {
	if _, err := anthropic.New(anthropic.Config{Model: "m"}); err == nil {
		t.Fatal("a config without API key must be refused")
	}
	s := llmtest.NewAnthropic(t)
	p, _ := newProvider(t, s, func(c *anthropic.Config) { c.Model = "" })
	if _, _, _, err := p.Complete(context.Background(), llmtest.UserRequest("x")); err == nil || !strings.Contains(err.Error(), "no model") {
		t.Fatalf("want a no-model error, got %v", err)
	}
	p, _ = newProvider(t, s)
	if p.Name() != "anthropic claude-test" {
		t.Fatalf("name %q", p.Name())
	}
}

func BenchmarkStream(b *testing.B) {
	s := llmtest.NewAnthropic(b)
	s.SetRecording(false)
	s.SetFallback(llmtest.Reply{Text: strings.Repeat("word ", 200), Chunks: 50,
		ToolCalls: []llmtest.ToolCall{{Name: "read", Input: `{"path":"a.txt"}`}}, Usage: llm.Usage{InputTokens: 100, OutputTokens: 250}})
	p, _ := newProvider(b, s)
	req := llmtest.UserRequest("go")
	b.ReportAllocs()
	for b.Loop() {
		for _, err := range p.Stream(context.Background(), req) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// A streamed body opens with "stream":true, once: the SDK's own setting of
// the field then finds it first instead of reading the whole history to
// append it. Apart from that field it is the non-streaming body.
func TestStream_body_opens_with_stream_true_once(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "one"}, llmtest.Reply{Text: "two"})
	p, _ := newProvider(t, s)
	req := llm.CompletionRequest{MaxTokens: 1024, System: []string{"be brief"}, Messages: []llm.Message{
		llm.UserText("hi"), {Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "hello"}}}, llm.UserText("again"),
	}}
	if _, err := llmtest.Collect(p.Stream(context.Background(), req)); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	streamed, whole := string(s.Requests()[0].Body), string(s.Requests()[1].Body)
	if !strings.HasPrefix(streamed, `{"stream":true,`) || strings.Count(streamed, `"stream"`) != 1 {
		t.Fatalf("streamed body: %s", streamed)
	}
	if strings.Contains(whole, `"stream"`) {
		t.Fatalf("non-streaming body names stream: %s", whole)
	}
	if got := `{` + strings.TrimPrefix(streamed, `{"stream":true,`); got != whole {
		t.Fatalf("bodies differ beyond the stream field:\nstreamed %s\nwhole    %s", streamed, whole)
	}
}
