package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"testing"
	"time"

	"jetway/pkg/agent"
	"jetway/pkg/agent/tool"
	"jetway/pkg/llm"
)

// reply is one scripted model answer of fakeModel.
type reply struct {
	text     string
	thinking string
	tools    []llm.ContentBlock
	stop     llm.StopReason
	usage    llm.Usage
	err      error
	// before runs as the call starts, with the request it got.
	before func(req llm.CompletionRequest)
	// hold, when set, makes the stream wait after its tool calls (before
	// the message ends) until hold is closed or the call is cancelled.
	hold chan struct{}
}

// fakeModel is an llm.Provider playing scripted replies in order and
// keeping every request, for tests of the loop's control flow; the tests
// through a real provider and wire protocol are in provider_test.go.
type fakeModel struct {
	mu      sync.Mutex
	replies []reply
	reqs    []llm.CompletionRequest
}

func newModel(rs ...reply) *fakeModel { return &fakeModel{replies: rs} }

func (f *fakeModel) Name() string { return "fake" }

func (f *fakeModel) requests() []llm.CompletionRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

func (f *fakeModel) next(req llm.CompletionRequest) (reply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	if len(f.replies) == 0 {
		return reply{}, errors.New("fake model: no reply left")
	}
	r := f.replies[0]
	f.replies = f.replies[1:]
	return r, nil
}

func (r reply) message() (llm.Message, llm.StopReason) {
	m := llm.Message{Role: llm.RoleAssistant}
	if r.thinking != "" {
		m.Content = append(m.Content, llm.ContentBlock{Type: llm.BlockThinking, Text: r.thinking, Signature: "sig"})
	}
	if r.text != "" {
		m.Content = append(m.Content, llm.ContentBlock{Type: llm.BlockText, Text: r.text})
	}
	m.Content = append(m.Content, r.tools...)
	stop := r.stop
	if stop == "" {
		stop = llm.StopEndTurn
		if len(r.tools) > 0 {
			stop = llm.StopToolUse
		}
	}
	return m, stop
}

func (f *fakeModel) Stream(ctx context.Context, req llm.CompletionRequest) iter.Seq2[llm.StreamEvent, error] {
	return func(yield func(llm.StreamEvent, error) bool) {
		r, err := f.next(req)
		if err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		if r.before != nil {
			r.before(req)
		}
		if r.err != nil {
			yield(llm.StreamEvent{}, r.err)
			return
		}
		if r.thinking != "" && !yield(llm.StreamEvent{Type: llm.EventThinkingDelta, Text: r.thinking}, nil) {
			return
		}
		if r.text != "" && !yield(llm.StreamEvent{Type: llm.EventTextDelta, Text: r.text}, nil) {
			return
		}
		for _, b := range r.tools {
			if !yield(llm.StreamEvent{Type: llm.EventToolUse, Block: &b}, nil) {
				return
			}
		}
		if r.hold != nil {
			select {
			case <-r.hold:
			case <-ctx.Done():
				yield(llm.StreamEvent{}, ctx.Err())
				return
			}
		}
		m, stop := r.message()
		yield(llm.StreamEvent{Type: llm.EventMessageEnd, Message: &m, StopReason: stop, Usage: &r.usage}, nil)
	}
}

func (f *fakeModel) Complete(ctx context.Context, req llm.CompletionRequest) (llm.Message, llm.StopReason, llm.Usage, error) {
	r, err := f.next(req)
	if err != nil {
		return llm.Message{}, "", llm.Usage{}, err
	}
	if r.before != nil {
		r.before(req)
	}
	if r.err != nil {
		return llm.Message{}, "", llm.Usage{}, r.err
	}
	m, stop := r.message()
	return m, stop, r.usage, nil
}

// recorder keeps what the loop records; refuse, when set, decides whether
// a message is refused.
type recorder struct {
	mu         sync.Mutex
	msgs       []llm.Message
	usages     []llm.Usage
	boundaries []llm.BoundaryMeta
	refuse     func(m llm.Message) error
}

func (r *recorder) RecordMessage(m llm.Message, u llm.Usage) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuse != nil {
		if err := r.refuse(m); err != nil {
			return err
		}
	}
	r.msgs = append(r.msgs, m)
	r.usages = append(r.usages, u)
	return nil
}

func (r *recorder) RecordBoundary(meta llm.BoundaryMeta) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.boundaries = append(r.boundaries, meta)
}

func (r *recorder) recorded() []llm.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

func call(id, name, input string) llm.ContentBlock {
	if input == "" {
		input = "{}"
	}
	return llm.ContentBlock{Type: llm.BlockToolUse, ID: id, Name: name, Input: json.RawMessage(input)}
}

// run drains a Query and returns its events and terminal, failing the test
// if it does not end in time.
func run(t *testing.T, ctx context.Context, in agent.QueryInput, deps agent.QueryDeps) ([]agent.Event, *agent.Terminal) {
	t.Helper()
	type out struct {
		evs  []agent.Event
		term *agent.Terminal
	}
	done := make(chan out, 1)
	go func() {
		var o out
		for ev, err := range agent.Query(ctx, in, deps) {
			if err != nil {
				panic(fmt.Sprintf("Query yielded an error beside %s: %v", ev.Kind, err))
			}
			o.evs = append(o.evs, ev)
			if ev.Kind == agent.KindResult {
				o.term = ev.Terminal
			}
		}
		done <- o
	}()
	select {
	case o := <-done:
		if o.term == nil {
			t.Fatal("no result event")
		}
		return o.evs, o.term
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not end")
		return nil, nil
	}
}

func registry(t *testing.T, ts ...tool.Tool) *tool.Registry {
	t.Helper()
	r, err := tool.NewRegistry(ts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// echo is a read-only tool answering with its input.
func echo() tool.Tool {
	return tool.Func{Name: "echo", IsReadOnly: true, Fn: func(_ context.Context, c tool.Call) (tool.Result, error) {
		return tool.Result{Content: "echo " + string(c.Input)}, nil
	}}
}

// assertPaired fails if a tool call in msgs has no result in the next
// message.
func assertPaired(t *testing.T, msgs []llm.Message) {
	t.Helper()
	for i, m := range msgs {
		for _, u := range m.ToolUses() {
			if i+1 >= len(msgs) || !slices.ContainsFunc(msgs[i+1].Content, func(b llm.ContentBlock) bool {
				return b.Type == llm.BlockToolResult && b.ToolUseID == u.ID
			}) {
				t.Fatalf("tool call %s (message %d) has no result in the next message: %+v", u.ID, i, msgs)
			}
		}
	}
}

func kinds(evs []agent.Event) []agent.EventKind {
	var ks []agent.EventKind
	for _, e := range evs {
		ks = append(ks, e.Kind)
	}
	return ks
}

func texts(msgs []llm.Message) []string {
	var s []string
	for _, m := range msgs {
		s = append(s, string(m.Role)+":"+m.Text())
	}
	return s
}

// clock is a test clock MaxDuration reads.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func userInput(s string) []llm.Message {
	return []llm.Message{{ID: "in", Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: s}}}}
}
