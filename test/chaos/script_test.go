package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
	"jetway/pkg/llm/script"
)

// With jobs the model plays a script (jobsScript), and it plays it at a
// fake Anthropic API per runner rather than inside the runner
// (JETWAY_SCRIPT): there the suite sees every call of every runner, when
// it began and when it ended or its client left, and so checks "one run at
// the model" with jobs too. Each request is read back from the wire into
// the script's terms and the script's answer is sent as the fake's reply.

// Model call pacing: a call lasts about as long as one of the plain fake
// models without jobs (80 ms, then 150 ms between streamed events: 1.2 s
// or more), longer than the 0.9 s takeover of 300 ms heartbeats, so a run
// that outlived its lease would overlap its successor's call.
const (
	callLatency    = 80 * time.Millisecond
	callChunkDelay = 150 * time.Millisecond
)

// scriptedReplies is a fake model's router playing the script src. A
// turn's delay is the reply's latency (the fake waits it on the request,
// so a client that leaves ends the call); such a turn, a sub-agent's own
// work, keeps its delay alone, so its answer still comes within its
// parent's one-second wait now and then.
func scriptedReplies(src string) (func(body []byte) (llmtest.Reply, bool), error) {
	var f script.File
	if err := json.Unmarshal([]byte(src), &f); err != nil {
		return nil, fmt.Errorf("parse the script: %w", err)
	}
	delays := map[string]time.Duration{}
	for i, t := range f.Turns {
		if t.Delay > 0 {
			if strings.Contains(t.Text, "{{") {
				return nil, fmt.Errorf("turn %d: a delayed turn's text must be fixed, to find its delay by", i+1)
			}
			delays[t.Text] = time.Duration(t.Delay)
			f.Turns[i].Delay = 0
		}
	}
	p, err := script.FromTurns(f.Turns)
	if err != nil {
		return nil, err
	}
	return func(body []byte) (llmtest.Reply, bool) {
		msgs, err := wireMessages(body)
		if err != nil {
			return llmtest.Reply{Error: &llmtest.APIError{Status: http.StatusBadRequest, Message: err.Error()}}, true
		}
		msg, stop, _, err := p.Complete(context.Background(), llm.CompletionRequest{Messages: msgs})
		if err != nil {
			return llmtest.Reply{Error: &llmtest.APIError{Status: http.StatusBadRequest, Message: err.Error()}}, true
		}
		rep := llmtest.Reply{StopReason: stop, Latency: callLatency, ChunkDelay: callChunkDelay}
		for _, b := range msg.Content {
			switch b.Type {
			case llm.BlockText:
				rep.Text += b.Text
			case llm.BlockToolUse:
				rep.ToolCalls = append(rep.ToolCalls, llmtest.ToolCall{Name: b.Name, Input: string(b.Input)})
			}
		}
		if d, ok := delays[rep.Text]; ok {
			rep.Latency, rep.ChunkDelay = d, 0
		}
		return rep, true
	}, nil
}

// wireMessages reads the messages of an Anthropic Messages API request as
// the script reads them: text, tool calls and their results.
func wireMessages(body []byte) ([]llm.Message, error) {
	var req struct {
		Messages []struct {
			Role    llm.Role        `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("read the request: %w", err)
	}
	var out []llm.Message
	for i, m := range req.Messages {
		msg := llm.Message{Role: m.Role}
		var text string
		if json.Unmarshal(m.Content, &text) == nil {
			msg.Content = []llm.ContentBlock{{Type: llm.BlockText, Text: text}}
			out = append(out, msg)
			continue
		}
		var blocks []struct {
			Type      llm.BlockType   `json:"type"`
			Text      string          `json:"text"`
			ID        string          `json:"id"`
			Name      string          `json:"name"`
			Input     json.RawMessage `json:"input"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			IsError   bool            `json:"is_error"`
		}
		if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		for _, b := range blocks {
			switch b.Type {
			case llm.BlockText:
				msg.Content = append(msg.Content, llm.ContentBlock{Type: llm.BlockText, Text: b.Text})
			case llm.BlockToolUse:
				msg.Content = append(msg.Content, llm.ContentBlock{Type: llm.BlockToolUse, ID: b.ID, Name: b.Name, Input: b.Input})
			case llm.BlockToolResult:
				msg.Content = append(msg.Content, llm.ContentBlock{Type: llm.BlockToolResult, ToolUseID: b.ToolUseID,
					Content: resultText(b.Content), IsError: b.IsError})
			}
		}
		out = append(out, msg)
	}
	return out, nil
}

// resultText is a tool result's content, a string or text blocks.
func resultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &blocks) // anything else has no text for the script
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// The router plays jobsScript from requests as the runners' Anthropic
// provider sends them: a delegation, the result of its agent_start call,
// the sub-agent's own work (the script's delay as its latency) and a
// plain input.
func TestScriptedReplies_play_the_jobs_script_from_Anthropic_requests(t *testing.T) {
	route, err := scriptedReplies(jobsScript)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, body, text, tool string
		latency, chunks        time.Duration
	}{
		{"a delegation", `{"messages":[{"role":"user","content":[{"type":"text","text":"s01 delegate 3","cache_control":{"type":"ephemeral"}}]}]}`,
			"Delegating.", "agent_start", callLatency, callChunkDelay},
		{"the agent_start call's result", `{"messages":[{"role":"user","content":[{"type":"text","text":"s01 delegate 3"}]},` +
			`{"role":"assistant","content":[{"type":"text","text":"Delegating."},{"type":"tool_use","id":"toolu_llmtest_1","name":"agent_start","input":{"prompt":"chaos sub-task","wait":1}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_llmtest_1","content":[{"type":"text","text":"agent 1 (default) (session s01-a1) is still working after 1s"}]}]}]}`,
			"Delegated.", "", callLatency, callChunkDelay},
		{"a sub-agent's work", `{"messages":[{"role":"user","content":"chaos sub-task"}]}`,
			"Sub-task done.", "", 900 * time.Millisecond, 0},
		{"an input", `{"messages":[{"role":"user","content":[{"type":"text","text":"s02 message 4"}]}]}`,
			"Starting a background job.", "shell", callLatency, callChunkDelay},
	} {
		rep, ok := route([]byte(c.body))
		if !ok || rep.Error != nil {
			t.Errorf("%s: no reply (%v)", c.name, rep.Error)
			continue
		}
		tool := ""
		if len(rep.ToolCalls) == 1 {
			tool = rep.ToolCalls[0].Name
		}
		if rep.Text != c.text || tool != c.tool || len(rep.ToolCalls) > 1 || rep.Latency != c.latency || rep.ChunkDelay != c.chunks {
			t.Errorf("%s: got %q, calls %+v, latency %s, chunk delay %s; want %q, %q, %s, %s",
				c.name, rep.Text, rep.ToolCalls, rep.Latency, rep.ChunkDelay, c.text, c.tool, c.latency, c.chunks)
		}
	}
}
