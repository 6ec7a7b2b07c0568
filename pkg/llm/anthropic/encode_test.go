package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
)

// sdkEncoding is what the SDK itself sends as the messages of turns: the
// reference the cache must reproduce.
func sdkEncoding(t *testing.T, turns []turn, breakpoint bool) any {
	t.Helper()
	params := make([]sdk.MessageParam, len(turns))
	for i, tu := range turns {
		params[i] = tu.param()
	}
	if breakpoint {
		cacheLastBlock(params[len(params)-1])
	}
	body, err := json.Marshal(sdk.MessageNewParams{Model: "m", MaxTokens: 1, Messages: params})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	return m["messages"]
}

func decoded(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("encoding is not JSON: %v\n%s", err, raw)
	}
	return v
}

// history is a session with every kind of block the shaping keeps.
func history() []llm.Message {
	shot := llm.NewImage("image/png", llmtest.PNG(3, 2))
	png := &shot
	return []llm.Message{
		llm.UserText("list the files"),
		{Role: llm.RoleAssistant, Content: []llm.ContentBlock{
			{Type: llm.BlockThinking, Text: "look first", Signature: "sig-1"},
			{Type: llm.BlockText, Text: "Looking."},
			{Type: llm.BlockToolUse, ID: "tu1", Name: "glob", Input: json.RawMessage(`{"pattern":"*"}`)},
		}},
		{Role: llm.RoleUser, Content: []llm.ContentBlock{
			{Type: llm.BlockToolResult, ToolUseID: "tu1", Content: "a.go\nb.png", Images: []llm.Image{*png}},
		}},
		llm.UserText("[background job notice] job 3 (gh) exited 0"),
		{Role: llm.RoleAssistant, Content: []llm.ContentBlock{
			{Type: llm.BlockToolUse, ID: "tu2", Name: "shell", Input: json.RawMessage(`{"command":"false"}`)},
		}},
		{Role: llm.RoleUser, Content: []llm.ContentBlock{
			{Type: llm.BlockToolResult, ToolUseID: "tu2", Content: "exit 1", IsError: true},
			{Type: llm.BlockImage, Image: png},
		}},
		{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "It failed."}}},
	}
}

func TestEncodedTurns_send_what_the_SDK_would_send_first_time_and_from_the_cache(t *testing.T) {
	c := newEncodings(encodedLimit)
	h := history()
	for n := 1; n <= len(h); n++ {
		turns := shape(h[:n])
		for _, breakpoint := range []bool{true, false} {
			got, err := c.turns(turns, breakpoint)
			if err != nil {
				t.Fatal(err)
			}
			if want := sdkEncoding(t, turns, breakpoint); !reflect.DeepEqual(decoded(t, got), want) {
				t.Fatalf("history of %d, breakpoint %v:\n got %s\nwant %v", n, breakpoint, got, want)
			}
		}
	}
	if c.cached() == 0 {
		t.Fatal("nothing was cached: the test did not exercise the cache")
	}
}

// A turn whose content changes (an image shown later as a note, a merged
// turn that grew) is a different key, never the old bytes.
func TestEncodedTurns_never_serve_a_changed_turn_its_old_encoding(t *testing.T) {
	c := newEncodings(encodedLimit)
	h := history()
	if _, err := c.turns(shape(h), false); err != nil {
		t.Fatal(err)
	}
	h[2].Content[0].Images = nil
	h[2].Content[0].Content = "a.go\nb.png\n[image b.png was refused by the model]"
	turns := shape(h)
	got, err := c.turns(turns, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "refused by the model") {
		t.Fatalf("changed turn served stale: %s", got)
	}
	if want := sdkEncoding(t, turns, false); !reflect.DeepEqual(decoded(t, got), want) {
		t.Fatalf("got %s\nwant %v", got, want)
	}
}

func TestEncodedTurns_stay_within_their_limit(t *testing.T) {
	const limit = 64 << 10
	c := newEncodings(limit)
	for i := range 2000 {
		turns := shape([]llm.Message{llm.UserText(fmt.Sprintf("event %d with some text to take room", i)), llm.UserText("x")})
		turns = append(turns, turn{role: llm.RoleAssistant, blocks: []llm.ContentBlock{{Type: llm.BlockText, Text: "noted"}}})
		if _, err := c.turns(turns, true); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		held := c.size
		for k, v := range c.old {
			held += len(k) + len(v)
		}
		c.mu.Unlock()
		if held > limit {
			t.Fatalf("after %d requests the cache holds %d bytes, over its limit of %d", i+1, held, limit)
		}
	}
}

// BenchmarkRequestBody compares a request's body built through the turn
// cache (every turn but the last sent before) with the SDK encoding the
// whole history, for a session of n messages.
func BenchmarkRequestBody(b *testing.B) {
	for _, n := range []int{20, 200, 2000} {
		var h []llm.Message
		for i := range n / 2 {
			h = append(h, llm.UserText(fmt.Sprintf("event %d: job 3 (gh) exited 0 after 4s", i)),
				llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "noted"}}})
		}
		req := llm.CompletionRequest{Messages: append(h, llm.UserText("go")), MaxTokens: 1024}
		b.Run(fmt.Sprintf("cached/%d", n), func(b *testing.B) {
			p, _ := New(Config{APIKey: "k", Model: "m"})
			if _, _, err := p.params(req); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, _, err := p.params(req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("sdk/%d", n), func(b *testing.B) {
			for b.Loop() {
				turns := shape(req.Messages)
				params := sdk.MessageNewParams{Model: "m", MaxTokens: 1024}
				for _, t := range turns {
					params.Messages = append(params.Messages, t.param())
				}
				cacheLastBlock(params.Messages[len(params.Messages)-1])
				if _, err := json.Marshal(params); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The cache key must read every field a turn's encoding is made from: a
// field added to llm.ContentBlock or llm.Image must be added to appendKey,
// or two turns differing only in it would share an encoding.
func TestAppendKey_knows_every_field_of_a_block(t *testing.T) {
	known := map[reflect.Type][]string{
		reflect.TypeFor[llm.ContentBlock](): {"Type", "Text", "Signature", "ID", "Name", "Input", "ToolUseID", "Content", "Images", "IsError", "Image"},
		reflect.TypeFor[llm.Image]():        {"MediaType", "Data", "URL"},
	}
	for typ, names := range known {
		var got []string
		for f := range typ.Fields() {
			got = append(got, f.Name)
		}
		if !reflect.DeepEqual(got, names) {
			t.Errorf("%s has fields %v; appendKey knows %v: add the new ones to the key", typ, got, names)
		}
	}
	// And each field changes the key.
	base := llm.ContentBlock{Type: llm.BlockToolResult, Image: &llm.Image{}}
	variants := []func(*llm.ContentBlock){
		func(b *llm.ContentBlock) { b.Type = llm.BlockText },
		func(b *llm.ContentBlock) { b.Text = "x" },
		func(b *llm.ContentBlock) { b.Signature = "x" },
		func(b *llm.ContentBlock) { b.ID = "x" },
		func(b *llm.ContentBlock) { b.Name = "x" },
		func(b *llm.ContentBlock) { b.Input = json.RawMessage(`{}`) },
		func(b *llm.ContentBlock) { b.ToolUseID = "x" },
		func(b *llm.ContentBlock) { b.Content = "x" },
		func(b *llm.ContentBlock) { b.Images = []llm.Image{{}} },
		func(b *llm.ContentBlock) { b.IsError = true },
		func(b *llm.ContentBlock) { b.Image = nil },
		func(b *llm.ContentBlock) { b.Image = &llm.Image{MediaType: "x"} },
		func(b *llm.ContentBlock) { b.Image = &llm.Image{Data: "x"} },
		func(b *llm.ContentBlock) { b.Image = &llm.Image{URL: "x"} },
		// Moving bytes from one field to the next is a different turn too.
		func(b *llm.ContentBlock) { b.Text, b.Signature = "ab", "" },
	}
	seen := map[string]int{string(appendKey(nil, turn{role: llm.RoleUser, blocks: []llm.ContentBlock{base}})): -1}
	for i, vary := range variants {
		b := base
		vary(&b)
		k := string(appendKey(nil, turn{role: llm.RoleUser, blocks: []llm.ContentBlock{b}}))
		if j, dup := seen[k]; dup {
			t.Errorf("variant %d has the key of %d", i, j)
		}
		seen[k] = i
	}
	shifted := string(appendKey(nil, turn{role: llm.RoleUser, blocks: []llm.ContentBlock{{Text: "a", Signature: "b"}}}))
	if shifted == string(appendKey(nil, turn{role: llm.RoleUser, blocks: []llm.ContentBlock{{Text: "ab"}}})) {
		t.Error("text and signature run together in the key")
	}
	if string(appendKey(nil, turn{role: llm.RoleUser, blocks: []llm.ContentBlock{{Text: "a"}}})) ==
		string(appendKey(nil, turn{role: llm.RoleAssistant, blocks: []llm.ContentBlock{{Text: "a"}}})) {
		t.Error("role is not in the key")
	}
}

// The whole body — system blocks with their breakpoint, tools, thinking,
// messages — is what the SDK makes of the same request, on the first call
// and on a later one served from the encodings.
func TestBody_is_what_the_SDK_would_send(t *testing.T) {
	p, err := New(Config{APIKey: "k", Model: "claude-test"})
	if err != nil {
		t.Fatal(err)
	}
	req := llm.CompletionRequest{
		System:          []string{"You are jetway's agent.", "", "Today is Tuesday."},
		DynamicBoundary: 2,
		Messages:        history(),
		MaxTokens:       2048,
		ThinkingBudget:  2000,
		Tools: []llm.ToolSpec{
			{Name: "shell", Description: "Run a command.", InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)},
			{Name: "todo_write", InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`)},
		},
	}
	want := func() any {
		params := sdk.MessageNewParams{Model: "claude-test", MaxTokens: 2048,
			System: system(req.System, req.DynamicBoundary, true), Thinking: sdk.ThinkingConfigParamOfEnabled(2000)}
		for _, tl := range req.Tools {
			schema, err := inputSchema(tl.InputSchema)
			if err != nil {
				t.Fatal(err)
			}
			tp := sdk.ToolParam{Name: tl.Name, InputSchema: schema}
			if tl.Description != "" {
				tp.Description = sdk.String(tl.Description)
			}
			params.Tools = append(params.Tools, sdk.ToolUnionParam{OfTool: &tp})
		}
		for _, tu := range shape(req.Messages) {
			params.Messages = append(params.Messages, tu.param())
		}
		cacheLastBlock(params.Messages[len(params.Messages)-1])
		body, err := json.Marshal(params)
		if err != nil {
			t.Fatal(err)
		}
		return decoded(t, body)
	}()
	for call := range 2 {
		turns := shape(req.Messages)
		params, _, err := p.params(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := p.body(params, req, turns)
		if err != nil {
			t.Fatal(err)
		}
		if got := decoded(t, body); !reflect.DeepEqual(got, want) {
			t.Fatalf("call %d:\n got %s\nwant %v", call+1, body, want)
		}
	}
	if p.enc.cached() == 0 {
		t.Fatal("nothing was cached")
	}
}

func TestBody_names_a_tool_whose_schema_is_not_JSON(t *testing.T) {
	p, _ := New(Config{APIKey: "k", Model: "m"})
	req := llm.CompletionRequest{Messages: []llm.Message{llm.UserText("hi")},
		Tools: []llm.ToolSpec{{Name: "broken", InputSchema: json.RawMessage(`{"type":`)}}}
	_, _, err := p.params(req)
	var le *llm.Error
	if !errors.As(err, &le) || le.Kind != llm.ErrKindModel || !strings.Contains(err.Error(), "tool broken") {
		t.Fatalf("got %v", err)
	}
}
