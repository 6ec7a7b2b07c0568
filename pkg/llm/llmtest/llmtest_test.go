package llmtest_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"

	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
)

func anthropicClient(s *llmtest.Anthropic) *anthropic.Client {
	c := anthropic.NewClient(aoption.WithoutEnvironmentDefaults(), aoption.WithAPIKey("test-key"),
		aoption.WithBaseURL(s.URL()), aoption.WithMaxRetries(0))
	return &c
}

func openaiClient(s *llmtest.OpenAI) *openai.Client {
	c := openai.NewClient(ooption.WithAPIKey("test-key"), ooption.WithBaseURL(s.URL()), ooption.WithMaxRetries(0))
	return &c
}

var full = llmtest.Reply{
	Thinking:  "Let me think about the weather.",
	Signature: "sig-abc",
	Text:      "I'll check both cities — ünïcode included.",
	ToolCalls: []llmtest.ToolCall{
		{ID: "toolu_1", Name: "weather", Input: `{"city":"Paris","units":"metric"}`},
		{ID: "toolu_2", Name: "weather", Input: `{"city":"Oslo"}`},
	},
	Usage:  llm.Usage{InputTokens: 100, OutputTokens: 42, CacheReadInputTokens: 7, CacheCreationInputTokens: 3},
	Chunks: 4,
}

func anthropicParams() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model: "claude-test", MaxTokens: 1024,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("weather?"))},
	}
}

func TestAnthropic_stream_decodes_through_the_official_SDK_accumulator(t *testing.T) {
	s := llmtest.NewAnthropic(t, full)
	c := anthropicClient(s)
	stream := c.Messages.NewStreaming(context.Background(), anthropicParams())
	defer stream.Close()
	var msg anthropic.Message
	types := map[string]int{}
	for stream.Next() {
		ev := stream.Current()
		types[ev.Type+"/"+ev.Delta.Type]++
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("accumulate: %v", err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if len(msg.Content) != 4 {
		t.Fatalf("want 4 blocks (thinking, text, 2 tool uses), got %d: %s", len(msg.Content), msg.RawJSON())
	}
	if got := msg.Content[0].Thinking; got != full.Thinking || msg.Content[0].Signature != "sig-abc" {
		t.Errorf("thinking = %q sig %q", got, msg.Content[0].Signature)
	}
	if got := msg.Content[1].Text; got != full.Text {
		t.Errorf("text = %q", got)
	}
	if got := string(msg.Content[2].Input); got != full.ToolCalls[0].Input || msg.Content[2].ID != "toolu_1" || msg.Content[2].Name != "weather" {
		t.Errorf("tool 1 = %s %s %s", msg.Content[2].ID, msg.Content[2].Name, got)
	}
	if got := string(msg.Content[3].Input); got != full.ToolCalls[1].Input {
		t.Errorf("tool 2 input = %s", got)
	}
	if msg.StopReason != anthropic.StopReasonToolUse {
		t.Errorf("stop = %q", msg.StopReason)
	}
	if msg.Usage.InputTokens != 100 || msg.Usage.OutputTokens != 42 || msg.Usage.CacheReadInputTokens != 7 || msg.Usage.CacheCreationInputTokens != 3 {
		t.Errorf("usage = %+v", msg.Usage)
	}
	if types["content_block_delta/input_json_delta"] < 4 || types["content_block_delta/text_delta"] < 2 || types["content_block_delta/signature_delta"] != 1 {
		t.Errorf("expected fragmented deltas, got %v", types)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || reqs[0].JSON()["stream"] != true {
		t.Fatalf("recorded %d requests, first %s", len(reqs), reqs[0].Body)
	}
}

func TestAnthropic_non_streaming_returns_one_message(t *testing.T) {
	s := llmtest.NewAnthropic(t, full)
	msg, err := anthropicClient(s).Messages.New(context.Background(), anthropicParams())
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 4 || msg.Content[1].Text != full.Text || string(msg.Content[3].Input) != full.ToolCalls[1].Input {
		t.Fatalf("message = %s", msg.RawJSON())
	}
	if msg.Usage.OutputTokens != 42 || msg.StopReason != "tool_use" {
		t.Fatalf("usage %+v stop %q", msg.Usage, msg.StopReason)
	}
}

func TestAnthropic_errors_carry_status_type_and_retry_after(t *testing.T) {
	s := llmtest.NewAnthropic(t,
		llmtest.Reply{Error: llmtest.PromptTooLong()},
		llmtest.Reply{Error: llmtest.RateLimited("7")},
		llmtest.Reply{Error: llmtest.Overloaded()},
	)
	c := anthropicClient(s)
	var apiErr *anthropic.Error

	_, err := c.Messages.New(context.Background(), anthropicParams())
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "prompt is too long") {
		t.Fatalf("overflow: %v", err)
	}
	_, err = c.Messages.New(context.Background(), anthropicParams())
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Response.Header.Get("retry-after") != "7" || apiErr.Type() != "rate_limit_error" {
		t.Fatalf("rate limit: %v", err)
	}
	_, err = c.Messages.New(context.Background(), anthropicParams())
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 529 || apiErr.Type() != "overloaded_error" {
		t.Fatalf("overloaded: %v", err)
	}
}

func TestAnthropic_in_stream_error_event_reaches_the_SDK(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "never", StreamError: llmtest.Overloaded()})
	stream := anthropicClient(s).Messages.NewStreaming(context.Background(), anthropicParams())
	defer stream.Close()
	for stream.Next() {
	}
	var apiErr *anthropic.Error
	if err := stream.Err(); !errors.As(err, &apiErr) || apiErr.Type() != "overloaded_error" {
		t.Fatalf("want overloaded_error, got %v", err)
	}
}

func TestAnthropic_refuses_a_tool_use_without_its_result(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "unused"})
	p := anthropicParams()
	p.Messages = append(p.Messages,
		anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_x", map[string]any{}, "ls")),
		anthropic.NewUserMessage(anthropic.NewTextBlock("and?")),
	)
	_, err := anthropicClient(s).Messages.New(context.Background(), p)
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "toolu_x") {
		t.Fatalf("want a 400 naming toolu_x, got %v", err)
	}
	if s.Pending() != 1 {
		t.Fatalf("a refused request must not consume the scripted reply")
	}
}

func TestEmpty_queue_answers_500_naming_the_problem(t *testing.T) {
	s := llmtest.NewAnthropic(t)
	_, err := anthropicClient(s).Messages.New(context.Background(), anthropicParams())
	if err == nil || !strings.Contains(err.Error(), "no scripted reply") {
		t.Fatalf("got %v", err)
	}
}

func TestLatency_and_chunk_delay_stop_when_the_client_leaves(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: strings.Repeat("x", 100), Chunks: 50, ChunkDelay: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	stream := anthropicClient(s).Messages.NewStreaming(ctx, anthropicParams())
	defer stream.Close()
	if !stream.Next() { // message_start arrives at once
		t.Fatalf("first event: %v", stream.Err())
	}
	cancel()
	for stream.Next() {
	}
	if err := stream.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
}

func openaiParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:         "gpt-test",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
}

func TestOpenAI_stream_decodes_through_the_official_SDK_accumulator(t *testing.T) {
	s := llmtest.NewOpenAI(t, full)
	stream := openaiClient(s).Chat.Completions.NewStreaming(context.Background(), openaiParams())
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	finished := 0
	chunks := 0
	for stream.Next() {
		chunks++
		acc.AddChunk(stream.Current())
		if _, ok := acc.JustFinishedToolCall(); ok {
			finished++
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if len(acc.Choices) != 1 {
		t.Fatalf("choices = %d", len(acc.Choices))
	}
	m := acc.Choices[0].Message
	if m.Content != full.Text {
		t.Errorf("content = %q", m.Content)
	}
	if len(m.ToolCalls) != 2 || m.ToolCalls[0].Function.Arguments != full.ToolCalls[0].Input || m.ToolCalls[1].Function.Arguments != full.ToolCalls[1].Input || m.ToolCalls[1].ID != "toolu_2" {
		t.Errorf("tool calls = %+v", m.ToolCalls)
	}
	if acc.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("finish = %q", acc.Choices[0].FinishReason)
	}
	if acc.Usage.PromptTokens != 110 || acc.Usage.CompletionTokens != 42 || acc.Usage.PromptTokensDetails.CachedTokens != 7 {
		t.Errorf("usage = %+v", acc.Usage)
	}
	if chunks < 10 {
		t.Errorf("expected fragmented chunks, got %d", chunks)
	}
}

func TestOpenAI_non_streaming_and_errors(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Reply{Text: "hi", StopReason: llm.StopMaxTokens}, llmtest.Reply{Error: llmtest.PromptTooLong()})
	c := openaiClient(s)
	res, err := c.Chat.Completions.New(context.Background(), openaiParams())
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Message.Content != "hi" || res.Choices[0].FinishReason != "length" {
		t.Fatalf("completion = %s", res.RawJSON())
	}
	_, err = c.Chat.Completions.New(context.Background(), openaiParams())
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "context_length_exceeded" {
		t.Fatalf("overflow: %v", err)
	}
}

func TestOpenAI_refuses_a_tool_call_without_a_tool_message(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Reply{Text: "unused"})
	p := openaiParams()
	p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
		ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
			ID: "call_x", Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "ls", Arguments: "{}"},
		}}},
	}}, openai.UserMessage("and?"))
	_, err := openaiClient(s).Chat.Completions.New(context.Background(), p)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "call_x") {
		t.Fatalf("want a refusal naming call_x, got %v", err)
	}
}

// A benchmark's fake reads only the head of a request: it answers one the
// checks would refuse, from the model and stream fields alone, and the
// observer sees every request with its arrival time.
func TestAnthropic_unchecked_answers_from_the_head_and_the_observer_sees_each_request(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "refused"}, llmtest.Reply{Text: "answered"})
	var seen []string
	var ats []time.Time
	s.Observe(func(at time.Time, body []byte) {
		seen = append(seen, string(body))
		ats = append(ats, at)
	})
	p := anthropicParams()
	p.Messages = append(p.Messages,
		anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_x", map[string]any{}, "ls")),
		anthropic.NewUserMessage(anthropic.NewTextBlock("and?")),
	)
	before := time.Now()
	if _, err := anthropicClient(s).Messages.New(context.Background(), p); err == nil {
		t.Fatal("a checking server answered a tool use without its result")
	}
	s.SetChecking(false)
	stream := anthropicClient(s).Messages.NewStreaming(context.Background(), p)
	msg := anthropic.Message{}
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("unchecked server refused: %v", err)
	}
	if msg.Model != "claude-test" || len(msg.Content) != 1 || msg.Content[0].Text != "refused" {
		t.Fatalf("reply = %+v, want the first scripted reply, for model claude-test", msg)
	}
	if len(seen) != 2 || !strings.Contains(seen[1], "toolu_x") || ats[0].Before(before) || ats[1].Before(ats[0]) {
		t.Fatalf("observer saw %d requests at %v", len(seen), ats)
	}
}

func TestOpenAI_unchecked_reads_model_stream_and_usage_option(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Reply{Text: "hi", Usage: llm.Usage{InputTokens: 3, OutputTokens: 1}})
	params := openai.ChatCompletionNewParams{
		Model:         "gpt-test",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi"), openai.ToolMessage("a result nobody asked for", "call_zz")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if _, err := openaiClient(s).Chat.Completions.New(context.Background(), params); err == nil {
		t.Fatal("a checking server answered a tool message without its call")
	}
	s.SetChecking(false)
	stream := openaiClient(s).Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Model != "gpt-test" || len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "hi" || acc.Usage.CompletionTokens != 1 {
		t.Fatalf("completion = %+v", acc.ChatCompletion)
	}
}

// Unchecked, a body that is not a JSON object is still refused, in the
// API's words, with what was wrong.
func TestUnchecked_refuses_a_body_that_is_not_an_object(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "unused"})
	s.SetChecking(false)
	for body, want := range map[string]string{`[1]`: "starts with [", `{"model":`: "model", ``: "EOF"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL()+"/v1/messages", strings.NewReader(body))
		req.Header.Set("x-api-key", "k")
		req.Header.Set("anthropic-version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), "error parsing the body") || !strings.Contains(string(raw), want) {
			t.Errorf("body %q: %d %s, want a 400 naming %q", body, resp.StatusCode, raw, want)
		}
	}
	if s.Pending() != 1 {
		t.Fatal("a refused request consumed the scripted reply")
	}
}
