// Package llmtest runs local fake model servers that speak the providers'
// real wire protocols — the Anthropic Messages API and the OpenAI Chat
// Completions API, streaming and not — so providers are tested and
// benchmarked through the official SDKs' own decoders, with no network and
// no keys.
//
// Each server plays a queue of scripted Replies (text, thinking, tool calls,
// stop reason, usage, latency, or an HTTP error exactly as the API returns
// it) and records every request it receives, so a test can assert what the
// model was sent. Image tests get real pictures (PNG, JPEG, GIF, BMP) and
// the APIs' image refusals (InvalidImage, ImageTooLarge,
// ImageDimensionsTooLarge), and the servers refuse the image shapes the
// real APIs refuse.
//
// A benchmark sharing a process with what it measures turns recording and
// the request checks off (SetRecording, SetChecking) and times arrivals
// with Observe.
package llmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"jetway/pkg/llm"
)

// Reply is one scripted answer of a fake server.
type Reply struct {
	// Thinking, with its Signature, is streamed first as a thinking block
	// (Anthropic only; the OpenAI server leaves it out as Chat Completions
	// has no thinking blocks).
	Thinking  string
	Signature string
	// RedactedThinking, when set, is sent as a redacted_thinking block with
	// this data before the thinking (Anthropic only).
	RedactedThinking string
	// Text is the answer text.
	Text string
	// ToolCalls are the tool calls of the answer, after the text.
	ToolCalls []ToolCall
	// StopReason is why the answer ended; empty means tool_use when there
	// are tool calls, end_turn otherwise. The OpenAI server maps it to its
	// finish_reason (end_turn→stop, tool_use→tool_calls, max_tokens→length).
	StopReason llm.StopReason
	// Usage is what the answer reports. OpenAI's prompt_tokens is
	// InputTokens plus the cache counts, cached_tokens is CacheReadInputTokens.
	Usage llm.Usage
	// Latency is waited before the response starts.
	Latency time.Duration
	// ChunkDelay is waited between streamed events, so a test can cancel a
	// call in the middle of its stream.
	ChunkDelay time.Duration
	// StallAfter, when positive, makes a stream stop after that many events
	// and hold the connection open until the client leaves: a hung stream,
	// for cancellation tests.
	StallAfter int
	// Chunks is how many fragments text, thinking and tool input JSON are
	// split into when streamed (default 3).
	Chunks int
	// Error, when set, answers with this HTTP error instead.
	Error *APIError
	// StreamError, when set on a streamed reply, is sent as an in-stream
	// error after the message starts (Anthropic's `error` event, an OpenAI
	// `data: {"error": ...}` line) and the stream ends there.
	StreamError *APIError
}

// ToolCall is a scripted tool call. Input is its complete JSON object.
type ToolCall struct {
	ID    string
	Name  string
	Input string
}

// APIError is an HTTP error answer. Each server renders it in its API's
// body shape; Body, when set, is sent verbatim instead.
type APIError struct {
	Status int
	// Type is the error type (Anthropic `error.type`, OpenAI `error.type`);
	// empty means the API's usual type for Status.
	Type string
	// Code is OpenAI's `error.code` (e.g. context_length_exceeded).
	Code    string
	Message string
	// RetryAfter and RetryAfterMS set the `retry-after` (seconds or an HTTP
	// date) and `retry-after-ms` headers.
	RetryAfter   string
	RetryAfterMS string
	Body         string
}

// RateLimited is a 429 that asks to retry after retryAfter ("" for none).
func RateLimited(retryAfter string) *APIError {
	return &APIError{Status: http.StatusTooManyRequests, RetryAfter: retryAfter}
}

// Overloaded is Anthropic's 529 overloaded_error.
func Overloaded() *APIError {
	return &APIError{Status: 529, Type: "overloaded_error", Message: "Overloaded"}
}

// ServerError is a 500 internal server error.
func ServerError() *APIError { return &APIError{Status: http.StatusInternalServerError} }

// PromptTooLong is the 400 each API answers when the prompt does not fit the
// model's context: Anthropic's "prompt is too long: N tokens > M maximum",
// OpenAI's context_length_exceeded.
func PromptTooLong() *APIError {
	return &APIError{Status: http.StatusBadRequest, Code: "context_length_exceeded"}
}

// Request is one request a server received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// JSON decodes the request body into a generic value for assertions.
func (r Request) JSON() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(r.Body, &m)
	return m
}

// ToolNames are the names of the tools a request offers, sorted, in either
// provider's shape (OpenAI nests them under "function").
func (r Request) ToolNames() []string {
	var names []string
	tools, _ := r.JSON()["tools"].([]any)
	for _, t := range tools {
		m, _ := t.(map[string]any)
		if fn, ok := m["function"].(map[string]any); ok {
			m = fn
		}
		if name, ok := m["name"].(string); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// ToolResults are an Anthropic request's tool_result blocks by tool_use
// id: each one's content as JSON, after "ERROR " when it is an error.
func (r Request) ToolResults() map[string]string {
	var body struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(r.Body, &body)
	out := map[string]string{}
	for _, m := range body.Messages {
		var blocks []struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			IsError   bool            `json:"is_error"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue // a string: no blocks
		}
		for _, b := range blocks {
			if b.Type != "tool_result" {
				continue
			}
			c := string(b.Content)
			if b.IsError {
				c = "ERROR " + c
			}
			out[b.ToolUseID] = c
		}
	}
	return out
}

// server is what both fake servers share: the reply queue, the recording
// and the HTTP server.
type server struct {
	srv *httptest.Server

	mu        sync.Mutex
	replies   []Reply
	fallback  *Reply
	requests  []Request
	noRecord  bool
	nRequests int
	observe   func(at time.Time, body []byte)
	// unchecked: read only the fields a reply is made from (SetChecking).
	unchecked bool
	router    func(body []byte) (Reply, bool)
	// inFlight counts requests being answered; peak is its highest.
	inFlight, peak int
	// answered, if set, hears every request once it is answered.
	answered func(start, end time.Time, body []byte)
	// conns counts the connections clients opened.
	conns int
}

// SetRouter has route answer a request before the queue does: for tests
// where several sessions call one server at once and the order of their
// requests is not fixed, route picks the reply from the request body
// (e.g. by the system prompt). When it reports false the queue answers.
func (s *server) SetRouter(route func(body []byte) (Reply, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.router = route
}

func (s *server) start(h http.Handler) {
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.inFlight++
		s.peak = max(s.peak, s.inFlight)
		answered := s.answered
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.inFlight--
			s.mu.Unlock()
		}()
		var body []byte
		if answered != nil {
			body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		start := time.Now()
		h.ServeHTTP(w, r)
		if answered != nil {
			answered(start, time.Now(), body)
		}
	}))
	s.srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
		}
	}
	s.srv.Start()
}

// Conns is how many connections clients have opened to the server: a
// client that keeps its connections for the next calls opens no more
// than it has calls at once.
func (s *server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// ObserveAnswered has f called with every request once it is answered, or
// its client has left: when the server began and stopped working on it,
// and its body. A test reads from it which calls were at the model at
// once. f runs on the request's goroutine; keep it short.
func (s *server) ObserveAnswered(f func(start, end time.Time, body []byte)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answered = f
}

// InFlight is how many requests are being answered now: a call counts
// until its reply is written or its client has left.
func (s *server) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

// PeakInFlight is the most requests ever answered at once: a test of one
// session reads "two runs at the model at once" from it.
func (s *server) PeakInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// Enqueue appends replies to the queue.
func (s *server) Enqueue(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies = append(s.replies, replies...)
}

// SetFallback makes r the answer whenever the queue is empty (benchmarks);
// without one an empty queue answers 500 naming the problem.
func (s *server) SetFallback(r Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fallback = &r
}

// SetRecording turns request recording on (the default) or off; a
// benchmark turns it off so memory stays flat.
func (s *server) SetRecording(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noRecord = !on
}

// Observe has f called with every request that arrives: when its handler
// began (its headers read) and its body. A benchmark times arrivals with
// it. f runs on the request's goroutine, before the reply; keep it short
// and never keep body.
func (s *server) Observe(f func(at time.Time, body []byte)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observe = f
}

// SetChecking turns the request checks on (the default) or off. Off, the
// server reads only the fields its reply is made from (the model, whether
// to stream) and refuses nothing: for a benchmark, where the fake shares a
// process with the system under measurement, and decoding every request in
// full, as a real provider does on its own machines, was a third of that
// process's CPU with a long history.
func (s *server) SetChecking(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unchecked = !on
}

// checking reports whether requests are checked in full.
func (s *server) checking() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.unchecked
}

// Requests returns a copy of the requests received so far, in order.
func (s *server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// RequestCount is how many requests arrived, recorded or not.
func (s *server) RequestCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nRequests
}

// Pending is how many scripted replies are still queued.
func (s *server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.replies)
}

// Disconnect breaks every open connection, as a network failure
// mid-stream would.
func (s *server) Disconnect() { s.srv.CloseClientConnections() }

// Close shuts the server down.
func (s *server) Close() { s.srv.Close() }

// record stores the request and shows it to the observer. It reports
// whether the body was kept.
func (s *server) record(at time.Time, r *http.Request, body []byte) (kept bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nRequests++
	if !s.noRecord {
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	}
	if s.observe != nil {
		s.observe(at, body)
	}
	return !s.noRecord
}

// readBody reads a request's body into one buffer of its announced length
// (io.ReadAll would grow one by doubling: at a long history, several
// copies of it), taken from bodies. Give it back with releaseBody once
// nothing holds it.
func readBody(r *http.Request) ([]byte, error) {
	if n := r.ContentLength; n > 0 && n <= 64<<20 {
		var body []byte
		if b, ok := bodies.Get().(*[]byte); ok && cap(*b) >= int(n) {
			body = (*b)[:n]
		} else {
			// Room to grow: a session's next request is a little longer.
			body = make([]byte, n, n+n/4)
		}
		_, err := io.ReadFull(r.Body, body)
		return body, err
	}
	return io.ReadAll(r.Body)
}

// bodies are request buffers a server that keeps no requests reads each
// body into again: a benchmark's fake shares its process with what it
// measures, and a fresh buffer per request of a long history was a third
// of that process's garbage.
var bodies sync.Pool

func releaseBody(b []byte) { bodies.Put(&b) }

// peek decodes the top-level fields of the JSON object body named in
// fields into the values they point to, and stops reading once each has
// been seen: the head of a request, not the history behind it.
func peek(body []byte, fields map[string]any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if tok != json.Delim('{') {
		return fmt.Errorf("not a JSON object: starts with %v", tok)
	}
	for left := len(fields); left > 0 && dec.More(); {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		into, ok := fields[key]
		if !ok {
			into = &skipped{}
		} else {
			left--
		}
		if err := dec.Decode(into); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	return nil
}

// skipped takes a JSON value and keeps nothing of it.
type skipped struct{}

func (*skipped) UnmarshalJSON([]byte) error { return nil }

// next takes the next reply: a request the API would refuse is answered
// with its refusal and takes none.
func (s *server) next(body []byte) (Reply, bool) {
	s.mu.Lock()
	route := s.router
	s.mu.Unlock()
	if route != nil {
		if rep, ok := route(body); ok {
			return rep, true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.replies) > 0 {
		rep := s.replies[0]
		s.replies = s.replies[1:]
		return rep, true
	}
	if s.fallback != nil {
		return *s.fallback, true
	}
	return Reply{}, false
}

func registerCleanup(tb testing.TB, s *server) {
	if tb != nil {
		tb.Helper()
		tb.Cleanup(s.Close)
	}
}

// wait sleeps d or until the request is gone; it reports whether the
// client is still there.
func wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// split cuts s into about n fragments on byte boundaries that keep UTF-8
// runes whole.
func split(s string, n int) []string {
	if n <= 0 {
		n = 3
	}
	if s == "" {
		return nil
	}
	size := (len(s) + n - 1) / n
	var out []string
	for len(s) > 0 {
		cut := min(size, len(s))
		for cut < len(s) && !isRuneStart(s[cut]) {
			cut++
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return out
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

func stopReason(r Reply) llm.StopReason {
	if r.StopReason != "" {
		return r.StopReason
	}
	if len(r.ToolCalls) > 0 {
		return llm.StopToolUse
	}
	return llm.StopEndTurn
}

func toolID(prefix string, i int, tc ToolCall) string {
	if tc.ID != "" {
		return tc.ID
	}
	return prefix + strconv.Itoa(i+1)
}

func toolInput(tc ToolCall) string {
	if tc.Input == "" {
		return "{}"
	}
	return tc.Input
}

func writeErrorHeaders(w http.ResponseWriter, e *APIError) {
	if e.RetryAfter != "" {
		w.Header().Set("retry-after", e.RetryAfter)
	}
	if e.RetryAfterMS != "" {
		w.Header().Set("retry-after-ms", e.RetryAfterMS)
	}
	w.Header().Set("content-type", "application/json")
}

// mustJSON marshals values built here from plain maps and strings.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("llmtest: marshal: %v", err))
	}
	return b
}
