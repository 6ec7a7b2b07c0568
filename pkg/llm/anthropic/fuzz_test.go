package anthropic_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"jetway/pkg/llm"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/llmtest"
	"jetway/pkg/llm/retry"
)

// sseServer answers every request with the body it is told to, as a
// text/event-stream, so the fuzzer drives the provider through the official
// SDK's own SSE decoder over real HTTP.
type sseServer struct {
	mu   sync.Mutex
	body []byte
	srv  *httptest.Server
}

func newSSEServer(tb testing.TB) *sseServer {
	s := &sseServer{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		body := s.body
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	}))
	tb.Cleanup(s.srv.Close)
	return s
}

func (s *sseServer) serve(body []byte) {
	s.mu.Lock()
	s.body = body
	s.mu.Unlock()
}

// recordedStream captures what llmtest's fake Anthropic API streams for
// reply: well-formed streams for the fuzzer to mutate.
func recordedStream(tb testing.TB, reply llmtest.Reply) []byte {
	fake := llmtest.StartAnthropic(reply)
	defer fake.Close()
	body := `{"model":"claude-test","max_tokens":64,"stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`
	req, err := http.NewRequest(http.MethodPost, fake.URL()+"/v1/messages", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("x-api-key", "k")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// FuzzStreamSSE feeds arbitrary bytes as the Messages API's event stream.
// Whatever arrives, the provider must not panic or hang, and the stream must
// end either with exactly one message_end event carrying the assembled
// message and nothing after it, or with a classified *llm.Error — never
// silently, never with both. The seed corpus is in
// testdata/fuzz/FuzzStreamSSE, plus streams recorded from llmtest.
func FuzzStreamSSE(f *testing.F) {
	for _, r := range []llmtest.Reply{
		{Text: "hello there", Usage: llm.Usage{InputTokens: 3, OutputTokens: 2}},
		{Thinking: "let me think", Signature: "sig", Text: "done"},
		{RedactedThinking: "opaque", Text: "ok"},
		{Text: "running it", ToolCalls: []llmtest.ToolCall{{ID: "toolu_1", Name: "shell", Input: `{"command":"ls -la"}`}}},
		{Text: "cut short", StopReason: llm.StopMaxTokens},
		{Text: "partial", StreamError: llmtest.Overloaded()},
	} {
		f.Add(recordedStream(f, r))
	}
	srv := newSSEServer(f)
	p, err := anthropic.New(anthropic.Config{
		APIKey: "k", BaseURL: srv.srv.URL, Model: "claude-test",
		Retry: retry.Policy{MaxRetries: -1},
	})
	if err != nil {
		f.Fatal(err)
	}
	req := llm.CompletionRequest{Messages: []llm.Message{llm.UserText("hi")}, MaxTokens: 64}
	f.Fuzz(func(t *testing.T, body []byte) {
		srv.serve(body)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// A stream that ignores its context would hang the fuzzer without a
		// word; this turns a hang into a failure with every stack.
		finished := make(chan struct{})
		defer close(finished)
		go func() {
			select {
			case <-finished:
			case <-time.After(20 * time.Second):
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				panic(fmt.Sprintf("stream hung past its context deadline; stacks:\n%s", buf[:n]))
			}
		}()
		var (
			ends    int
			last    llm.StreamEvent
			failure error
			after   bool // an event or error after the end
		)
		for ev, err := range p.Stream(ctx, req) {
			if ends > 0 || failure != nil {
				after = true
			}
			if err != nil {
				failure = err
				continue
			}
			last = ev
			if ev.Type == llm.EventMessageEnd {
				ends++
				if ev.Message == nil {
					t.Fatalf("message_end without a message")
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("stream did not end within its deadline (%v)", ctx.Err())
		}
		switch {
		case after:
			t.Fatalf("stream went on after its end (ends %d, error %v)", ends, failure)
		case failure != nil:
			var le *llm.Error
			if !errors.As(failure, &le) || le.Kind == "" {
				t.Fatalf("unclassified error %v (%T)", failure, failure)
			}
		case ends != 1 || last.Type != llm.EventMessageEnd:
			t.Fatalf("stream ended without a message_end or an error (ends %d, last %q)", ends, last.Type)
		}
	})
}

// TestRecordedStreams_are_valid_seeds keeps the recorded seeds honest: each
// one plays to a message_end through the fuzzed path, so the fuzzer starts
// from streams the provider really accepts.
func TestRecordedStreams_are_valid_seeds(t *testing.T) {
	body := recordedStream(t, llmtest.Reply{Text: "hello there"})
	if !bytes.Contains(body, []byte("event: message_stop")) {
		t.Fatalf("recorded stream has no message_stop:\n%s", body)
	}
	srv := newSSEServer(t)
	srv.serve(body)
	p, err := anthropic.New(anthropic.Config{APIKey: "k", BaseURL: srv.srv.URL, Model: "claude-test", Retry: retry.Policy{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var text strings.Builder
	var end *llm.Message
	for ev, err := range p.Stream(ctx, llm.CompletionRequest{Messages: []llm.Message{llm.UserText("hi")}, MaxTokens: 64}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == llm.EventTextDelta {
			text.WriteString(ev.Text)
		}
		if ev.Type == llm.EventMessageEnd {
			end = ev.Message
		}
	}
	if end == nil || end.Text() != "hello there" || text.String() != "hello there" {
		t.Fatalf("streamed %q, ended with %+v", text.String(), end)
	}
}
