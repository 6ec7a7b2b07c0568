package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
	"jetway/pkg/llm/openai"
	"jetway/pkg/llm/retry"
)

func newProvider(t testing.TB, s *llmtest.OpenAI, mod ...func(*openai.Config)) (*openai.Provider, *llmtest.Waits) {
	t.Helper()
	w := &llmtest.Waits{}
	cfg := openai.Config{
		APIKey: "test-key", BaseURL: s.URL(), Model: "gpt-test",
		Retry: retry.Policy{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, OnRetry: w.Record},
	}
	for _, m := range mod {
		m(&cfg)
	}
	p, err := openai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, w
}

var toolReply = llmtest.Reply{
	Thinking: "ignored by Chat Completions",
	Text:     "Reading both.",
	ToolCalls: []llmtest.ToolCall{
		{ID: "call_a", Name: "read", Input: `{"path":"a.txt","lines":{"from":1,"to":20}}`},
		{ID: "call_b", Name: "read", Input: `{"path":"b.txt"}`},
	},
	Usage:  llm.Usage{InputTokens: 30, OutputTokens: 12, CacheReadInputTokens: 400},
	Chunks: 5,
}

func TestStream_delivers_text_and_each_fragmented_tool_call_then_the_assembled_message(t *testing.T) {
	s := llmtest.NewOpenAI(t, toolReply)
	p, _ := newProvider(t, s)
	evs, err := llmtest.Collect(p.Stream(context.Background(), llmtest.UserRequest("read a and b")))
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	var tools []llm.ContentBlock
	var order []llm.StreamEventType
	for _, ev := range evs {
		switch ev.Type {
		case llm.EventTextDelta:
			text.WriteString(ev.Text)
		case llm.EventToolUse:
			tools = append(tools, *ev.Block)
		}
		if len(order) == 0 || order[len(order)-1] != ev.Type {
			order = append(order, ev.Type)
		}
	}
	wantOrder := []llm.StreamEventType{llm.EventTextDelta, llm.EventToolUse, llm.EventMessageEnd}
	if !reflect.DeepEqual(order, wantOrder) {
		t.Fatalf("event order %v, want %v", order, wantOrder)
	}
	if text.String() != toolReply.Text {
		t.Errorf("text %q", text.String())
	}
	if len(tools) != 2 || tools[0].ID != "call_a" || tools[0].Name != "read" || string(tools[0].Input) != toolReply.ToolCalls[0].Input || string(tools[1].Input) != `{"path":"b.txt"}` {
		t.Fatalf("tool events %+v", tools)
	}
	end := evs[len(evs)-1]
	if end.StopReason != llm.StopToolUse {
		t.Errorf("stop %q", end.StopReason)
	}
	if *end.Usage != toolReply.Usage {
		t.Errorf("usage %+v, want %+v", *end.Usage, toolReply.Usage)
	}
	if m := end.Message; m.Text() != toolReply.Text || len(m.ToolUses()) != 2 || len(m.Content) != 3 {
		t.Fatalf("message %+v", m)
	}
	body := s.Requests()[0].JSON()
	if opts, _ := body["stream_options"].(map[string]any); opts["include_usage"] != true {
		t.Fatalf("stream_options.include_usage not asked for: %v", body["stream_options"])
	}
}

func TestThe_first_tool_call_is_emitted_as_soon_as_the_second_starts(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "a", Input: `{"x":1}`}, {Name: "b", Input: `{"y":2}`}}, Chunks: 2, StallAfter: 6})
	p, _ := newProvider(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var first *llm.ContentBlock
	for ev, err := range p.Stream(ctx, llmtest.UserRequest("x")) {
		if err != nil {
			t.Fatalf("stream ended before the first call was emitted: %v", err)
		}
		if ev.Type == llm.EventToolUse {
			first = ev.Block
			break // the stream is stalled inside the second call's arguments
		}
	}
	if first == nil || first.Name != "a" || string(first.Input) != `{"x":1}` {
		t.Fatalf("first call %+v", first)
	}
}

func TestComplete_returns_the_same_message_without_streaming(t *testing.T) {
	s := llmtest.NewOpenAI(t, toolReply)
	p, _ := newProvider(t, s)
	m, stop, usage, err := p.Complete(context.Background(), llmtest.UserRequest("read a and b"))
	if err != nil {
		t.Fatal(err)
	}
	if stop != llm.StopToolUse || usage != toolReply.Usage || len(m.ToolUses()) != 2 || m.Text() != toolReply.Text {
		t.Fatalf("stop %q usage %+v message %+v", stop, usage, m)
	}
	if s.Requests()[0].JSON()["stream"] == true {
		t.Fatal("Complete must not stream")
	}
}

func TestLength_finish_is_a_max_tokens_stop_not_an_error(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Reply{Text: "half an ans", StopReason: llm.StopMaxTokens}, llmtest.Reply{Text: "half", StopReason: llm.StopMaxTokens})
	p, _ := newProvider(t, s)
	evs, err := llmtest.Collect(p.Stream(context.Background(), llmtest.UserRequest("long")))
	if err != nil {
		t.Fatal(err)
	}
	if end := evs[len(evs)-1]; end.StopReason != llm.StopMaxTokens || end.Message.Text() != "half an ans" {
		t.Fatalf("end %+v", end)
	}
	if _, stop, _, err := p.Complete(context.Background(), llmtest.UserRequest("long")); err != nil || stop != llm.StopMaxTokens {
		t.Fatalf("complete: stop %q err %v", stop, err)
	}
}

func TestContext_length_exceeded_is_classified_as_overflow(t *testing.T) {
	s := llmtest.NewOpenAI(t,
		llmtest.Reply{Error: llmtest.PromptTooLong()},
		// vLLM says it without the code.
		llmtest.Reply{Error: &llmtest.APIError{Status: 400, Type: "BadRequestError", Message: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."}},
	)
	p, w := newProvider(t, s)
	_, err := llmtest.Collect(p.Stream(context.Background(), llmtest.UserRequest("huge")))
	var e *llm.Error
	if !llm.IsOverflow(err) || !errors.As(err, &e) || e.StatusCode != 400 || !strings.Contains(err.Error(), "maximum context length") {
		t.Fatalf("stream: want overflow naming the server's message, got %v", err)
	}
	if _, _, _, err := p.Complete(context.Background(), llmtest.UserRequest("huge")); !llm.IsOverflow(err) {
		t.Fatalf("complete: want overflow, got %v", err)
	}
	if len(w.All()) != 0 {
		t.Fatal("an overflow must not be retried")
	}
}

func TestRate_limit_is_retried_after_the_wait_the_server_asks_for(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Reply{Error: &llmtest.APIError{Status: 429, RetryAfterMS: "20"}}, llmtest.Reply{Text: "ok"})
	p, w := newProvider(t, s)
	evs, err := llmtest.Collect(p.Stream(context.Background(), llmtest.UserRequest("x")))
	if err != nil {
		t.Fatal(err)
	}
	if evs[len(evs)-1].Message.Text() != "ok" {
		t.Fatalf("end %+v", evs[len(evs)-1])
	}
	if got := w.All(); len(got) != 1 || got[0] != 20*time.Millisecond {
		t.Fatalf("waits %v, want [20ms] from retry-after-ms", got)
	}
}

func TestServer_errors_and_503s_are_retried_then_bounded(t *testing.T) {
	s := llmtest.NewOpenAI(t,
		llmtest.Reply{Error: llmtest.ServerError()},
		llmtest.Reply{Error: &llmtest.APIError{Status: 503}},
		llmtest.Reply{Text: "x", StreamError: llmtest.ServerError()}, // an in-stream error line
		llmtest.Reply{Text: "finally"},
	)
	p, w := newProvider(t, s)
	evs, err := llmtest.Collect(p.Stream(context.Background(), llmtest.UserRequest("x")))
	if err != nil {
		t.Fatal(err)
	}
	if evs[len(evs)-1].Message.Text() != "finally" || len(w.All()) != 3 {
		t.Fatalf("text %q after %d retries", evs[len(evs)-1].Message.Text(), len(w.All()))
	}
	s.Enqueue(llmtest.Reply{Error: llmtest.ServerError()}, llmtest.Reply{Error: llmtest.ServerError()})
	p2, _ := newProvider(t, s, func(c *openai.Config) { c.Retry.MaxRetries = 1 })
	_, _, _, err = p2.Complete(context.Background(), llmtest.UserRequest("x"))
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.ErrKindModel || e.StatusCode != 500 || s.Pending() != 0 {
		t.Fatalf("want a model error with HTTP 500 after 2 attempts, got %v (pending %d)", err, s.Pending())
	}
}

func TestCancellation_mid_stream_returns_promptly_with_the_context_error(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Reply{Text: "one two three four five six", Chunks: 6, StallAfter: 3})
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

func TestRequest_view_sends_tool_results_as_tool_messages_and_leaves_the_history_untouched(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Reply{Text: "done"})
	p, _ := newProvider(t, s, func(c *openai.Config) { c.LegacyMaxTokens = true })
	history := []llm.Message{
		llm.UserText("list files"),
		{Role: llm.RoleAssistant, Content: []llm.ContentBlock{
			{Type: llm.BlockThinking, Text: "ls it", Signature: "sig"},
			{Type: llm.BlockText, Text: "Listing."},
			{Type: llm.BlockToolUse, ID: "call_1", Name: "ls", Input: json.RawMessage(`{"dir":"."}`)},
			{Type: llm.BlockToolUse, ID: "call_2", Name: "cat", Input: json.RawMessage(`{"f":"x"}`)},
		}},
		{Role: llm.RoleUser, Kind: llm.KindNotice, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "[background job notice] job 1 exited 0."}}},
		{Role: llm.RoleUser, Content: []llm.ContentBlock{
			{Type: llm.BlockToolResult, ToolUseID: "call_1", Content: "a.txt"},
			{Type: llm.BlockToolResult, ToolUseID: "call_2", Content: "no such file", IsError: true},
		}},
	}
	before, _ := json.Marshal(history)
	req := llm.CompletionRequest{System: []string{"You are jetway.", "", "Now: 12:00"}, Messages: history, MaxTokens: 300,
		Tools: []llm.ToolSpec{{Name: "ls", Description: "list", InputSchema: json.RawMessage(`{"type":"object","properties":{"dir":{"type":"string"}}}`)}}}
	if _, _, _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatal(err) // the fake API refuses unanswered tool calls, like the real one
	}
	after, _ := json.Marshal(history)
	if string(before) != string(after) {
		t.Fatalf("the caller's history was modified")
	}
	var body struct {
		Messages []struct {
			Role       string            `json:"role"`
			Content    any               `json:"content"`
			ToolCallID string            `json:"tool_call_id"`
			ToolCalls  []json.RawMessage `json:"tool_calls"`
		} `json:"messages"`
		MaxTokens int              `json:"max_tokens"`
		Tools     []map[string]any `json:"tools"`
	}
	if err := json.Unmarshal(s.Requests()[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range body.Messages {
		roles = append(roles, m.Role)
	}
	want := []string{"system", "user", "assistant", "tool", "tool", "user"}
	if !reflect.DeepEqual(roles, want) {
		t.Fatalf("roles %v, want %v\n%s", roles, want, s.Requests()[0].Body)
	}
	if body.Messages[0].Content != "You are jetway.\n\nNow: 12:00" || body.Messages[2].Content != "Listing." || len(body.Messages[2].ToolCalls) != 2 {
		t.Fatalf("system/assistant %v / %v", body.Messages[0].Content, body.Messages[2])
	}
	if body.Messages[4].ToolCallID != "call_2" || body.Messages[4].Content != "error: no such file" {
		t.Fatalf("tool message %+v", body.Messages[4])
	}
	if strings.Contains(string(s.Requests()[0].Body), "ls it") {
		t.Fatal("thinking must not be sent")
	}
	if body.MaxTokens != 300 || len(body.Tools) != 1 {
		t.Fatalf("max_tokens %d tools %v", body.MaxTokens, body.Tools)
	}
}

func TestName_says_which_server_answers(t *testing.T) {
	s := llmtest.NewOpenAI(t)
	p, _ := newProvider(t, s)
	if !strings.HasPrefix(p.Name(), "openai-compatible gpt-test at 127.0.0.1:") {
		t.Fatalf("name %q", p.Name())
	}
	p, err := openai.New(openai.Config{APIKey: "k", Model: "gpt-5"})
	if err != nil || p.Name() != "openai gpt-5" {
		t.Fatalf("name %q err %v", p.Name(), err)
	}
	if _, err := openai.New(openai.Config{Model: "m"}); err == nil {
		t.Fatal("a config without API key must be refused")
	}
}

func BenchmarkStream(b *testing.B) {
	s := llmtest.NewOpenAI(b)
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
// append it.
func TestStream_body_opens_with_stream_true_once(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Reply{Text: "one"}, llmtest.Reply{Text: "two"})
	p, _ := newProvider(t, s)
	req := llm.CompletionRequest{MaxTokens: 1024, System: []string{"be brief"}, Messages: []llm.Message{llm.UserText("hi")}}
	for _, err := range p.Stream(context.Background(), req) {
		if err != nil {
			t.Fatal(err)
		}
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
}
