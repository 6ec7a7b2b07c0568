package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// OpenAI is a fake OpenAI Chat Completions API: `POST /v1/chat/completions`,
// streamed as `data: {chunk}` lines whose choices[0].delta carries content
// and tool_calls in fragments (a tool call's id and name first, then its
// arguments piece by piece), a finish_reason chunk, a final usage chunk with
// empty choices when stream_options.include_usage is set, and `data: [DONE]`;
// or one chat.completion JSON object. Point an SDK at URL() (which ends in
// /v1) as its base URL.
//
// Like the real API it refuses a request without a bearer token, an
// assistant tool call without a tool message answering it, a tool
// message that answers no call, and an image part in a message whose role
// is not user (tool messages cannot carry images).
type OpenAI struct {
	server
	ids atomic.Int64
}

// NewOpenAI starts a fake OpenAI server playing replies, closed when the
// test ends.
func NewOpenAI(tb testing.TB, replies ...Reply) *OpenAI {
	s := StartOpenAI(replies...)
	registerCleanup(tb, &s.server)
	return s
}

// StartOpenAI starts a fake OpenAI server playing replies; the caller
// closes it.
func StartOpenAI(replies ...Reply) *OpenAI {
	s := &OpenAI{}
	s.replies = replies
	s.start(http.HandlerFunc(s.serve))
	return s
}

// URL is the base URL to give the SDK, ending in /v1.
func (s *OpenAI) URL() string { return s.srv.URL + "/v1" }

func (s *OpenAI) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, err := readBody(r)
	if err != nil {
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		s.writeError(w, &APIError{Status: http.StatusNotFound, Message: "Invalid URL (" + r.Method + " " + r.URL.Path + ")"})
		return
	}
	if !s.record(at, r, body) {
		defer releaseBody(body)
	}
	if !strings.HasPrefix(r.Header.Get("authorization"), "Bearer ") {
		s.writeError(w, &APIError{Status: http.StatusUnauthorized, Message: "You didn't provide an API key."})
		return
	}
	var req openaiRequest
	if !s.checking() {
		err = peek(body, map[string]any{"model": &req.Model, "stream": &req.Stream, "stream_options": &req.StreamOptions})
	} else if err = json.Unmarshal(body, &req); err == nil {
		if msg := req.validate(); msg != "" {
			s.writeError(w, &APIError{Status: http.StatusBadRequest, Message: msg})
			return
		}
	}
	if err != nil {
		s.writeError(w, &APIError{Status: http.StatusBadRequest, Message: "We could not parse the JSON body of your request: " + err.Error()})
		return
	}
	rep, ok := s.next(body)
	if !ok {
		s.writeError(w, &APIError{Status: http.StatusInternalServerError, Message: "llmtest: no scripted reply left for this request"})
		return
	}
	if !wait(r, rep.Latency) {
		return
	}
	if rep.Error != nil {
		s.writeError(w, rep.Error)
		return
	}
	id := fmt.Sprintf("chatcmpl-llmtest%d", s.ids.Add(1))
	if req.Stream {
		s.stream(w, r, id, req.Model, req.StreamOptions.IncludeUsage, rep)
		return
	}
	w.Header().Set("content-type", "application/json")
	_, _ = w.Write(mustJSON(openaiCompletion(id, req.Model, rep)))
}

func (s *OpenAI) writeError(w http.ResponseWriter, e *APIError) {
	writeErrorHeaders(w, e)
	w.WriteHeader(e.Status)
	_, _ = io.WriteString(w, openaiErrorBody(e))
}

func openaiErrorBody(e *APIError) string {
	if e.Body != "" {
		return e.Body
	}
	typ, msg := e.Type, e.Message
	var code, param any
	if e.Code != "" {
		code = e.Code
	}
	switch {
	case e.Code == codeImageDimensions:
		code = codeInvalidImage
		if msg == "" {
			msg = "Invalid image."
		}
	case e.Code == codeInvalidImage && msg == "":
		msg = "Invalid image."
	case e.Code == codeImageTooLarge && msg == "":
		msg = "You uploaded an unsupported image. Please make sure your image is below 20 MB in size and is of one the following formats: ['png', 'jpeg', 'gif', 'webp']."
	case e.Code == "context_length_exceeded":
		param = "messages"
		if msg == "" {
			msg = "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages."
		}
	case e.Status == 429:
		if typ == "" {
			typ = "requests"
		}
		if code == nil {
			code = "rate_limit_exceeded"
		}
		if msg == "" {
			msg = "Rate limit reached for requests. Please try again later."
		}
	case e.Status >= 500:
		if typ == "" {
			typ = "server_error"
		}
		if msg == "" {
			msg = "The server had an error while processing your request. Sorry about that!"
		}
	}
	if typ == "" {
		typ = "invalid_request_error"
	}
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return string(mustJSON(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": param, "code": code}}))
}

func openaiFinish(rep Reply) string {
	switch stopReason(rep) {
	case "tool_use":
		return "tool_calls"
	case "max_tokens":
		return "length"
	default:
		return "stop"
	}
}

func openaiUsage(rep Reply) map[string]any {
	u := rep.Usage
	prompt := u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
	return map[string]any{
		"prompt_tokens":     prompt,
		"completion_tokens": u.OutputTokens,
		"total_tokens":      prompt + u.OutputTokens,
		"prompt_tokens_details": map[string]any{
			"cached_tokens": u.CacheReadInputTokens,
		},
	}
}

func openaiCompletion(id, model string, rep Reply) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if rep.Text != "" {
		msg["content"] = rep.Text
	}
	if len(rep.ToolCalls) > 0 {
		var calls []any
		for i, tc := range rep.ToolCalls {
			calls = append(calls, map[string]any{
				"id": toolID("call_llmtest_", i, tc), "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": toolInput(tc)},
			})
		}
		msg["tool_calls"] = calls
	}
	return map[string]any{
		"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": openaiFinish(rep)}},
		"usage":   openaiUsage(rep),
	}
}

// stream writes rep as Chat Completions chunks.
func (s *OpenAI) stream(w http.ResponseWriter, r *http.Request, id, model string, includeUsage bool, rep Reply) {
	w.Header().Set("content-type", "text/event-stream")
	w.Header().Set("cache-control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	created := time.Now().Unix()
	sent := 0
	send := func(line []byte) bool {
		if rep.StallAfter > 0 && sent >= rep.StallAfter {
			<-r.Context().Done()
			return false
		}
		if sent > 0 && !wait(r, rep.ChunkDelay) {
			return false
		}
		sent++
		if _, err := fmt.Fprintf(w, "data: %s\n\n", line); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	chunk := func(delta map[string]any, finish any) bool {
		c := map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"system_fingerprint": "fp_llmtest",
			"choices":            []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		}
		if includeUsage {
			c["usage"] = nil
		}
		return send(mustJSON(c))
	}
	if !chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil) {
		return
	}
	if rep.StreamError != nil {
		send([]byte(openaiErrorBody(rep.StreamError)))
		return
	}
	for _, part := range split(rep.Text, rep.Chunks) {
		if !chunk(map[string]any{"content": part}, nil) {
			return
		}
	}
	for i, tc := range rep.ToolCalls {
		head := map[string]any{"index": i, "id": toolID("call_llmtest_", i, tc), "type": "function", "function": map[string]any{"name": tc.Name, "arguments": ""}}
		if !chunk(map[string]any{"tool_calls": []any{head}}, nil) {
			return
		}
		for _, part := range split(toolInput(tc), rep.Chunks) {
			frag := map[string]any{"index": i, "function": map[string]any{"arguments": part}}
			if !chunk(map[string]any{"tool_calls": []any{frag}}, nil) {
				return
			}
		}
	}
	if !chunk(map[string]any{}, openaiFinish(rep)) {
		return
	}
	if includeUsage {
		if !send(mustJSON(map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"system_fingerprint": "fp_llmtest", "choices": []any{}, "usage": openaiUsage(rep),
		})) {
			return
		}
	}
	send([]byte("[DONE]"))
}

// openaiRequest is the part of a Chat Completions request the server checks.
type openaiRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []openaiMessage `json:"messages"`
}

// openaiMessage is the part of a message the server checks.
type openaiMessage struct {
	Role string `json:"role"`
	// Content is a string or a list of parts.
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID string `json:"id"`
	} `json:"tool_calls"`
}

func (req *openaiRequest) validate() string {
	if req.Model == "" {
		return "you must provide a model parameter"
	}
	if len(req.Messages) == 0 {
		return "[] is too short - 'messages'"
	}
	var open []string // calls of the last assistant message not yet answered
	for i := range req.Messages {
		m := &req.Messages[i]
		if msg := m.imageRefusal(i); msg != "" {
			return msg
		}
		if m.Role == "tool" {
			j := slices.Index(open, m.ToolCallID)
			if j < 0 {
				return fmt.Sprintf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'. (messages.[%d])", i)
			}
			open = slices.Delete(open, j, j+1)
			continue
		}
		if len(open) > 0 {
			return "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: " + strings.Join(open, ", ")
		}
		open = nil
		if m.Role == "assistant" {
			for _, tc := range m.ToolCalls {
				open = append(open, tc.ID)
			}
		}
	}
	return ""
}

// imageRefusal is the API's refusal of message i's image parts, or "": only
// user messages may carry images, and an image is an http(s) or data: URL.
func (m *openaiMessage) imageRefusal(i int) string {
	if len(m.Content) == 0 || m.Content[0] != '[' {
		return ""
	}
	var parts []struct {
		Type     string `json:"type"`
		ImageURL *struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return fmt.Sprintf("Invalid 'messages[%d].content': %v", i, err)
	}
	for _, p := range parts {
		if p.Type != "image_url" {
			continue
		}
		if m.Role != "user" {
			return fmt.Sprintf("Invalid 'messages[%d]'. Image URLs are only allowed for messages with role 'user', but this message with role '%s' contains an image URL.", i, m.Role)
		}
		if p.ImageURL == nil || !(strings.HasPrefix(p.ImageURL.URL, "data:image/") || strings.HasPrefix(p.ImageURL.URL, "https://") || strings.HasPrefix(p.ImageURL.URL, "http://")) {
			return "Invalid image."
		}
	}
	return ""
}
