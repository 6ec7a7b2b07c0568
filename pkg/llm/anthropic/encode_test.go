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
	"jetway/pkg/llm/internal/wirecache"
	"jetway/pkg/llm/llmtest"
)

// sdkEncoding is what the SDK itself sends as the messages of turns: the
// reference the cache must reproduce.
// shape is the whole history in turns, as a request past no prefix has it.
func shape(history []llm.Message) []llm.Turn { return wire.AppendTurns(nil, history) }

func sdkEncoding(t *testing.T, turns []llm.Turn, breakpoint bool) any {
	t.Helper()
	params := make([]sdk.MessageParam, len(turns))
	for i, tu := range turns {
		params[i] = turnParam(tu)
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
	c := newEncodings(wirecache.Limit)
	h := history()
	for n := 1; n <= len(h); n++ {
		turns := shape(h[:n])
		for _, breakpoint := range []bool{true, false} {
			parts, err := c.turns(turns, breakpoint, true)
			if err != nil {
				t.Fatal(err)
			}
			got := appendArray(nil, nil, parts)
			if len(got) != arrayLen(parts) {
				t.Fatalf("arrayLen %d, array is %d bytes: the body buffer would grow", arrayLen(parts), len(got))
			}
			if want := sdkEncoding(t, turns, breakpoint); !reflect.DeepEqual(decoded(t, got), want) {
				t.Fatalf("history of %d, breakpoint %v:\n got %s\nwant %v", n, breakpoint, got, want)
			}
		}
	}
	if c.Len() == 0 {
		t.Fatal("nothing was cached: the test did not exercise the cache")
	}
}

// A turn whose content changes (an image shown later as a note, a merged
// turn that grew) is a different key, never the old bytes.
func TestEncodedTurns_never_serve_a_changed_turn_its_old_encoding(t *testing.T) {
	c := newEncodings(wirecache.Limit)
	h := history()
	if _, err := c.turns(shape(h), false, true); err != nil {
		t.Fatal(err)
	}
	h[2].Content[0].Images = nil
	h[2].Content[0].Content = "a.go\nb.png\n[image b.png was refused by the model]"
	turns := shape(h)
	parts, err := c.turns(turns, false, true)
	if err != nil {
		t.Fatal(err)
	}
	got := appendArray(nil, nil, parts)
	if !strings.Contains(string(got), "refused by the model") {
		t.Fatalf("changed turn served stale: %s", got)
	}
	if want := sdkEncoding(t, turns, false); !reflect.DeepEqual(decoded(t, got), want) {
		t.Fatalf("got %s\nwant %v", got, want)
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
				if _, _, err := p.params(req, false); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if _, _, err := p.params(req, false); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run(fmt.Sprintf("sdk/%d", n), func(b *testing.B) {
			for b.Loop() {
				turns := shape(req.Messages)
				params := sdk.MessageNewParams{Model: "m", MaxTokens: 1024}
				for _, t := range turns {
					params.Messages = append(params.Messages, turnParam(t))
				}
				cacheLastBlock(params.Messages[len(params.Messages)-1])
				if _, err := json.Marshal(params); err != nil {
					b.Fatal(err)
				}
			}
		})
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
			params.Messages = append(params.Messages, turnParam(tu))
		}
		cacheLastBlock(params.Messages[len(params.Messages)-1])
		body, err := json.Marshal(params)
		if err != nil {
			t.Fatal(err)
		}
		return decoded(t, body)
	}()
	for call := range 2 {
		params, _, err := p.params(req, false)
		if err != nil {
			t.Fatal(err)
		}
		body, err := p.requestBody(params, req, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := decoded(t, body); !reflect.DeepEqual(got, want) {
			t.Fatalf("call %d:\n got %s\nwant %v", call+1, body, want)
		}
	}
	if p.enc.Len() == 0 {
		t.Fatal("nothing was cached")
	}
}

func TestBody_names_a_tool_whose_schema_is_not_JSON(t *testing.T) {
	p, _ := New(Config{APIKey: "k", Model: "m"})
	req := llm.CompletionRequest{Messages: []llm.Message{llm.UserText("hi")},
		Tools: []llm.ToolSpec{{Name: "broken", InputSchema: json.RawMessage(`{"type":`)}}}
	_, _, err := p.params(req, false)
	var le *llm.Error
	if !errors.As(err, &le) || le.Kind != llm.ErrKindModel || !strings.Contains(err.Error(), "tool broken") {
		t.Fatalf("got %v", err)
	}
}

// The last request's tools and system arrays are served again only to a
// request whose tools and system blocks encode alike: a change to any
// field, even in the caller's own bytes between two calls, is encoded.
func TestTools_and_system_arrays_follow_every_change(t *testing.T) {
	c := newEncodings(wirecache.Limit)
	schema := []byte(`{"type":"object","properties":{"a":{"type":"string"}}}`)
	tools := []llm.ToolSpec{{Name: "t1", Description: "one", InputSchema: schema}, {Name: "t2"}}
	want := func(tools []llm.ToolSpec) string {
		t.Helper()
		enc, err := newEncodings(wirecache.Limit).tools(tools)
		if err != nil {
			t.Fatal(err)
		}
		return string(enc)
	}
	check := func(step string, tools []llm.ToolSpec) {
		t.Helper()
		got, err := c.tools(tools)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want(tools) {
			t.Errorf("%s: tools\n got %s\nwant %s", step, got, want(tools))
		}
	}
	check("first", tools)
	check("same again", tools)
	check("a copy", []llm.ToolSpec{tools[0], tools[1]})
	check("description", []llm.ToolSpec{{Name: "t1", Description: "uno", InputSchema: schema}, tools[1]})
	check("name", []llm.ToolSpec{{Name: "t0", Description: "one", InputSchema: schema}, tools[1]})
	check("fewer", tools[:1])
	check("all again", tools)
	copy(schema, `{"type":"object","properties":{"b"`) // the caller's bytes, changed in place
	check("schema changed in place", tools)

	sys := func(cache bool, texts ...string) []sdk.TextBlockParam { return system(texts, len(texts), cache) }
	wantSys := func(b []sdk.TextBlockParam) string {
		enc, err := newEncodings(wirecache.Limit).system(b)
		if err != nil {
			t.Fatal(err)
		}
		return string(enc)
	}
	for _, b := range [][]sdk.TextBlockParam{sys(true, "a", "b"), sys(true, "a", "b"), sys(false, "a", "b"), sys(true, "a", "c"), sys(true, "a")} {
		got, err := c.system(b)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != wantSys(b) {
			t.Errorf("system %v:\n got %s\nwant %s", b, got, wantSys(b))
		}
	}
}

// The body's head is cached by headKey, so params must set nothing else:
// a field params gains must join headKey (this fails until it does).
func TestParams_set_only_what_headKey_holds(t *testing.T) {
	temp := 0.5
	cases := []struct {
		cfg Config
		req llm.CompletionRequest
	}{
		{Config{APIKey: "k", Model: "m"}, llm.CompletionRequest{}},
		{Config{APIKey: "k", Model: "m"}, llm.CompletionRequest{Model: "other", MaxTokens: 7, Temperature: &temp}},
		{Config{APIKey: "k", Model: "m"}, llm.CompletionRequest{ThinkingBudget: 10}},
		{Config{APIKey: "k", Model: "m", AdaptiveThinking: true}, llm.CompletionRequest{ThinkingBudget: 10}},
	}
	known := map[string]bool{"Model": true, "MaxTokens": true, "Thinking": true}
	for i, c := range cases {
		p, err := New(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.req.Messages = []llm.Message{llm.UserText("hi")}
		params, _, err := p.params(c.req, true)
		if err != nil {
			t.Fatal(err)
		}
		v := reflect.ValueOf(params)
		for f := range v.NumField() {
			if name := v.Type().Field(f).Name; v.Type().Field(f).IsExported() && !known[name] && !v.Field(f).IsZero() {
				t.Errorf("case %d: params sets %s, which headKey does not hold", i, name)
			}
		}
	}
}

// Requests whose params differ get heads of their own, from one provider.
func TestBody_head_follows_the_params(t *testing.T) {
	p, err := New(Config{APIKey: "k", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := New(Config{APIKey: "k", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []llm.CompletionRequest{
		{}, {MaxTokens: 9}, {ThinkingBudget: 2000}, {Model: "n"}, {}, {ThinkingBudget: 3000},
	} {
		req.Messages = []llm.Message{llm.UserText("hi")}
		got, _, err := p.params(req, true)
		if err != nil {
			t.Fatal(err)
		}
		body, err := p.requestBody(got, req, true)
		if err != nil {
			t.Fatal(err)
		}
		fresh.enc = newEncodings(wirecache.Limit)
		want, err := fresh.requestBody(got, req, true)
		if err != nil {
			t.Fatal(err)
		}
		if string(body) != string(want) {
			t.Errorf("request %+v:\n got %s\nwant %s", req, body, want)
		}
	}
}
