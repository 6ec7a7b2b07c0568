package llmtest

import (
	"encoding/base64"
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

// Anthropic is a fake Anthropic Messages API: `POST /v1/messages`, streamed
// as server-sent events exactly as Anthropic documents them (message_start,
// ping, content_block_start/delta/stop with text_delta, thinking_delta,
// signature_delta and input_json_delta in fragments, message_delta with the
// stop reason and usage, message_stop, and the error event) or as one JSON
// message. Point an SDK at URL() as its base URL.
//
// Like the real API it refuses a request without an API key or
// anthropic-version header, a tool_use without its tool_result in the next
// message, a tool_result whose tool_use is not in the previous message, an
// empty text block, more than four cache_control breakpoints, and an image
// outside a user message, of a media type it does not take, over 5 MB of
// base64 or not base64 at all, so tests see the shaping mistakes the real
// API would refuse, in its words.
type Anthropic struct {
	server
	ids atomic.Int64
}

// NewAnthropic starts a fake Anthropic server playing replies, closed when
// the test ends.
func NewAnthropic(tb testing.TB, replies ...Reply) *Anthropic {
	s := StartAnthropic(replies...)
	registerCleanup(tb, &s.server)
	return s
}

// StartAnthropic starts a fake Anthropic server playing replies; the caller
// closes it.
func StartAnthropic(replies ...Reply) *Anthropic {
	s := &Anthropic{}
	s.replies = replies
	s.start(http.HandlerFunc(s.serve))
	return s
}

// URL is the base URL to give the SDK (without /v1).
func (s *Anthropic) URL() string { return s.srv.URL }

func (s *Anthropic) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, err := readBody(r)
	if err != nil {
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		s.writeError(w, &APIError{Status: http.StatusNotFound, Type: "not_found_error", Message: "Not found: " + r.Method + " " + r.URL.Path})
		return
	}
	if !s.record(at, r, body) {
		defer releaseBody(body)
	}
	if r.Header.Get("x-api-key") == "" && r.Header.Get("authorization") == "" {
		s.writeError(w, &APIError{Status: http.StatusUnauthorized, Message: "x-api-key header is required"})
		return
	}
	if r.Header.Get("anthropic-version") == "" {
		s.writeError(w, &APIError{Status: http.StatusBadRequest, Message: "anthropic-version: header is required"})
		return
	}
	var req anthropicRequest
	if !s.checking() {
		err = peek(body, map[string]any{"model": &req.Model, "stream": &req.Stream})
	} else if err = json.Unmarshal(body, &req); err == nil {
		if msg := req.validate(); msg != "" {
			s.writeError(w, &APIError{Status: http.StatusBadRequest, Message: msg})
			return
		}
	}
	if err != nil {
		s.writeError(w, &APIError{Status: http.StatusBadRequest, Message: "There was an error parsing the body: " + err.Error()})
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
	id := fmt.Sprintf("msg_llmtest_%d", s.ids.Add(1))
	if req.Stream {
		s.stream(w, r, id, req.Model, rep)
		return
	}
	w.Header().Set("content-type", "application/json")
	w.Header().Set("request-id", "req_"+id)
	_, _ = w.Write(mustJSON(anthropicMessage(id, req.Model, rep)))
}

func (s *Anthropic) writeError(w http.ResponseWriter, e *APIError) {
	writeErrorHeaders(w, e)
	w.Header().Set("request-id", "req_llmtest_error")
	w.WriteHeader(e.Status)
	_, _ = io.WriteString(w, anthropicErrorBody(e))
}

func anthropicErrorBody(e *APIError) string {
	if e.Body != "" {
		return e.Body
	}
	typ, msg := e.Type, e.Message
	if typ == "" {
		switch e.Status {
		case 400:
			typ = "invalid_request_error"
		case 401:
			typ = "authentication_error"
		case 403:
			typ = "permission_error"
		case 404:
			typ = "not_found_error"
		case 413:
			typ = "request_too_large"
		case 429:
			typ = "rate_limit_error"
		case 529:
			typ = "overloaded_error"
		default:
			typ = "api_error"
		}
	}
	if msg == "" {
		switch {
		case e.Code == "context_length_exceeded":
			msg = "prompt is too long: 210000 tokens > 200000 maximum"
		case e.Code == codeInvalidImage:
			msg = "Could not process image"
		case e.Code == codeImageTooLarge:
			msg = "messages.0.content.0.image.source.base64: image exceeds 5 MB maximum: 5404560 bytes > 5242880 bytes"
		case e.Code == codeImageDimensions:
			msg = "messages.0.content.1.image.source.base64.data: At least one of the image dimensions exceed max allowed size: 8000 pixels"
		case e.Status == 429:
			msg = "Number of request tokens has exceeded your per-minute rate limit"
		case e.Status == 529:
			msg = "Overloaded"
		default:
			msg = http.StatusText(e.Status)
		}
	}
	body := map[string]any{"type": typ, "message": msg}
	if e.Code == codeImageDimensions {
		body["details"] = map[string]any{"error_code": codeImageDimensions, "max_side_length_pixels": 8000, "paths": []string{"messages.0.content.1"}}
	}
	return string(mustJSON(map[string]any{
		"type":       "error",
		"error":      body,
		"request_id": "req_llmtest_error",
	}))
}

func anthropicUsage(rep Reply, output int) map[string]any {
	return map[string]any{
		"input_tokens":                rep.Usage.InputTokens,
		"cache_creation_input_tokens": rep.Usage.CacheCreationInputTokens,
		"cache_read_input_tokens":     rep.Usage.CacheReadInputTokens,
		"output_tokens":               output,
	}
}

func anthropicMessage(id, model string, rep Reply) map[string]any {
	var content []any
	if rep.RedactedThinking != "" {
		content = append(content, map[string]any{"type": "redacted_thinking", "data": rep.RedactedThinking})
	}
	if rep.Thinking != "" {
		content = append(content, map[string]any{"type": "thinking", "thinking": rep.Thinking, "signature": rep.Signature})
	}
	if rep.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": rep.Text})
	}
	for i, tc := range rep.ToolCalls {
		content = append(content, map[string]any{"type": "tool_use", "id": toolID("toolu_llmtest_", i, tc), "name": tc.Name, "input": json.RawMessage(toolInput(tc))})
	}
	if content == nil {
		content = []any{}
	}
	return map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model,
		"content":     content,
		"stop_reason": string(stopReason(rep)), "stop_sequence": nil,
		"usage": anthropicUsage(rep, rep.Usage.OutputTokens),
	}
}

// stream writes rep as Anthropic's server-sent events.
func (s *Anthropic) stream(w http.ResponseWriter, r *http.Request, id, model string, rep Reply) {
	w.Header().Set("content-type", "text/event-stream")
	w.Header().Set("cache-control", "no-cache")
	w.Header().Set("request-id", "req_"+id)
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	sent := 0
	emit := func(event string, data any) bool {
		if rep.StallAfter > 0 && sent >= rep.StallAfter {
			<-r.Context().Done()
			return false
		}
		if sent > 0 && !wait(r, rep.ChunkDelay) {
			return false
		}
		sent++
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, mustJSON(data)); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}

	start := map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": anthropicUsage(rep, 1),
	}
	if !emit("message_start", map[string]any{"type": "message_start", "message": start}) {
		return
	}
	if !emit("ping", map[string]any{"type": "ping"}) {
		return
	}
	if rep.StreamError != nil {
		var e any
		_ = json.Unmarshal([]byte(anthropicErrorBody(rep.StreamError)), &e)
		emit("error", e)
		return
	}
	index := 0
	block := func(startBlock map[string]any, deltas []map[string]any) bool {
		if !emit("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": startBlock}) {
			return false
		}
		for _, d := range deltas {
			if !emit("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": d}) {
				return false
			}
		}
		ok := emit("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
		return ok
	}
	if rep.RedactedThinking != "" {
		if !block(map[string]any{"type": "redacted_thinking", "data": rep.RedactedThinking}, nil) {
			return
		}
	}
	if rep.Thinking != "" {
		var deltas []map[string]any
		for _, part := range split(rep.Thinking, rep.Chunks) {
			deltas = append(deltas, map[string]any{"type": "thinking_delta", "thinking": part})
		}
		deltas = append(deltas, map[string]any{"type": "signature_delta", "signature": rep.Signature})
		if !block(map[string]any{"type": "thinking", "thinking": "", "signature": ""}, deltas) {
			return
		}
	}
	if rep.Text != "" {
		var deltas []map[string]any
		for _, part := range split(rep.Text, rep.Chunks) {
			deltas = append(deltas, map[string]any{"type": "text_delta", "text": part})
		}
		if !block(map[string]any{"type": "text", "text": ""}, deltas) {
			return
		}
	}
	for i, tc := range rep.ToolCalls {
		var deltas []map[string]any
		for _, part := range split(toolInput(tc), rep.Chunks) {
			deltas = append(deltas, map[string]any{"type": "input_json_delta", "partial_json": part})
		}
		if !block(map[string]any{"type": "tool_use", "id": toolID("toolu_llmtest_", i, tc), "name": tc.Name, "input": map[string]any{}}, deltas) {
			return
		}
	}
	if !emit("message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": string(stopReason(rep)), "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": rep.Usage.OutputTokens},
	}) {
		return
	}
	emit("message_stop", map[string]any{"type": "message_stop"})
}

// anthropicRequest is the part of a Messages API request the server checks.
type anthropicRequest struct {
	Model     string `json:"model"`
	MaxTokens int    `json:"max_tokens"`
	Stream    bool   `json:"stream"`
	System    []struct {
		Text         string          `json:"text"`
		CacheControl json.RawMessage `json:"cache_control"`
	} `json:"system"`
	Messages []struct {
		Role    string `json:"role"`
		Content []struct {
			Type         string          `json:"type"`
			Text         *string         `json:"text"`
			ID           string          `json:"id"`
			ToolUseID    string          `json:"tool_use_id"`
			CacheControl json.RawMessage `json:"cache_control"`
			Source       *imageSource    `json:"source"`
			// Content is a tool_result's: a string or a list of blocks.
			Content json.RawMessage `json:"content"`
		} `json:"content"`
	} `json:"messages"`
	Tools []struct {
		CacheControl json.RawMessage `json:"cache_control"`
	} `json:"tools"`
}

// validate returns the message the real API would refuse the request with,
// or "" if it is acceptable.
func (req *anthropicRequest) validate() string {
	if req.Model == "" {
		return "model: Field required"
	}
	if req.MaxTokens <= 0 {
		return "max_tokens: Field required"
	}
	if len(req.Messages) == 0 {
		return "messages: at least one message is required"
	}
	breakpoints := 0
	for _, s := range req.System {
		if len(s.CacheControl) > 0 {
			breakpoints++
		}
	}
	for _, t := range req.Tools {
		if len(t.CacheControl) > 0 {
			breakpoints++
		}
	}
	var pendingUses []string
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		if len(m.Content) == 0 {
			return fmt.Sprintf("messages.%d: all messages must have non-empty content", i)
		}
		var uses, results []string
		for j, b := range m.Content {
			if len(b.CacheControl) > 0 {
				breakpoints++
			}
			switch b.Type {
			case "text":
				if b.Text == nil || *b.Text == "" {
					return "messages: text content blocks must be non-empty"
				}
			case "tool_use":
				uses = append(uses, b.ID)
			case "tool_result":
				results = append(results, b.ToolUseID)
				var inner []struct {
					Type   string       `json:"type"`
					Source *imageSource `json:"source"`
				}
				if len(b.Content) > 0 && b.Content[0] == '[' {
					if err := json.Unmarshal(b.Content, &inner); err != nil {
						return fmt.Sprintf("messages.%d.content.%d.tool_result.content: %v", i, j, err)
					}
				}
				for k, c := range inner {
					if c.Type != "image" {
						continue
					}
					if m.Role != "user" {
						return fmt.Sprintf("messages.%d.content.%d: images are only allowed in user messages", i, j)
					}
					if msg := c.Source.validate(fmt.Sprintf("messages.%d.content.%d.tool_result.content.%d.image.source", i, j, k)); msg != "" {
						return msg
					}
				}
			case "image":
				if m.Role != "user" {
					return fmt.Sprintf("messages.%d.content.%d: images are only allowed in user messages", i, j)
				}
				if msg := b.Source.validate(fmt.Sprintf("messages.%d.content.%d.image.source", i, j)); msg != "" {
					return msg
				}
			}
		}
		if len(pendingUses) > 0 {
			var missing []string
			for _, id := range pendingUses {
				if m.Role != "user" || !slices.Contains(results, id) {
					missing = append(missing, id)
				}
			}
			if len(missing) > 0 {
				return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, strings.Join(missing, ", "))
			}
		}
		for _, id := range results {
			if !slices.Contains(pendingUses, id) {
				return fmt.Sprintf("messages.%d.content: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, id)
			}
		}
		pendingUses = uses
	}
	if breakpoints > 4 {
		return fmt.Sprintf("A maximum of 4 blocks with cache_control may be provided. Found %d.", breakpoints)
	}
	return ""
}

// imageSource is an image block's source.
type imageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

// maxImageBase64 is the API's limit on an image's base64 text.
const maxImageBase64 = 5 << 20

// validate returns the API's refusal of the source at path, or "".
func (src *imageSource) validate(path string) string {
	if src == nil {
		return path + ": Field required"
	}
	switch src.Type {
	case "base64":
		switch src.MediaType {
		case "image/jpeg", "image/png", "image/gif", "image/webp":
		default:
			return path + ".base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"
		}
		if len(src.Data) > maxImageBase64 {
			return fmt.Sprintf("%s.base64: image exceeds 5 MB maximum: %d bytes > %d bytes", path, len(src.Data), maxImageBase64)
		}
		if _, err := base64.StdEncoding.DecodeString(src.Data); err != nil || src.Data == "" {
			return "Could not process image"
		}
	case "url":
		if !strings.HasPrefix(src.URL, "https://") && !strings.HasPrefix(src.URL, "http://") {
			return path + ".url.url: Input should be a valid URL"
		}
	default:
		return path + ": Input tag '" + src.Type + "' found using 'type' does not match any of the expected tags: 'base64', 'url', 'file'"
	}
	return ""
}
