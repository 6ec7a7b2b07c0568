// Package script is a deterministic llm.Provider that plays a scripted
// conversation — text, thinking, tool calls, stop reasons, delays — so the
// whole host runs (`make run`, demos, tests, benchmarks) without a model or
// an API key. It announces itself as a script, never as a model.
//
// The script is stateless between calls: where it is in the conversation is
// read from the request itself (which scripted turn produced the latest
// assistant message), so any runner can pick a session up, and many
// sessions can share one Provider.
//
// Choosing the turn to play: among the turns after the one that produced
// the latest assistant message, the first whose `when` condition holds
// against the latest user turn wins; if none with a condition holds, the
// first turn after it without a condition plays. When the script has run
// out, new input (a user turn without tool results) starts it again from
// the top. Anything else is a model error that says what was not matched.
package script

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"jetway/pkg/llm"
)

// Turn is one scripted assistant message.
type Turn struct {
	// When, if set, makes the turn play only when it holds; such turns win
	// over unconditioned ones.
	When *Condition `json:"when,omitempty"`
	// Thinking is streamed first as a thinking block.
	Thinking string `json:"thinking,omitempty"`
	// Text is the answer text. Placeholders are filled from the latest
	// user turn: {{notice}} with the first line of its notice without the
	// tag (e.g. "job 1 (sleep) exited 0 after 3s."), {{notice_output}} with
	// the last line of the notice's "Last output:", {{tool_result}} with the
	// first line of its last tool result. Texts identify turns (that is how
	// the script finds its place), so keep them distinct.
	Text      string     `json:"text,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// StopReason defaults to tool_use when there are tool calls, end_turn
	// otherwise.
	StopReason llm.StopReason `json:"stop_reason,omitempty"`
	// Delay is waited before the answer starts, e.g. "1.5s".
	Delay Duration `json:"delay,omitempty"`
}

// ToolCall is a scripted tool call.
type ToolCall struct {
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
}

// Condition is what a turn requires of the latest user turn (the messages
// after the last assistant message). Every field set must hold.
type Condition struct {
	// UserContains: a text block of the latest user turn contains it.
	UserContains string `json:"user_contains,omitempty"`
	// NoticeContains: a notice in the latest user turn contains it. A
	// notice is a text block of a notice message (llm.KindNotice) or one
	// that carries a bracketed "[… notice]" tag, as host notices do (the
	// request view drops Kind, so the tag is what usually tells).
	NoticeContains string `json:"notice_contains,omitempty"`
	// ToolResultFor: the latest user turn has a result of a call of this
	// tool.
	ToolResultFor string `json:"tool_result_for,omitempty"`
	// ToolResultContains: a tool result of the latest user turn contains it.
	ToolResultContains string `json:"tool_result_contains,omitempty"`
	// HasImage: the latest user turn shows the model an image, its own or
	// in a tool result (a script cannot look at it, but can say it got one).
	HasImage bool `json:"has_image,omitempty"`
}

// Duration is a time.Duration written as a Go duration string in JSON.
type Duration time.Duration

// UnmarshalJSON reads "1.5s" (or a number of milliseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var ms float64
		if err2 := json.Unmarshal(b, &ms); err2 != nil {
			return fmt.Errorf("delay: want a duration like \"1.5s\": %w", err)
		}
		*d = Duration(ms * float64(time.Millisecond))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("delay: %w", err)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// File is a script file: a description for people and the turns.
type File struct {
	Description string `json:"description,omitempty"`
	Turns       []Turn `json:"turns"`
}

// Provider plays a script.
type Provider struct {
	name  string
	turns []Turn
}

var _ llm.Provider = (*Provider)(nil)

// Load reads a script file.
func Load(path string) (*Provider, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("script %s: %w", path, err)
	}
	p.name = "script " + filepath.Base(path) + " (deterministic, no model)"
	return p, nil
}

// Parse reads a script: a File object or a bare array of turns.
func Parse(data []byte) (*Provider, error) {
	var f File
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		if err := json.Unmarshal(trimmed, &f.Turns); err != nil {
			return nil, fmt.Errorf("parse turns: %w", err)
		}
	} else if err := json.Unmarshal(trimmed, &f); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	return newProvider(f.Turns)
}

// FromTurns is a Provider playing turns, for tests and benchmarks.
func FromTurns(turns []Turn) (*Provider, error) { return newProvider(turns) }

func newProvider(turns []Turn) (*Provider, error) {
	if len(turns) == 0 {
		return nil, errors.New("script has no turns")
	}
	for i, t := range turns {
		if t.Text == "" && t.Thinking == "" && len(t.ToolCalls) == 0 {
			return nil, fmt.Errorf("turn %d says nothing: give it text or tool calls", i+1)
		}
		for j, c := range t.ToolCalls {
			if c.Name == "" {
				return nil, fmt.Errorf("turn %d, tool call %d: no tool name", i+1, j+1)
			}
			if len(c.Input) > 0 && !json.Valid(c.Input) {
				return nil, fmt.Errorf("turn %d, tool call %s: input is not JSON", i+1, c.Name)
			}
		}
	}
	return &Provider{name: fmt.Sprintf("script (%d turns, deterministic, no model)", len(turns)), turns: turns}, nil
}

// Name says this is a script, not a model.
func (p *Provider) Name() string { return p.name }

// Stream plays the chosen turn as a stream: thinking and text in word-sized
// deltas, each tool call, then the assembled message.
func (p *Provider) Stream(ctx context.Context, req llm.CompletionRequest) iter.Seq2[llm.StreamEvent, error] {
	return func(yield func(llm.StreamEvent, error) bool) {
		msg, stop, usage, err := p.Complete(ctx, req)
		if err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		for _, b := range msg.Content {
			switch b.Type {
			case llm.BlockThinking, llm.BlockText:
				typ := llm.EventTextDelta
				if b.Type == llm.BlockThinking {
					typ = llm.EventThinkingDelta
				}
				for _, w := range words(b.Text) {
					if ctx.Err() != nil {
						yield(llm.StreamEvent{}, fmt.Errorf("script: %w", ctx.Err()))
						return
					}
					if !yield(llm.StreamEvent{Type: typ, Text: w}, nil) {
						return
					}
				}
			case llm.BlockToolUse:
				blk := b
				if !yield(llm.StreamEvent{Type: llm.EventToolUse, Block: &blk}, nil) {
					return
				}
			}
		}
		yield(llm.StreamEvent{Type: llm.EventMessageEnd, Message: &msg, StopReason: stop, Usage: &usage}, nil)
	}
}

// Complete plays the chosen turn as one message.
func (p *Provider) Complete(ctx context.Context, req llm.CompletionRequest) (llm.Message, llm.StopReason, llm.Usage, error) {
	i, err := p.choose(req.Messages)
	if err != nil {
		return llm.Message{}, "", llm.Usage{}, &llm.Error{Kind: llm.ErrKindModel, Provider: "script", Err: err}
	}
	t := p.turns[i]
	if t.Delay > 0 {
		timer := time.NewTimer(time.Duration(t.Delay))
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return llm.Message{}, "", llm.Usage{}, fmt.Errorf("script: %w", ctx.Err())
		}
	}
	if err := ctx.Err(); err != nil {
		return llm.Message{}, "", llm.Usage{}, fmt.Errorf("script: %w", err)
	}
	latest := latestUserTurn(req.Messages)
	msg := llm.Message{Role: llm.RoleAssistant}
	if t.Thinking != "" {
		msg.Content = append(msg.Content, llm.ContentBlock{Type: llm.BlockThinking, Text: t.Thinking})
	}
	if t.Text != "" {
		msg.Content = append(msg.Content, llm.ContentBlock{Type: llm.BlockText, Text: render(t.Text, req.Messages, latest)})
	}
	for j, c := range t.ToolCalls {
		input := c.Input
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		msg.Content = append(msg.Content, llm.ContentBlock{
			Type: llm.BlockToolUse, Name: c.Name, Input: append(json.RawMessage(nil), input...),
			// Unique in the conversation and the same for the same request.
			ID: fmt.Sprintf("toolu_script_%d_%d", len(req.Messages), j+1),
		})
	}
	stop := t.StopReason
	if stop == "" {
		stop = llm.StopEndTurn
		if len(t.ToolCalls) > 0 {
			stop = llm.StopToolUse
		}
	}
	usage := llm.Usage{InputTokens: llm.EstimateTokens(req.Messages), OutputTokens: llm.EstimateTokens([]llm.Message{msg})}
	return msg, stop, usage, nil
}

// choose picks the turn to play for this history.
func (p *Provider) choose(history []llm.Message) (int, error) {
	after := p.position(history)
	latest := latestUserTurn(history)
	if i := p.pick(after+1, history, latest); i >= 0 {
		return i, nil
	}
	hasResults := false
	for _, m := range latest {
		for _, b := range m.Content {
			if b.Type == llm.BlockToolResult {
				hasResults = true
			}
		}
	}
	if after >= 0 && !hasResults {
		if i := p.pick(0, history, latest); i >= 0 {
			return i, nil
		}
	}
	where := "at the start"
	if after >= 0 {
		where = fmt.Sprintf("after turn %d", after+1)
	}
	return 0, fmt.Errorf("no scripted turn matches this request (%s of %d; latest user turn: %q)", where, len(p.turns), summary(latest))
}

// pick is the first turn from start whose condition holds, else the first
// from start without one; -1 if neither.
func (p *Provider) pick(start int, history, latest []llm.Message) int {
	for i := start; i < len(p.turns); i++ {
		if c := p.turns[i].When; c != nil && c.holds(history, latest) {
			return i
		}
	}
	for i := start; i < len(p.turns); i++ {
		if p.turns[i].When == nil {
			return i
		}
	}
	return -1
}

// position is the index of the turn that produced the latest assistant
// message of history, -1 if there is none or it is not from this script.
func (p *Provider) position(history []llm.Message) int {
	for k := len(history) - 1; k >= 0; k-- {
		if history[k].Role != llm.RoleAssistant {
			continue
		}
		for i := len(p.turns) - 1; i >= 0; i-- {
			if p.turns[i].produced(history[k]) {
				return i
			}
		}
		return -1
	}
	return -1
}

// produced reports whether m is what t says: the same text (placeholders
// match anything) and the same tool calls.
func (t Turn) produced(m llm.Message) bool {
	var text strings.Builder
	var calls []llm.ContentBlock
	for _, b := range m.Content {
		switch b.Type {
		case llm.BlockText:
			text.WriteString(b.Text)
		case llm.BlockToolUse:
			calls = append(calls, b)
		}
	}
	if !matchTemplate(t.Text, text.String()) || len(calls) != len(t.ToolCalls) {
		return false
	}
	for j, c := range t.ToolCalls {
		if calls[j].Name != c.Name || !sameJSON(calls[j].Input, c.Input) {
			return false
		}
	}
	return true
}

func (c *Condition) holds(history, latest []llm.Message) bool {
	if c.UserContains != "" && !anyText(latest, func(_ llm.Message, s string) bool { return strings.Contains(s, c.UserContains) }) {
		return false
	}
	if c.NoticeContains != "" && notice(latest, c.NoticeContains) == "" {
		return false
	}
	if c.HasImage && !slices.ContainsFunc(latest, func(m llm.Message) bool { return len(m.Images()) > 0 }) {
		return false
	}
	if c.ToolResultFor != "" || c.ToolResultContains != "" {
		names := toolNames(history)
		found := false
		for _, m := range latest {
			for _, b := range m.Content {
				if b.Type != llm.BlockToolResult {
					continue
				}
				if (c.ToolResultFor == "" || names[b.ToolUseID] == c.ToolResultFor) &&
					(c.ToolResultContains == "" || strings.Contains(b.Content, c.ToolResultContains)) {
					found = true
				}
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// latestUserTurn is the messages after the last assistant message.
func latestUserTurn(history []llm.Message) []llm.Message {
	for k := len(history) - 1; k >= 0; k-- {
		if history[k].Role == llm.RoleAssistant {
			return history[k+1:]
		}
	}
	return history
}

func anyText(ms []llm.Message, f func(llm.Message, string) bool) bool {
	for _, m := range ms {
		for _, b := range m.Content {
			if b.Type == llm.BlockText && f(m, b.Text) {
				return true
			}
		}
	}
	return false
}

// notice returns the first notice text of ms containing sub ("" for any).
func notice(ms []llm.Message, sub string) string {
	var found string
	anyText(ms, func(m llm.Message, s string) bool {
		if (m.Kind == llm.KindNotice || isNoticeText(s)) && strings.Contains(s, sub) {
			found = s
			return true
		}
		return false
	})
	return found
}

// noticeTag is the bracketed "[… notice]" tag host notices carry, found
// wherever a view may have wrapped them.
var noticeTag = regexp.MustCompile(`\[[^\]\n]*notice\]`)

func isNoticeText(s string) bool { return noticeTag.MatchString(s) }

func toolNames(history []llm.Message) map[string]string {
	names := map[string]string{}
	for _, m := range history {
		for _, b := range m.Content {
			if b.Type == llm.BlockToolUse {
				names[b.ID] = b.Name
			}
		}
	}
	return names
}

// render fills a turn's placeholders from the request.
func render(text string, history, latest []llm.Message) string {
	if strings.Contains(text, "{{notice") {
		n := notice(latest, "")
		text = strings.ReplaceAll(text, "{{notice}}", noticeHead(n))
		text = strings.ReplaceAll(text, "{{notice_output}}", noticeOutput(n))
	}
	if strings.Contains(text, "{{tool_result}}") {
		var last string
		for _, m := range latest {
			for _, b := range m.Content {
				if b.Type == llm.BlockToolResult {
					last = b.Content
				}
			}
		}
		text = strings.ReplaceAll(text, "{{tool_result}}", firstLine(last))
	}
	return text
}

// noticeHead is the line of a notice that carries its tag, from after
// the tag (e.g. "job 1 (sleep) exited 0 after 3s.").
func noticeHead(n string) string {
	for _, line := range strings.Split(n, "\n") {
		if loc := noticeTag.FindStringIndex(line); loc != nil {
			return strings.TrimSpace(line[loc[1]:])
		}
	}
	return firstLine(n)
}

// noticeOutput is the last line of a notice's "Last output:" section.
func noticeOutput(n string) string {
	_, tail, ok := strings.Cut(n, "Last output:\n")
	if !ok {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(tail), "\n")
	// A wrapper's closing markup is not the notice's.
	for len(lines) > 0 && strings.HasPrefix(strings.TrimSpace(lines[len(lines)-1]), "</") {
		lines = lines[:len(lines)-1]
	}
	// The output ends where the notice's closing ask begins: the ask is the
	// notice's last line.
	if len(lines) > 1 {
		lines = lines[:len(lines)-1]
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return ""
}

var placeholders = []string{"{{notice}}", "{{notice_output}}", "{{tool_result}}"}

// matchTemplate reports whether s is tmpl with its placeholders filled in.
func matchTemplate(tmpl, s string) bool {
	for _, ph := range placeholders[1:] {
		tmpl = strings.ReplaceAll(tmpl, ph, placeholders[0])
	}
	parts := strings.Split(tmpl, placeholders[0])
	if len(parts) == 1 {
		return tmpl == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for _, part := range parts[1 : len(parts)-1] {
		i := strings.Index(s, part)
		if i < 0 {
			return false
		}
		s = s[i+len(part):]
	}
	return strings.HasSuffix(s, parts[len(parts)-1])
}

func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 {
		a = json.RawMessage("{}")
	}
	if len(b) == 0 {
		b = json.RawMessage("{}")
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	ca, _ := json.Marshal(x)
	cb, _ := json.Marshal(y)
	return bytes.Equal(ca, cb)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func summary(ms []llm.Message) string {
	var parts []string
	for _, m := range ms {
		for _, b := range m.Content {
			switch b.Type {
			case llm.BlockText:
				parts = append(parts, firstLine(b.Text))
			case llm.BlockToolResult:
				parts = append(parts, "tool result: "+firstLine(b.Content))
				if n := len(b.Images); n > 0 {
					parts = append(parts, fmt.Sprintf("%d image(s)", n))
				}
			case llm.BlockImage:
				parts = append(parts, "an image")
			}
		}
	}
	s := []rune(strings.Join(parts, " | "))
	if len(s) > 200 {
		return string(s[:200]) + "…"
	}
	return string(s)
}

// words splits s into word-sized deltas that concatenate back to s.
func words(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}
