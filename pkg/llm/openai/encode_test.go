package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	sdk "github.com/openai/openai-go/v3"

	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
)

// sdkMessages is the conversation as the SDK encodes it from Messages: the
// reference the body's spliced messages must equal.
// shape is the whole history in turns, as a request past no prefix has it.
func shape(history []llm.Message) []llm.Turn { return wire.AppendTurns(nil, history) }

func sdkMessages(system []string, history []llm.Message) []sdk.ChatCompletionMessageParamUnion {
	var out []sdk.ChatCompletionMessageParamUnion
	if s := systemText(system); s != "" {
		out = append(out, sdk.SystemMessage(s))
	}
	for _, t := range shape(history) {
		out = append(out, messages(t)...)
	}
	return out
}

func decoded(t *testing.T, raw []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, raw)
	}
	return v
}

// The body — system, tool messages, images, tool calls — is what the SDK
// makes of the same request, on the first call and on a later one whose
// turns come from the cache, for every prefix of a varied history.
func TestBody_is_what_the_SDK_would_send(t *testing.T) {
	p, err := New(Config{APIKey: "k", Model: "gpt-test"})
	if err != nil {
		t.Fatal(err)
	}
	shot := llm.NewImage("image/png", llmtest.PNG(3, 2))
	hist := []llm.Message{
		llm.UserText("list the files"),
		{Role: llm.RoleAssistant, Content: []llm.ContentBlock{
			{Type: llm.BlockThinking, Text: "look first", Signature: "sig"},
			{Type: llm.BlockText, Text: "Looking."},
			{Type: llm.BlockToolUse, ID: "c1", Name: "glob", Input: json.RawMessage(`{"pattern":"*"}`)},
			{Type: llm.BlockToolUse, ID: "c2", Name: "shell"},
		}},
		{Role: llm.RoleUser, Content: []llm.ContentBlock{
			{Type: llm.BlockToolResult, ToolUseID: "c1", Content: "a.go\nb.png", Images: []llm.Image{shot}},
			{Type: llm.BlockToolResult, ToolUseID: "c2", Content: "exit 1", IsError: true},
		}},
		llm.UserText("[background job notice] job 3 (gh) exited 0"),
		{Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockImage, Image: &shot}, {Type: llm.BlockText, Text: "and this?"}}},
		{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "A picture."}}},
	}
	for n := 1; n <= len(hist); n++ {
		req := llm.CompletionRequest{System: []string{"You are jetway's agent.", "", "Today is Tuesday."}, Messages: hist[:n], MaxTokens: 512,
			Tools: []llm.ToolSpec{{Name: "shell", Description: "Run a command.", InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}}}`)}}}
		for call := range 2 {
			params, conv, err := p.request(req)
			if err != nil {
				t.Fatal(err)
			}
			params.StreamOptions.IncludeUsage = sdk.Bool(true)
			body, err := p.body(params, conv, false)
			if err != nil {
				t.Fatal(err)
			}
			params.Messages = sdkMessages(req.System, req.Messages)
			want, err := json.Marshal(params)
			if err != nil {
				t.Fatal(err)
			}
			if got := decoded(t, body); !reflect.DeepEqual(got, decoded(t, want)) {
				t.Fatalf("history of %d, call %d:\n got %s\nwant %s", n, call+1, body, want)
			}
		}
	}
	if p.enc.Len() == 0 {
		t.Fatal("nothing was cached")
	}
}

func TestRequest_without_any_message_is_refused_before_sending(t *testing.T) {
	p, _ := New(Config{APIKey: "k", Model: "m"})
	_, _, err := p.request(llm.CompletionRequest{Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockText}}}}})
	var le *llm.Error
	if !errors.As(err, &le) || le.Kind != llm.ErrKindModel {
		t.Fatalf("got %v, want a model error", err)
	}
}

// BenchmarkRequestBody compares a request's body built through the turn
// cache (every turn sent before) with the SDK encoding the whole history,
// for a session of n messages.
func BenchmarkRequestBody(b *testing.B) {
	for _, n := range []int{20, 200, 2000} {
		var h []llm.Message
		for i := range n / 2 {
			h = append(h, llm.UserText(fmt.Sprintf("event %d: job 3 (gh) exited 0 after 4s", i)),
				llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "noted"}}})
		}
		req := llm.CompletionRequest{System: []string{"You are jetway's agent."}, Messages: append(h, llm.UserText("go")), MaxTokens: 1024}
		// cached: every turn found again; settled: as a runner's requests
		// come, all but the last exchange settled (the prefix).
		for _, mode := range []struct {
			name    string
			settled int
		}{{"cached", 0}, {"settled", len(req.Messages) - 2}} {
			b.Run(fmt.Sprintf("%s/%d", mode.name, n), func(b *testing.B) {
				req := req
				req.Settled = mode.settled
				p, _ := New(Config{APIKey: "k", Model: "m"})
				for b.Loop() {
					params, conv, err := p.request(req)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := p.body(params, conv, false); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run(fmt.Sprintf("sdk/%d", n), func(b *testing.B) {
			p, _ := New(Config{APIKey: "k", Model: "m"})
			for b.Loop() {
				params, _, err := p.request(req)
				if err != nil {
					b.Fatal(err)
				}
				params.Messages = sdkMessages(req.System, req.Messages)
				if _, err := json.Marshal(params); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
