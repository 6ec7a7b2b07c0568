package compact_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"jetway/pkg/agent"
	"jetway/pkg/agent/compact"
	"jetway/pkg/agent/tool"
	"jetway/pkg/llm"
)

// history is a conversation of n tool exchanges whose results are size
// characters each, ending with a user question.
func history(n, size int) []llm.Message {
	msgs := []llm.Message{{ID: "u0", Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "start"}}}}
	for i := range n {
		id := fmt.Sprintf("t%d", i)
		msgs = append(msgs,
			llm.Message{ID: "a" + id, Role: llm.RoleAssistant, Content: []llm.ContentBlock{
				{Type: llm.BlockText, Text: strings.Repeat("thinking aloud ", 20)},
				{Type: llm.BlockToolUse, ID: id, Name: "read", Input: json.RawMessage(`{"path":"f"}`)},
			}},
			llm.Message{ID: "r" + id, Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockToolResult, ToolUseID: id, Content: strings.Repeat("x", size)}}},
		)
	}
	return append(msgs, llm.Message{ID: "last", Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "and now?"}}})
}

func deepCopy(t *testing.T, ms []llm.Message) []llm.Message {
	t.Helper()
	raw, _ := json.Marshal(ms)
	var out []llm.Message
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// apply appends a compaction the way the loop does.
func apply(msgs []llm.Message, c *agent.Compaction) []llm.Message {
	s := c.Summary
	s.Kind = llm.KindCompactSummary
	return append(slices.Clone(msgs), llm.BoundaryMessage(c.Boundary), s)
}

func assertPairedView(t *testing.T, view []llm.Message) {
	t.Helper()
	for i, m := range view {
		for _, u := range m.ToolUses() {
			if i+1 >= len(view) || view[i+1].Content[0].Type != llm.BlockToolResult {
				t.Fatalf("view: call %s without results first in the next turn", u.ID)
			}
		}
		if i > 0 && view[i-1].Role == m.Role && m.Role == llm.RoleUser {
			t.Fatalf("view: two user turns in a row at %d", i)
		}
	}
	if len(view) > 0 && hasResult(view[0]) {
		t.Fatal("view starts with tool results")
	}
}

func hasResult(m llm.Message) bool {
	return slices.ContainsFunc(m.Content, func(b llm.ContentBlock) bool { return b.Type == llm.BlockToolResult })
}

func TestView_clears_old_large_tool_results_and_never_edits_history(t *testing.T) {
	c := compact.New(compact.Config{ContextWindow: 10000, ClearOver: 1000, KeepToolResults: 2})
	hist := history(6, 4000) // ~6000 tokens: past ClearAt
	before := deepCopy(t, hist)
	view := c.View(t.Context(), hist)
	if !reflect.DeepEqual(hist, before) {
		t.Fatal("View edited the history")
	}
	var cleared, kept int
	for _, m := range view {
		for _, b := range m.Content {
			if b.Type != llm.BlockToolResult {
				continue
			}
			if strings.HasPrefix(b.Content, "[old tool result cleared") {
				cleared++
			} else {
				kept++
			}
		}
	}
	if cleared != 4 || kept != 2 {
		t.Fatalf("cleared %d kept %d, want 4 and the newest 2", cleared, kept)
	}
	small := compact.New(compact.Config{ContextWindow: 1000000})
	if v := small.View(t.Context(), hist); !reflect.DeepEqual(v, llm.MessagesForAPI(hist)) {
		t.Fatal("View changed a request far from the window")
	}
}

func TestView_clears_the_images_of_old_tool_results_and_keeps_the_newest(t *testing.T) {
	c := compact.New(compact.Config{ContextWindow: 10000, ClearOver: 1000, KeepToolResults: 1})
	hist := history(4, 10) // small texts: only the images put it past ClearAt
	img := llm.Image{MediaType: "image/png", Data: "iVBORw0KGgo="}
	for i := range hist {
		for j := range hist[i].Content {
			if hist[i].Content[j].Type == llm.BlockToolResult {
				hist[i].Content[j].Images = []llm.Image{img, img}
			}
		}
	}
	before := deepCopy(t, hist)
	view := c.View(t.Context(), hist)
	if !reflect.DeepEqual(hist, before) {
		t.Fatal("View edited the history")
	}
	var results []llm.ContentBlock
	for _, m := range view {
		for _, b := range m.Content {
			if b.Type == llm.BlockToolResult {
				results = append(results, b)
			}
		}
	}
	for i, b := range results[:3] {
		if len(b.Images) != 0 || b.Content != "xxxxxxxxxx\n"+fmt.Sprintf(compact.ClearedToolImages, 2) {
			t.Errorf("old result %d: %q with %d images", i, b.Content, len(b.Images))
		}
	}
	if last := results[3]; len(last.Images) != 2 || last.Content != "xxxxxxxxxx" {
		t.Errorf("the newest result changed: %q with %d images", last.Content, len(last.Images))
	}
	if llm.EstimateTokens(view) >= llm.EstimateTokens(llm.MessagesForAPI(hist)) {
		t.Error("clearing images did not shrink the estimate")
	}
}

func TestPre_does_nothing_under_the_threshold(t *testing.T) {
	c := compact.New(compact.Config{ContextWindow: 1000000})
	comp, err := c.Pre(t.Context(), history(3, 100), 0)
	if comp != nil || err != nil {
		t.Fatalf("Pre = %+v, %v", comp, err)
	}
	// A provider-reported size counts even when the estimate is small.
	c = compact.New(compact.Config{ContextWindow: 1000})
	comp, err = c.Pre(t.Context(), history(3, 10), 990)
	if comp == nil || err != nil {
		t.Fatalf("Pre ignored lastInputTokens: %+v, %v", comp, err)
	}
}

func TestPre_folds_the_oldest_part_behind_a_boundary(t *testing.T) {
	c := compact.New(compact.Config{ContextWindow: 4000})
	hist := history(10, 1000)
	before := deepCopy(t, hist)
	comp, err := c.Pre(t.Context(), hist, 0)
	if err != nil || comp == nil {
		t.Fatalf("Pre = %+v, %v", comp, err)
	}
	if !reflect.DeepEqual(hist, before) {
		t.Fatal("Pre edited the history")
	}
	b := comp.Boundary
	if b.Strategy != "fold" || b.Trigger != "proactive" || b.PostTokens >= b.PreTokens || b.PostTokens > 2000 {
		t.Fatalf("boundary %+v", b)
	}
	if hist[b.KeepFrom-1].ID != b.LastFoldedID {
		t.Errorf("KeepFrom %d and LastFoldedID %q disagree", b.KeepFrom, b.LastFoldedID)
	}
	after := apply(hist, comp)
	view := c.View(t.Context(), after)
	if !strings.HasPrefix(view[0].Text(), compact.FoldHeader) || !strings.Contains(view[0].Text(), "called read(") {
		t.Fatalf("view starts with %q", view[0].Text())
	}
	if last := view[len(view)-1]; last.Text() != "and now?" {
		t.Fatalf("newest message not kept: %+v", last)
	}
	assertPairedView(t, view)

	// A second compaction folds the first summary into the next one.
	more := append(after, history(10, 1000)[1:]...)
	c2 := compact.New(compact.Config{ContextWindow: 12000, Threshold: 0.3})
	comp2, err := c2.Pre(t.Context(), more, 0)
	if err != nil || comp2 == nil || comp2.Boundary.Strategy != "fold" {
		t.Fatalf("second Pre = %+v, %v", comp2, err)
	}
	view = c2.View(t.Context(), apply(more, comp2))
	if !strings.Contains(view[0].Text(), compact.FoldHeader+compact.FoldHeader) {
		t.Errorf("earlier summary lost (%+v): %q", comp2.Boundary, view[0].Text())
	}
	assertPairedView(t, view)
}

// summariser is a Provider whose Complete answers with a fixed summary (or
// error) and keeps what it was asked.
type summariser struct {
	mu   sync.Mutex
	text string
	err  error
	reqs []llm.CompletionRequest
}

func (s *summariser) Name() string { return "summariser" }
func (s *summariser) Stream(context.Context, llm.CompletionRequest) iter.Seq2[llm.StreamEvent, error] {
	return func(yield func(llm.StreamEvent, error) bool) { yield(llm.StreamEvent{}, errors.New("not streamed")) }
}
func (s *summariser) Complete(_ context.Context, req llm.CompletionRequest) (llm.Message, llm.StopReason, llm.Usage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, req)
	return llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: s.text}}}, llm.StopEndTurn, llm.Usage{}, s.err
}

// chatty is a history whose fold digest is itself too large: many long turns.
func chatty(n int) []llm.Message {
	var msgs []llm.Message
	for i := range n {
		msgs = append(msgs,
			llm.Message{ID: fmt.Sprint("u", i), Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: strings.Repeat("question ", 60)}}},
			llm.Message{ID: fmt.Sprint("a", i), Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: strings.Repeat("answer ", 60)}}},
		)
	}
	return append(msgs, llm.UserText("now"))
}

func TestPre_summarises_through_the_model_when_a_fold_is_not_enough(t *testing.T) {
	s := &summariser{text: "the user asked many questions; all answered"}
	c := compact.New(compact.Config{ContextWindow: 4000, Summariser: s, Model: "m"})
	comp, err := c.Pre(t.Context(), chatty(40), 0)
	if err != nil || comp == nil {
		t.Fatalf("Pre = %+v, %v", comp, err)
	}
	if comp.Boundary.Strategy != "summarise" || comp.Summary.Text() != compact.SummaryHeader+s.text {
		t.Fatalf("compaction %+v", comp)
	}
	req := s.reqs[0]
	last := req.Messages[len(req.Messages)-1]
	if req.Model != "m" || !strings.Contains(last.Text(), compact.SummaryPrompt) {
		t.Fatalf("summary request %+v", req)
	}
	assertPairedView(t, c.View(t.Context(), apply(chatty(40), comp)))
}

func TestPre_drops_the_oldest_when_nothing_else_fits(t *testing.T) {
	s := &summariser{err: errors.New("overloaded")}
	c := compact.New(compact.Config{ContextWindow: 4000, Summariser: s})
	hist := chatty(40)
	comp, err := c.Pre(t.Context(), hist, 0)
	if err != nil || comp == nil {
		t.Fatalf("Pre = %+v, %v", comp, err)
	}
	if comp.Boundary.Strategy != "drop_oldest" || !strings.Contains(comp.Summary.Text(), "were dropped") || comp.Boundary.PostTokens > 2000 {
		t.Fatalf("compaction %+v", comp.Boundary)
	}
}

func TestPre_refuses_a_request_past_the_hard_limit(t *testing.T) {
	c := compact.New(compact.Config{ContextWindow: 1000})
	huge := []llm.Message{llm.UserText(strings.Repeat("x", 8000))}
	_, err := c.Pre(t.Context(), huge, 0)
	if !errors.Is(err, agent.ErrBlockingLimit) {
		t.Fatalf("err = %v, want ErrBlockingLimit", err)
	}
}

func TestReactive_keeps_less_each_attempt_until_nothing_is_left(t *testing.T) {
	c := compact.New(compact.Config{ContextWindow: 100000})
	hist := history(8, 200)
	var kept []int
	for attempt := 1; attempt <= 20; attempt++ {
		comp, err := c.Reactive(t.Context(), hist, attempt)
		if err != nil {
			t.Fatal(err)
		}
		if comp == nil {
			break
		}
		if comp.Boundary.Trigger != "reactive" {
			t.Fatalf("trigger %q", comp.Boundary.Trigger)
		}
		hist = apply(hist, comp)
		_, _, keep := llm.VisibleRange(hist)
		kept = append(kept, len(keep))
		assertPairedView(t, c.View(t.Context(), hist))
	}
	if len(kept) == 0 || kept[len(kept)-1] > 2 {
		t.Fatalf("visible messages after each attempt %v: never got down to the newest", kept)
	}
	if comp, _ := c.Reactive(t.Context(), hist, 1); comp != nil {
		t.Fatalf("compacted with nothing left to fold: %+v", comp.Boundary)
	}
}

// --- through the loop ---

type overflowModel struct {
	mu        sync.Mutex
	overflows int // how many calls overflow before one answers
	calls     int
	reqs      [][]llm.Message
	usage     llm.Usage
}

func (m *overflowModel) Name() string { return "overflow" }
func (m *overflowModel) Complete(context.Context, llm.CompletionRequest) (llm.Message, llm.StopReason, llm.Usage, error) {
	return llm.Message{}, "", llm.Usage{}, errors.New("not used")
}
func (m *overflowModel) Stream(_ context.Context, req llm.CompletionRequest) iter.Seq2[llm.StreamEvent, error] {
	return func(yield func(llm.StreamEvent, error) bool) {
		m.mu.Lock()
		m.calls++
		m.reqs = append(m.reqs, req.Messages)
		over := m.calls <= m.overflows
		m.mu.Unlock()
		if over {
			yield(llm.StreamEvent{}, &llm.Error{Kind: llm.ErrKindOverflow, Provider: "overflow", StatusCode: 400, Err: errors.New("prompt is too long")})
			return
		}
		msg := llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "fits now"}}}
		yield(llm.StreamEvent{Type: llm.EventMessageEnd, Message: &msg, StopReason: llm.StopEndTurn, Usage: &m.usage}, nil)
	}
}

type recorder struct {
	mu         sync.Mutex
	msgs       []llm.Message
	boundaries []llm.BoundaryMeta
}

func (r *recorder) RecordMessage(m llm.Message, _ llm.Usage) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
	return nil
}

func (r *recorder) RecordBoundary(b llm.BoundaryMeta) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.boundaries = append(r.boundaries, b)
}

func query(t *testing.T, in agent.QueryInput) *agent.Terminal {
	t.Helper()
	var term *agent.Terminal
	for ev := range agent.Query(t.Context(), in, agent.QueryDeps{}) {
		if ev.Kind == agent.KindResult {
			term = ev.Terminal
		}
	}
	if term == nil {
		t.Fatal("no terminal")
	}
	return term
}

func TestQuery_compacts_reactively_on_overflow_without_touching_recorded_history(t *testing.T) {
	m := &overflowModel{overflows: 2}
	rec := &recorder{}
	input := history(8, 200)
	before := deepCopy(t, input)
	term := query(t, agent.QueryInput{Provider: m, Messages: input, Compactor: compact.New(compact.Config{ContextWindow: 100000}), Recorder: rec})
	if term.Reason != agent.ReasonCompleted {
		t.Fatalf("terminal %+v", term)
	}
	want := []agent.ContinueReason{agent.ContinueReactiveCompactRetry, agent.ContinueReactiveCompactRetry}
	if !slices.Equal(term.Continues, want) {
		t.Fatalf("continues %v", term.Continues)
	}
	if !reflect.DeepEqual(input, before) || !reflect.DeepEqual(term.Messages[:len(input)], before) {
		t.Fatal("compaction edited the history")
	}
	// Recorded: boundary, summary, boundary, summary, answer — exactly the
	// history's new tail.
	if !reflect.DeepEqual(rec.msgs, term.Messages[len(input):]) {
		t.Fatalf("recorded %d messages that are not the history's tail", len(rec.msgs))
	}
	if len(rec.boundaries) != 2 || rec.boundaries[0].Trigger != "reactive" {
		t.Fatalf("boundaries %+v", rec.boundaries)
	}
	if len(m.reqs[2]) >= len(m.reqs[0]) {
		t.Errorf("retry sent %d messages, first try %d", len(m.reqs[2]), len(m.reqs[0]))
	}
}

func TestQuery_prompt_too_long_when_reactive_compaction_is_exhausted(t *testing.T) {
	m := &overflowModel{overflows: 1000}
	term := query(t, agent.QueryInput{Provider: m, Messages: history(8, 200), Compactor: compact.New(compact.Config{ContextWindow: 100000})})
	if term.Reason != agent.ReasonPromptTooLong || !llm.IsOverflow(term.Err) {
		t.Fatalf("terminal %+v", term)
	}
	if len(term.Continues) == 0 || len(term.Continues) > agent.MaxReactiveCompactions {
		t.Fatalf("continues %v", term.Continues)
	}
}

func TestQuery_blocking_limit_sends_no_request(t *testing.T) {
	m := &overflowModel{}
	term := query(t, agent.QueryInput{Provider: m, Messages: []llm.Message{llm.UserText(strings.Repeat("x", 8000))}, Compactor: compact.New(compact.Config{ContextWindow: 1000})})
	if term.Reason != agent.ReasonBlockingLimit || !errors.Is(term.Err, agent.ErrBlockingLimit) || m.calls != 0 {
		t.Fatalf("terminal %+v after %d calls", term, m.calls)
	}
}

func TestQuery_compacts_proactively_from_the_reported_context_size(t *testing.T) {
	rec := &recorder{}
	m := &overflowModel{usage: llm.Usage{InputTokens: 3900}}
	echo := tool.Func{Name: "echo", IsReadOnly: true, Fn: func(context.Context, tool.Call) (tool.Result, error) { return tool.Result{Content: "e"}, nil }}
	reg, _ := tool.NewRegistry(echo)
	// First answer reports a nearly full context; the model then ends.
	term := query(t, agent.QueryInput{Provider: m, Messages: history(8, 200), Tools: reg, Compactor: compact.New(compact.Config{ContextWindow: 4000}), Recorder: rec, TokenBudget: 1000})
	if len(rec.boundaries) == 0 || rec.boundaries[0].Trigger != "proactive" {
		t.Fatalf("no proactive compaction: %+v (terminal %v)", rec.boundaries, term.Reason)
	}
}

// Through Views, the View that follows Pre builds only what the history
// added since Pre sized it (nothing): the request's view is the one a
// fresh build makes, for a fraction of a full build's bytes, and a grown
// history is never served the shorter one's view.
func TestPre_then_View_through_Views_builds_the_view_once(t *testing.T) {
	ctx := t.Context()
	msgs := history(200, 50)
	want := deepCopy(t, compact.New(compact.Config{ContextWindow: 1000000}).View(ctx, msgs))

	c := compact.New(compact.Config{ContextWindow: 1000000, Views: &llm.ViewCache{}})
	if comp, err := c.Pre(ctx, msgs, 0); comp != nil || err != nil {
		t.Fatalf("Pre = %+v, %v", comp, err)
	}
	if got := c.View(ctx, msgs); !reflect.DeepEqual(got, want) {
		t.Fatal("the view after Pre differs from a fresh one")
	}
	grown := append(msgs[:len(msgs):len(msgs)], llm.UserText("one more"))
	if _, err := c.Pre(ctx, msgs, 0); err != nil {
		t.Fatal(err)
	}
	if v := c.View(ctx, grown); !strings.HasSuffix(v[len(v)-1].Text(), "one more") {
		t.Fatalf("View of a grown history ends %q: it got the shorter one's view", v[len(v)-1].Text())
	}

	full := compact.New(compact.Config{ContextWindow: 1000000})
	fullBytes := allocated(func() { _, _ = full.Pre(ctx, msgs, 0); full.View(ctx, msgs) })
	cachedBytes := allocated(func() { _, _ = c.Pre(ctx, msgs, 0); c.View(ctx, msgs) })
	if cachedBytes*4 > fullBytes {
		t.Fatalf("Pre then View through Views allocates %d bytes, in full %d: the view was built again", cachedBytes, fullBytes)
	}
}

// allocated is how many bytes 20 runs of f allocate.
func allocated(f func()) uint64 {
	f() // warm: what a first run builds is not what the test compares
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 20 {
		f()
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
