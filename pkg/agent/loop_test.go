package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"jetway/pkg/agent"
	"jetway/pkg/agent/compact"
	"jetway/pkg/agent/guide"
	"jetway/pkg/agent/permission"
	"jetway/pkg/agent/tool"
	"jetway/pkg/llm"
)

func TestQuery_completes_when_the_model_ends_its_turn(t *testing.T) {
	m := newModel(reply{thinking: "hmm", text: "hello", usage: llm.Usage{InputTokens: 10, OutputTokens: 3}})
	rec := &recorder{}
	evs, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("hi"), Recorder: rec}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted || term.Err != nil || term.Text != "hello" || term.Turns != 1 {
		t.Fatalf("terminal = %+v", term)
	}
	want := []agent.EventKind{agent.KindThinking, agent.KindText, agent.KindUsage, agent.KindResult}
	if got := kinds(evs); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	got := rec.recorded()
	if len(got) != 1 || got[0].Role != llm.RoleAssistant || got[0].ID == "" || rec.usages[0].OutputTokens != 3 {
		t.Fatalf("recorded %+v usage %+v", got, rec.usages)
	}
	if len(term.Messages) != 2 || term.Messages[0].ID != "in" {
		t.Fatalf("terminal history %+v", texts(term.Messages))
	}
}

func TestQuery_runs_tools_and_takes_the_next_turn(t *testing.T) {
	m := newModel(
		reply{tools: []llm.ContentBlock{call("t1", "echo", `{"a":1}`), call("t2", "echo", `{"b":2}`)}, usage: llm.Usage{OutputTokens: 5}},
		reply{text: "done", usage: llm.Usage{OutputTokens: 7}},
	)
	rec := &recorder{}
	evs, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("go"), Tools: registry(t, echo()), Recorder: rec}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted || !slices.Equal(term.Continues, []agent.ContinueReason{agent.ContinueNextTurn}) {
		t.Fatalf("terminal %+v", term)
	}
	var results []string
	var usages []int
	for _, e := range evs {
		if e.Kind == agent.KindToolResult {
			results = append(results, e.ToolResult.ToolUseID+"="+e.ToolResult.Content)
		}
		if e.Kind == agent.KindUsage {
			usages = append(usages, e.Usage.OutputTokens)
		}
	}
	if !slices.Equal(results, []string{`t1=echo {"a":1}`, `t2=echo {"b":2}`}) {
		t.Errorf("results %v", results)
	}
	if !slices.Equal(usages, []int{5, 12}) {
		t.Errorf("usage events %v, want cumulative 5 then 12", usages)
	}
	got := rec.recorded()
	if len(got) != 3 || len(got[1].Content) != 2 || got[1].Role != llm.RoleUser {
		t.Fatalf("recorded %v", texts(got))
	}
	assertPaired(t, term.Messages)
	second := m.requests()[1].Messages
	if last := second[len(second)-1]; last.Content[0].ToolUseID != "t1" {
		t.Errorf("second request does not end with the results: %+v", last)
	}
}

func TestQuery_records_the_call_before_a_tool_with_side_effects_runs(t *testing.T) {
	rec := &recorder{}
	var sawRecorded atomic.Bool
	write := tool.Func{Name: "write", Fn: func(context.Context, tool.Call) (tool.Result, error) {
		got := rec.recorded()
		sawRecorded.Store(len(got) == 1 && len(got[0].ToolUses()) == 1)
		return tool.Result{Content: "written"}, nil
	}}
	m := newModel(reply{tools: []llm.ContentBlock{call("w", "write", "")}}, reply{text: "ok"})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("go"), Tools: registry(t, write), Recorder: rec, PermissionMode: permission.AcceptAll}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted {
		t.Fatalf("terminal %+v", term)
	}
	if !sawRecorded.Load() {
		t.Fatal("the tool ran before its call was recorded")
	}
}

func TestQuery_a_refused_record_stops_before_any_further_tool_runs(t *testing.T) {
	var ran atomic.Int32
	write := tool.Func{Name: "write", Fn: func(context.Context, tool.Call) (tool.Result, error) {
		ran.Add(1)
		return tool.Result{Content: "written"}, nil
	}}
	fence := errors.New("wrong last sequence")
	rec := &recorder{refuse: func(m llm.Message) error {
		if len(m.ToolUses()) > 0 {
			return fence
		}
		return nil
	}}
	m := newModel(reply{tools: []llm.ContentBlock{call("w1", "write", ""), call("w2", "write", "")}}, reply{text: "never"})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("go"), Tools: registry(t, write), Recorder: rec, PermissionMode: permission.AcceptAll}, agent.QueryDeps{})
	if term.Reason != agent.ReasonRecordFailed || !errors.Is(term.Err, fence) {
		t.Fatalf("terminal %+v", term)
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("%d tools ran after the record was refused", n)
	}
	if n := len(m.requests()); n != 1 {
		t.Fatalf("%d model calls, want 1", n)
	}
	if len(term.Messages) != 1 {
		t.Fatalf("the refused message is in the history: %v", texts(term.Messages))
	}

	// A refused tool-result turn stops the loop before the next model call.
	rec2 := &recorder{refuse: func(m llm.Message) error {
		if m.Role == llm.RoleUser {
			return fence
		}
		return nil
	}}
	m2 := newModel(reply{tools: []llm.ContentBlock{call("w1", "write", "")}}, reply{tools: []llm.ContentBlock{call("w2", "write", "")}})
	ran.Store(0)
	_, term = run(t, t.Context(), agent.QueryInput{Provider: m2, Messages: userInput("go"), Tools: registry(t, write), Recorder: rec2, PermissionMode: permission.AcceptAll}, agent.QueryDeps{})
	if term.Reason != agent.ReasonRecordFailed || ran.Load() != 1 || len(m2.requests()) != 1 {
		t.Fatalf("terminal %v, ran %d, calls %d", term.Reason, ran.Load(), len(m2.requests()))
	}
}

func TestQuery_model_error(t *testing.T) {
	boom := &llm.Error{Kind: llm.ErrKindModel, Provider: "fake", StatusCode: 500, Err: errors.New("overloaded")}
	_, term := run(t, t.Context(), agent.QueryInput{Provider: newModel(reply{err: boom}), Messages: userInput("hi")}, agent.QueryDeps{})
	if term.Reason != agent.ReasonModelError || !errors.Is(term.Err, boom) {
		t.Fatalf("terminal %+v", term)
	}
}

func TestQuery_overflow_without_a_compactor_is_prompt_too_long(t *testing.T) {
	overflow := &llm.Error{Kind: llm.ErrKindOverflow, Provider: "fake", StatusCode: 400, Err: errors.New("prompt is too long")}
	_, term := run(t, t.Context(), agent.QueryInput{Provider: newModel(reply{err: overflow}), Messages: userInput("hi")}, agent.QueryDeps{})
	if term.Reason != agent.ReasonPromptTooLong || !llm.IsOverflow(term.Err) {
		t.Fatalf("terminal %+v", term)
	}
}

func TestQuery_cancelled_while_streaming(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	m := newModel(reply{text: "partial", hold: make(chan struct{}), before: func(llm.CompletionRequest) { cancel() }})
	rec := &recorder{}
	_, term := run(t, ctx, agent.QueryInput{Provider: m, Messages: userInput("hi"), Recorder: rec}, agent.QueryDeps{})
	if term.Reason != agent.ReasonAbortedStreaming || !errors.Is(term.Err, context.Canceled) {
		t.Fatalf("terminal %+v", term)
	}
	if got := rec.recorded(); len(got) != 0 {
		t.Fatalf("a cut-off message was recorded: %v", texts(got))
	}
}

func TestQuery_cancelled_during_tools_leaves_every_call_with_a_result(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan struct{})
	// Not read-only, so it starts only once the stream is over and its
	// call recorded: the cancellation lands during tools.
	slow := tool.Func{Name: "slow", Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
		close(started)
		<-ctx.Done()
		return tool.Result{}, ctx.Err()
	}}
	var wrote atomic.Bool
	write := tool.Func{Name: "write", Fn: func(context.Context, tool.Call) (tool.Result, error) {
		wrote.Store(true)
		return tool.Result{Content: "x"}, nil
	}}
	go func() {
		select {
		case <-started:
			cancel()
		case <-time.After(10 * time.Second):
		}
	}()
	m := newModel(reply{tools: []llm.ContentBlock{call("s", "slow", ""), call("w", "write", "")}})
	rec := &recorder{}
	_, term := run(t, ctx, agent.QueryInput{Provider: m, Messages: userInput("go"), Tools: registry(t, slow, write), Recorder: rec, PermissionMode: permission.AcceptAll}, agent.QueryDeps{})
	if term.Reason != agent.ReasonAbortedTools {
		t.Fatalf("terminal %+v", term)
	}
	if wrote.Load() {
		t.Error("a queued tool ran after cancellation")
	}
	got := rec.recorded()
	assertPaired(t, got)
	for _, b := range got[len(got)-1].Content {
		if b.Content != tool.Cancelled || !b.IsError {
			t.Errorf("result %+v, want the cancelled result", b)
		}
	}
}

func TestQuery_max_output_tokens_escalates_once_then_recovers_at_most_three_times(t *testing.T) {
	cut := func(s string) reply {
		return reply{text: s, stop: llm.StopMaxTokens, usage: llm.Usage{OutputTokens: 1}}
	}
	m := newModel(cut("a"), cut("b"), cut("c"), cut("d"), cut("e"))
	rec := &recorder{}
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("write a lot"), EscalateMaxTokens: true, MaxTokens: 1000, Recorder: rec}, agent.QueryDeps{})
	want := []agent.ContinueReason{agent.ContinueMaxOutputTokensEscalate, agent.ContinueMaxOutputTokensRecovery, agent.ContinueMaxOutputTokensRecovery, agent.ContinueMaxOutputTokensRecovery}
	if !slices.Equal(term.Continues, want) {
		t.Fatalf("continues %v, want %v", term.Continues, want)
	}
	if term.Reason != agent.ReasonCompleted || term.Err == nil {
		t.Fatalf("terminal %+v", term)
	}
	reqs := m.requests()
	if reqs[0].MaxTokens != 1000 || reqs[1].MaxTokens != agent.EscalatedMaxTokens {
		t.Errorf("caps %d then %d", reqs[0].MaxTokens, reqs[1].MaxTokens)
	}
	// The escalated retry replaced the first truncated answer; the others
	// are kept, each followed by the resume prompt.
	got := texts(rec.recorded())
	wantRec := []string{"assistant:b", "user:" + agent.ResumePrompt, "assistant:c", "user:" + agent.ResumePrompt, "assistant:d", "user:" + agent.ResumePrompt, "assistant:e"}
	if !slices.Equal(got, wantRec) {
		t.Fatalf("recorded %q", got)
	}
}

func TestQuery_stop_hooks_block_then_prevent(t *testing.T) {
	h := &hooks{stops: []stopAnswer{{blocking: []string{"tests fail"}}, {prevent: true, message: "policy"}}}
	m := newModel(reply{text: "done?"}, reply{text: "fixed"})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("go"), Hooks: h}, agent.QueryDeps{})
	if term.Reason != agent.ReasonStopHookPrevented || term.Err == nil || term.Err.Error() != "policy" {
		t.Fatalf("terminal %+v", term)
	}
	if !slices.Equal(term.Continues, []agent.ContinueReason{agent.ContinueStopHookBlocking}) {
		t.Fatalf("continues %v", term.Continues)
	}
	second := m.requests()[1].Messages
	if txt := second[len(second)-1].Text(); !strings.Contains(txt, "tests fail") {
		t.Fatalf("blocking error not handed to the model: %q", txt)
	}
}

type stopAnswer struct {
	prevent  bool
	blocking []string
	message  string
}

type hooks struct {
	stops    []stopAnswer
	blockPre string
	rewrite  []byte
	postStop bool
	post     atomic.Int32
}

func (h *hooks) PreToolUse(_ context.Context, name string, input []byte) (bool, string, []byte) {
	if name == h.blockPre {
		return true, "blocked: " + name, nil
	}
	return false, "", h.rewrite
}

func (h *hooks) PostToolUse(_ context.Context, name string, input, result []byte, isErr bool) (bool, string) {
	h.post.Add(1)
	return h.postStop, "post hook says stop"
}

func (h *hooks) Stop(context.Context, []llm.Message) (bool, []string, string) {
	if len(h.stops) == 0 {
		return false, nil, ""
	}
	s := h.stops[0]
	h.stops = h.stops[1:]
	return s.prevent, s.blocking, s.message
}

func TestQuery_hooks_block_rewrite_and_stop_tools(t *testing.T) {
	var seen atomic.Value
	rec := tool.Func{Name: "rec", IsReadOnly: true, Fn: func(_ context.Context, c tool.Call) (tool.Result, error) {
		seen.Store(string(c.Input))
		return tool.Result{Content: "ok"}, nil
	}}
	h := &hooks{blockPre: "echo", rewrite: []byte(`{"rewritten":true}`), postStop: true}
	m := newModel(reply{tools: []llm.ContentBlock{call("1", "echo", ""), call("2", "rec", `{"orig":1}`)}}, reply{text: "never"})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("go"), Tools: registry(t, echo(), rec), Hooks: h}, agent.QueryDeps{})
	if term.Reason != agent.ReasonHookStopped || term.Err == nil {
		t.Fatalf("terminal %+v", term)
	}
	if got, _ := seen.Load().(string); got != `{"rewritten":true}` {
		t.Errorf("tool saw %q, want the rewritten input", got)
	}
	res := term.Messages[len(term.Messages)-1].Content
	if res[0].Content != "blocked: echo" || !res[0].IsError {
		t.Errorf("blocked call result %+v", res[0])
	}
	if h.post.Load() != 1 {
		t.Errorf("PostToolUse ran %d times, want 1 (the blocked call never ran)", h.post.Load())
	}
	if len(m.requests()) != 1 {
		t.Error("the loop called the model again after a stop")
	}
}

func TestQuery_a_tool_can_stop_the_run(t *testing.T) {
	done := tool.Func{Name: "finish", IsReadOnly: true, Fn: func(context.Context, tool.Call) (tool.Result, error) {
		return tool.Result{Content: "bye", Stop: true, StopMessage: "finished"}, nil
	}}
	m := newModel(reply{tools: []llm.ContentBlock{call("1", "finish", "")}})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("go"), Tools: registry(t, done)}, agent.QueryDeps{})
	if term.Reason != agent.ReasonHookStopped || term.Err.Error() != "finished" {
		t.Fatalf("terminal %+v", term)
	}
	assertPaired(t, term.Messages)
}

func TestQuery_max_turns_without_and_with_settlement(t *testing.T) {
	loopy := func() *fakeModel {
		return newModel(
			reply{tools: []llm.ContentBlock{call("1", "echo", "")}},
			reply{tools: []llm.ContentBlock{call("2", "echo", "")}},
			reply{text: "wrapped up"},
		)
	}
	m := loopy()
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("go"), Tools: registry(t, echo()), MaxTurns: 1}, agent.QueryDeps{})
	if term.Reason != agent.ReasonMaxTurns || len(m.requests()) != 1 {
		t.Fatalf("terminal %+v after %d calls", term, len(m.requests()))
	}
	assertPaired(t, term.Messages)

	m = loopy()
	s := &agent.Settlement{Prompt: "generic", PromptByReason: map[agent.TerminalReason]string{agent.ReasonMaxTurns: "out of turns: write down what you found"}, DisabledTools: []string{"echo"}}
	_, term = run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("go"), Tools: registry(t, echo()), MaxTurns: 1, Settlement: s}, agent.QueryDeps{})
	if term.Reason != agent.ReasonMaxTurns || term.Text != "wrapped up" {
		t.Fatalf("settled terminal %+v", term)
	}
	reqs := m.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d calls, want 3 (one turn, two wrap-up turns)", len(reqs))
	}
	wrap := reqs[1]
	if len(wrap.Tools) != 0 {
		t.Errorf("disabled tool offered during wrap-up: %+v", wrap.Tools)
	}
	if txt := wrap.Messages[len(wrap.Messages)-1].Content; !slices.ContainsFunc(txt, func(b llm.ContentBlock) bool { return b.Text == "out of turns: write down what you found" }) {
		t.Errorf("wrap-up prompt missing: %+v", txt)
	}
	// The wrap-up's own call to the disabled tool is refused, not run.
	if res := term.Messages[len(term.Messages)-2].Content[0]; !res.IsError || !strings.Contains(res.Content, "not available") {
		t.Errorf("disabled tool ran during wrap-up: %+v", res)
	}
}

func TestQuery_max_duration_is_checked_at_turn_boundaries(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	m := newModel(
		reply{tools: []llm.ContentBlock{call("1", "echo", "")}, before: func(llm.CompletionRequest) { c.advance(time.Hour) }},
		reply{text: "never"},
	)
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("go"), Tools: registry(t, echo()), MaxDuration: time.Minute}, agent.QueryDeps{Now: c.Now})
	if term.Reason != agent.ReasonTimeout {
		t.Fatalf("terminal %+v", term)
	}
	// The turn that overran was finished, tools included, not cut.
	if len(m.requests()) != 1 || len(term.Messages) != 3 {
		t.Fatalf("calls %d, history %v", len(m.requests()), texts(term.Messages))
	}
	assertPaired(t, term.Messages)
}

func TestQuery_token_budget_continues_until_diminishing_returns(t *testing.T) {
	var rs []reply
	for _, n := range []int{1000, 1000, 100, 100, 100, 100} {
		rs = append(rs, reply{text: "more", usage: llm.Usage{OutputTokens: n}})
	}
	m := newModel(rs...)
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("go"), TokenBudget: 100000}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted {
		t.Fatalf("terminal %+v", term)
	}
	// 1000, 1000, 100 (3rd continuation), then 100: two small deltas in a
	// row after three continuations → stop.
	n := 0
	for _, c := range term.Continues {
		if c == agent.ContinueTokenBudget {
			n++
		}
	}
	if n != 3 || len(m.requests()) != 4 {
		t.Fatalf("%d budget continuations over %d calls, want 3 over 4: %v", n, len(m.requests()), term.Continues)
	}
	last := m.requests()[1].Messages
	if !strings.Contains(last[len(last)-1].Text(), "Token budget: 1000 of 100000") {
		t.Errorf("nudge text %q", last[len(last)-1].Text())
	}

	// Near the budget it stops at once.
	m = newModel(reply{text: "big", usage: llm.Usage{OutputTokens: 95}})
	_, term = run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("go"), TokenBudget: 100}, agent.QueryDeps{})
	if len(term.Continues) != 0 {
		t.Fatalf("continued past 90%%: %v", term.Continues)
	}
}

func TestQuery_delivers_notices_in_one_appended_turn_and_goes_on_for_late_ones(t *testing.T) {
	g := guide.NewNoticeGuide()
	g.Push("ce-1", "[background job notice] job 3 (gh) exited 0 after 21m.")
	g.Push("ce-2", "second")
	m := newModel(
		reply{text: "noted", before: func(llm.CompletionRequest) { g.Push("ce-3", "late") }},
		reply{text: "and the late one"},
	)
	rec := &recorder{}
	input := []llm.Message{
		{ID: "u1", Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "earlier"}}},
		{ID: "a1", Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "answer"}}},
	}
	before := slices.Clone(input)
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: input, Notices: g, Recorder: rec}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted || !slices.Equal(term.Continues, []agent.ContinueReason{agent.ContinueTaskNotification}) {
		t.Fatalf("terminal %+v", term)
	}
	if !reflect.DeepEqual(input, before) || !reflect.DeepEqual(term.Messages[:2], before) {
		t.Fatal("earlier history edited")
	}
	var delivers [][]string
	for _, r := range rec.recorded() {
		if r.Kind == llm.KindNotice {
			delivers = append(delivers, r.Delivers)
			if r.Role != llm.RoleUser || len(r.Content) != 1 {
				t.Errorf("notice turn %+v", r)
			}
		}
	}
	if !reflect.DeepEqual(delivers, [][]string{{"ce-1", "ce-2"}, {"ce-3"}}) {
		t.Fatalf("recorded Delivers %v", delivers)
	}
	first := m.requests()[0].Messages
	if last := first[len(first)-1]; !strings.Contains(last.Text(), "job 3 (gh) exited 0") || last.Delivers != nil {
		t.Errorf("first request's last turn %+v", last)
	}
	if g.HasPending() {
		t.Error("notice left pending")
	}
}

func TestQuery_a_refused_notice_turn_puts_its_notices_back(t *testing.T) {
	g := guide.NewNoticeGuide()
	g.Push("ce-1", "one")
	g.Push("ce-2", "two")
	rec := &recorder{refuse: func(m llm.Message) error {
		g.Push("ce-3", "newer") // arrives while the append is in flight
		return errors.New("fenced")
	}}
	m := newModel(reply{text: "never"})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("hi"), Notices: g, Recorder: rec}, agent.QueryDeps{})
	if term.Reason != agent.ReasonRecordFailed || len(m.requests()) != 0 {
		t.Fatalf("terminal %+v, %d calls", term, len(m.requests()))
	}
	got := g.TakePending()
	want := []guide.Notice{{ID: "ce-1", Text: "one"}, {ID: "ce-2", Text: "two"}, {ID: "ce-3", Text: "newer"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
	if d := g.TakeDelivered(); len(d) != 0 {
		t.Fatalf("undelivered notices counted as delivered: %v", d)
	}
}

func TestQuery_system_reminder_goes_first_in_every_request_and_is_never_stored(t *testing.T) {
	m := newModel(reply{tools: []llm.ContentBlock{call("1", "echo", "")}}, reply{text: "ok"})
	rec := &recorder{}
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("hi"), Tools: registry(t, echo()), SystemReminder: "<system-reminder>cwd /w</system-reminder>", Recorder: rec}, agent.QueryDeps{})
	for i, r := range m.requests() {
		if first := r.Messages[0]; first.Role != llm.RoleUser || first.Content[0].Text != "<system-reminder>cwd /w</system-reminder>" {
			t.Errorf("request %d starts with %+v", i, first)
		}
	}
	for _, msg := range append(rec.recorded(), term.Messages...) {
		if strings.Contains(msg.Text(), "cwd /w") {
			t.Fatalf("reminder stored: %+v", msg)
		}
	}
}

func TestQuery_deferred_tools_are_withheld_but_callable(t *testing.T) {
	m := newModel(reply{tools: []llm.ContentBlock{call("1", "echo", `{"x":1}`)}}, reply{text: "ok"})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("hi"), Tools: registry(t, echo(), tool.TodoWrite(&tool.TodoStore{})), DeferredTools: []string{"echo"}}, agent.QueryDeps{})
	if tools := m.requests()[0].Tools; len(tools) != 1 || tools[0].Name != tool.TodoWriteName {
		t.Fatalf("tools offered %+v", tools)
	}
	if res := term.Messages[2].Content[0]; res.IsError || res.Content != `echo {"x":1}` {
		t.Fatalf("deferred tool result %+v", res)
	}
}

func TestQuery_permissions_deny_what_the_policy_refuses(t *testing.T) {
	var ran atomic.Bool
	shell := tool.Func{Name: "shell", Schema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}}}`), Fn: func(context.Context, tool.Call) (tool.Result, error) {
		ran.Store(true)
		return tool.Result{Content: "ran"}, nil
	}}
	m := newModel(reply{tools: []llm.ContentBlock{call("1", "shell", `{"command":"rm -rf /"}`), call("2", "shell", `{"command":"git status"}`)}}, reply{text: "ok"})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("hi"), Tools: registry(t, shell), Allowed: []string{"shell(git *)"}}, agent.QueryDeps{})
	res := term.Messages[2].Content
	if !res[0].IsError || !strings.Contains(res[0].Content, "permission denied") {
		t.Errorf("rm allowed: %+v", res[0])
	}
	if res[1].IsError || res[1].Content != "ran" || !ran.Load() {
		t.Errorf("git status refused: %+v", res[1])
	}
}

func TestQuery_spills_large_tool_output_to_a_file(t *testing.T) {
	big := tool.Func{Name: "big", IsReadOnly: true, Fn: func(context.Context, tool.Call) (tool.Result, error) {
		return tool.Result{Content: strings.Repeat("0123456789", 100)}, nil
	}}
	dir := t.TempDir()
	m := newModel(reply{tools: []llm.ContentBlock{call("toolu_1", "big", "")}}, reply{text: "ok"})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("hi"), Tools: registry(t, big), ToolOutputDir: dir, MaxToolOutputChars: 100}, agent.QueryDeps{})
	res := term.Messages[2].Content[0].Content
	if !strings.HasPrefix(res, strings.Repeat("0123456789", 10)+"\n") || !strings.Contains(res, dir) {
		t.Fatalf("result %q", res)
	}
}

func TestQuery_reminds_of_todos_after_turns_without_todo_write(t *testing.T) {
	store := &tool.TodoStore{}
	store.Set([]tool.Todo{{Content: "write tests", Status: "in_progress"}})
	var rs []reply
	for i := range 4 {
		rs = append(rs, reply{tools: []llm.ContentBlock{call(string(rune('a'+i)), "echo", "")}})
	}
	rs = append(rs, reply{text: "done"})
	m := newModel(rs...)
	rec := &recorder{}
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("hi"), Tools: registry(t, echo()), Todos: store, TodoReminderTurnsSinceWrite: 2, TodoReminderTurnsBetweenReminder: 2, Recorder: rec}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted {
		t.Fatalf("terminal %+v", term)
	}
	var at []int
	for i, r := range m.requests() {
		last := r.Messages[len(r.Messages)-1]
		if slices.ContainsFunc(last.Content, func(b llm.ContentBlock) bool { return strings.Contains(b.Text, "1. [in_progress] write tests") }) {
			at = append(at, i)
		}
	}
	// Reminded before call 3 (two turns without todo_write) and again two
	// turns later, before call 5.
	if !slices.Equal(at, []int{2, 4}) {
		t.Fatalf("reminders before calls %v, want [2 4]", at)
	}
	n := 0
	for _, r := range rec.recorded() {
		if r.Kind == llm.KindReminder {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d reminders recorded, want 2", n)
	}
}

func TestQuery_non_streaming_emits_the_same_events(t *testing.T) {
	m := newModel(reply{text: "hi", tools: []llm.ContentBlock{call("1", "echo", "")}}, reply{text: "bye"})
	evs, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("hi"), Tools: registry(t, echo()), NonStreaming: true}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted || term.Text != "bye" {
		t.Fatalf("terminal %+v", term)
	}
	want := []agent.EventKind{agent.KindText, agent.KindToolUse, agent.KindUsage, agent.KindToolResult, agent.KindText, agent.KindUsage, agent.KindResult}
	if got := kinds(evs); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestQuery_stopping_the_consumer_stops_the_tools(t *testing.T) {
	started := make(chan struct{})
	var cancelled atomic.Bool
	slow := tool.Func{Name: "slow", IsReadOnly: true, Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
		close(started)
		<-ctx.Done()
		cancelled.Store(true)
		return tool.Result{}, ctx.Err()
	}}
	m := newModel(reply{tools: []llm.ContentBlock{call("1", "slow", "")}})
	for ev := range agent.Query(t.Context(), agent.QueryInput{Provider: m, Messages: userInput("hi"), Tools: registry(t, slow)}, agent.QueryDeps{}) {
		if ev.Kind == agent.KindToolUse {
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("the read-only tool did not start while the stream went on")
			}
			break
		}
	}
	if !cancelled.Load() {
		t.Fatal("the running tool was not cancelled and waited for when the consumer stopped")
	}
}

func TestQuery_starts_read_only_tools_while_the_stream_still_arrives(t *testing.T) {
	// The stream does not end until the read-only call has started: if the
	// loop waited for the message, this run would never finish.
	started := make(chan struct{})
	var writeSawEnd atomic.Bool
	rec := &recorder{}
	look := tool.Func{Name: "look", IsReadOnly: true, Fn: func(context.Context, tool.Call) (tool.Result, error) {
		close(started)
		return tool.Result{Content: "seen"}, nil
	}}
	write := tool.Func{Name: "write", Fn: func(context.Context, tool.Call) (tool.Result, error) {
		writeSawEnd.Store(len(rec.recorded()) == 1)
		return tool.Result{Content: "written"}, nil
	}}
	m := newModel(reply{tools: []llm.ContentBlock{call("1", "look", ""), call("2", "write", "")}, hold: started}, reply{text: "ok"})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("hi"), Tools: registry(t, look, write), Recorder: rec, PermissionMode: permission.AcceptAll}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted {
		t.Fatalf("terminal %+v", term)
	}
	if !writeSawEnd.Load() {
		t.Fatal("the writing tool started before its message was recorded")
	}
	if got := term.Messages[2].Content; got[0].Content != "seen" || got[1].Content != "written" {
		t.Fatalf("results %+v", got)
	}
}

func TestQuery_recovered_history_gets_interrupted_results_in_the_request(t *testing.T) {
	input := []llm.Message{
		{ID: "u", Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "deploy"}}},
		{ID: "a", Role: llm.RoleAssistant, Content: []llm.ContentBlock{call("dangling", "shell", `{"command":"make deploy"}`)}},
		{ID: "n", Role: llm.RoleUser, Kind: llm.KindNotice, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "[run interrupted]"}}},
	}
	m := newModel(reply{text: "checking whether it ran"})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: input}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted {
		t.Fatalf("terminal %+v", term)
	}
	last := m.requests()[0].Messages[2]
	if len(last.Content) != 2 || !llm.IsInterrupted(last.Content[0]) || last.Content[1].Text != "[run interrupted]" {
		t.Fatalf("request turn %+v", last)
	}
}

func TestQuery_timeout_with_settlement_wraps_up_and_still_ends_with_timeout(t *testing.T) {
	c := &clock{now: time.Unix(0, 0)}
	m := newModel(
		reply{tools: []llm.ContentBlock{call("1", "echo", "")}, before: func(llm.CompletionRequest) { c.advance(time.Hour) }},
		reply{text: "checkpoint: found X"},
	)
	s := &agent.Settlement{Prompt: "time is up: write down what you found", PromptByReason: map[agent.TerminalReason]string{agent.ReasonMaxTurns: "not this one"}}
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: userInput("go"), Tools: registry(t, echo()), MaxDuration: time.Minute, Settlement: s}, agent.QueryDeps{Now: c.Now})
	if term.Reason != agent.ReasonTimeout || term.Text != "checkpoint: found X" {
		t.Fatalf("terminal %+v", term)
	}
	wrap := m.requests()[1].Messages
	if txt := wrap[len(wrap)-1].Content; !slices.ContainsFunc(txt, func(b llm.ContentBlock) bool { return b.Text == s.Prompt }) {
		t.Fatalf("wrap-up prompt missing: %+v", txt)
	}
}

// A run whose compactor builds views through a ViewCache tells each model
// call how much of its history is settled: nothing at first, then what
// came before the last assistant turn, which begins the next request as it
// was. A system reminder, written into the first turn anew each call,
// settles nothing.
func TestEach_request_says_how_much_of_its_history_is_settled(t *testing.T) {
	// What each call was sent, taken as it arrived: a view is valid only
	// until the next one.
	type sent struct {
		settled int
		blocks  []*llm.ContentBlock // each message's first block
		texts   []string
	}
	var calls []sent
	see := func(req llm.CompletionRequest) {
		c := sent{settled: req.Settled}
		for i := range req.Messages {
			c.blocks = append(c.blocks, &req.Messages[i].Content[0])
			c.texts = append(c.texts, fmt.Sprint(req.Messages[i].Content))
		}
		calls = append(calls, c)
	}
	replies := func() []reply {
		return []reply{
			{tools: []llm.ContentBlock{call("t1", "echo", `{"a":1}`)}, before: see},
			{tools: []llm.ContentBlock{call("t2", "echo", `{"b":2}`)}, before: see},
			{tools: []llm.ContentBlock{call("t3", "echo", `{"c":3}`)}, before: see},
			{text: "done", before: see},
		}
	}
	var vc llm.ViewCache
	run(t, t.Context(), agent.QueryInput{Provider: newModel(replies()...), Messages: userInput("go"), Tools: registry(t, echo()), Compactor: compact.New(compact.Config{Views: &vc})}, agent.QueryDeps{})
	if len(calls) != 4 {
		t.Fatalf("%d calls, want 4", len(calls))
	}
	if calls[0].settled != 0 {
		t.Errorf("first call: %d settled, want 0 (no assistant turn yet)", calls[0].settled)
	}
	for i := 1; i < len(calls); i++ {
		prev, c := calls[i-1], calls[i]
		if c.settled <= prev.settled || c.settled >= len(c.blocks) {
			t.Errorf("call %d: %d of %d messages settled, after %d", i+1, c.settled, len(c.blocks), prev.settled)
		}
		for k := range prev.settled {
			if c.blocks[k] != prev.blocks[k] || c.texts[k] != prev.texts[k] {
				t.Errorf("call %d: settled message %d is not as it was sent before", i+1, k)
			}
		}
	}

	calls = nil
	vc = llm.ViewCache{}
	run(t, t.Context(), agent.QueryInput{Provider: newModel(replies()...), Messages: userInput("go"), Tools: registry(t, echo()), SystemReminder: "today is Tuesday", Compactor: compact.New(compact.Config{Views: &vc})}, agent.QueryDeps{})
	if len(calls) != 4 {
		t.Fatalf("with a reminder: %d calls, want 4", len(calls))
	}
	for i, c := range calls {
		if c.settled != 0 {
			t.Errorf("with a reminder, call %d: %d settled, want 0", i+1, c.settled)
		}
	}
}

// With AppendInPlace the loop grows the host's own array instead of a copy
// of it, and hands the grown history back with its room; the messages the
// host lent are left as they were. Without it the host's array is never
// written.
func TestA_lent_history_is_grown_in_place_and_handed_back(t *testing.T) {
	lent := make([]llm.Message, 1, 64)
	lent[0] = llm.UserText("go")
	m := newModel(reply{tools: []llm.ContentBlock{call("t1", "echo", `{"a":1}`)}}, reply{text: "done"})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: lent, AppendInPlace: true, Tools: registry(t, echo())}, agent.QueryDeps{})
	if got := texts(term.Messages); len(got) != 4 || got[0] != "user:go" {
		t.Fatalf("history %v", got)
	}
	if &term.Messages[0] != &lent[0] || cap(term.Messages) != cap(lent) {
		t.Fatal("the history was copied, not grown in the lent array")
	}
	if lent[0].Text() != "go" || len(lent) != 1 {
		t.Fatalf("the lent messages changed: %+v", lent)
	}

	own := make([]llm.Message, 1, 64)
	own[0] = llm.UserText("go")
	m = newModel(reply{text: "done"})
	_, term = run(t, t.Context(), agent.QueryInput{Provider: m, Messages: own}, agent.QueryDeps{})
	if &term.Messages[0] == &own[0] || own[:2][1].Role != "" {
		t.Fatal("without AppendInPlace the loop wrote into the host's array")
	}
	if cap(term.Messages) != len(term.Messages) {
		t.Fatal("a copied history was handed back with room to append into")
	}
}
