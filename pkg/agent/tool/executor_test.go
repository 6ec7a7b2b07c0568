package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/llm"
)

// lab is a set of tools whose calls block until the test opens their gate,
// and a log of what started and ended, in order.
type lab struct {
	mu      sync.Mutex
	log     []string
	gates   map[string]chan struct{}
	running atomic.Int32
	maxRun  atomic.Int32
}

func newLab() *lab { return &lab{gates: map[string]chan struct{}{}} }

func (l *lab) gate(id string) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	g, ok := l.gates[id]
	if !ok {
		g = make(chan struct{})
		l.gates[id] = g
	}
	return g
}

func (l *lab) note(s string) {
	l.mu.Lock()
	l.log = append(l.log, s)
	l.mu.Unlock()
}

func (l *lab) logged() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.log...)
}

func (l *lab) tool(name string, readOnly bool) Tool {
	return Func{Name: name, IsReadOnly: readOnly, Fn: func(ctx context.Context, c Call) (Result, error) {
		n := l.running.Add(1)
		for {
			m := l.maxRun.Load()
			if n <= m || l.maxRun.CompareAndSwap(m, n) {
				break
			}
		}
		l.note("start " + c.ID)
		defer func() { l.running.Add(-1); l.note("end " + c.ID) }()
		select {
		case <-l.gate(c.ID):
			return Result{Content: "done " + c.ID}, nil
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}}
}

func use(id, name string) llm.ContentBlock {
	return llm.ContentBlock{Type: llm.BlockToolUse, ID: id, Name: name, Input: json.RawMessage(`{}`)}
}

func (l *lab) hasLogged(s string) func() bool {
	return func() bool { return slices.Contains(l.logged(), s) }
}

func drain(t *testing.T, e *Executor) []Outcome {
	t.Helper()
	var outs []Outcome
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			u, ok := e.Next()
			if !ok {
				return
			}
			if u.Outcome != nil {
				outs = append(outs, *u.Outcome)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("results never all arrived")
	}
	return outs
}

func ids(outs []Outcome) []string {
	var s []string
	for _, o := range outs {
		s = append(s, o.Block.ToolUseID)
	}
	return s
}

func TestExecutor_hands_out_results_in_call_order(t *testing.T) {
	l := newLab()
	reg, _ := NewRegistry(l.tool("read", true))
	e := NewExecutor(t.Context(), ExecutorConfig{Registry: reg})
	t.Cleanup(e.Discard)
	e.Add(use("a", "read"))
	e.Add(use("b", "read"))
	e.Add(use("c", "read"))
	e.Release()
	testutil.Eventually(t, 5*time.Second, "all three running", func() bool { return l.running.Load() == 3 })
	close(l.gate("c")) // finish in reverse order
	testutil.Eventually(t, 5*time.Second, "c ended", l.hasLogged("end c"))
	close(l.gate("b"))
	testutil.Eventually(t, 5*time.Second, "b ended", l.hasLogged("end b"))
	close(l.gate("a"))
	outs := drain(t, e)
	if got := ids(outs); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("results in order %v, want a b c", got)
	}
	if outs[0].Block.Content != "done a" || outs[0].Block.IsError {
		t.Errorf("result a = %+v", outs[0].Block)
	}
}

func TestExecutor_runs_read_only_calls_in_parallel_up_to_the_cap(t *testing.T) {
	l := newLab()
	reg, _ := NewRegistry(l.tool("read", true))
	e := NewExecutor(t.Context(), ExecutorConfig{Registry: reg, MaxConcurrency: 2})
	t.Cleanup(e.Discard)
	for i := range 5 {
		e.Add(use(fmt.Sprint(i), "read"))
	}
	e.Release()
	for i := range 5 {
		testutil.Eventually(t, 5*time.Second, fmt.Sprintf("call %d started", i), l.hasLogged(fmt.Sprintf("start %d", i)))
		close(l.gate(fmt.Sprint(i)))
	}
	outs := drain(t, e)
	if len(outs) != 5 {
		t.Fatalf("%d results, want 5", len(outs))
	}
	if m := l.maxRun.Load(); m != 2 {
		t.Fatalf("at most %d ran at once, want exactly the cap 2", m)
	}
}

func TestExecutor_starts_read_only_calls_before_release_and_exclusive_ones_alone_after(t *testing.T) {
	l := newLab()
	reg, _ := NewRegistry(l.tool("read", true), l.tool("write", false))
	e := NewExecutor(t.Context(), ExecutorConfig{Registry: reg})
	t.Cleanup(e.Discard)
	e.Add(use("r1", "read"))
	e.Add(use("r2", "read"))
	e.Add(use("w", "write"))
	e.Add(use("r3", "read"))
	testutil.Eventually(t, 5*time.Second, "r1 and r2 running while the message streams", func() bool { return l.running.Load() == 2 })
	l.note("release")
	e.Release()
	close(l.gate("r1"))
	close(l.gate("r2"))
	testutil.Eventually(t, 5*time.Second, "w started", l.hasLogged("start w"))
	if n := l.running.Load(); n != 1 {
		t.Fatalf("%d calls running with the exclusive one, want 1", n)
	}
	close(l.gate("w"))
	testutil.Eventually(t, 5*time.Second, "r3 started", l.hasLogged("start r3"))
	close(l.gate("r3"))
	outs := drain(t, e)
	if got := ids(outs); !slices.Equal(got, []string{"r1", "r2", "w", "r3"}) {
		t.Fatalf("results %v", got)
	}
	log := l.logged()
	pos := func(s string) int { return slices.Index(log, s) }
	if !(pos("release") < pos("start w") && pos("end r1") < pos("start w") && pos("end r2") < pos("start w") && pos("end w") < pos("start r3")) {
		t.Fatalf("exclusive call not alone or started before release: %v", log)
	}
	if l.maxRun.Load() != 2 {
		t.Errorf("max parallel %d, want 2 (r1, r2)", l.maxRun.Load())
	}
}

// A cancelled run gives every call a result: the one running and the one
// queued behind it (which never runs). Cancelled with a CancelCause (Ground
// Stop), the result is the cause's words instead of Cancelled.
func TestExecutor_cancellation_gives_every_call_a_result(t *testing.T) {
	for _, c := range []struct {
		name  string
		cause error
		want  string
	}{
		{"plain", nil, Cancelled},
		{"with a cause", CancelCause("cancelled by Ground Stop"), "cancelled by Ground Stop"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLab()
			reg, _ := NewRegistry(l.tool("read", true), l.tool("write", false))
			ctx, cancel := context.WithCancelCause(t.Context())
			e := NewExecutor(ctx, ExecutorConfig{Registry: reg})
			t.Cleanup(e.Discard)
			e.Add(use("r", "read"))
			e.Add(use("w", "write"))
			e.Release()
			testutil.Eventually(t, 5*time.Second, "r running", l.hasLogged("start r"))
			cancel(c.cause)
			outs := drain(t, e)
			if got := ids(outs); !slices.Equal(got, []string{"r", "w"}) {
				t.Fatalf("results %v", got)
			}
			for _, o := range outs {
				if o.Block.Content != c.want || !o.Block.IsError {
					t.Errorf("result %s = %+v, want %q", o.Block.ToolUseID, o.Block, c.want)
				}
			}
			if slices.Contains(l.logged(), "start w") {
				t.Error("the exclusive call ran after cancellation")
			}
		})
	}
}

func TestExecutor_gate_denies_and_after_stops(t *testing.T) {
	ran := atomic.Bool{}
	reg, _ := NewRegistry(
		Func{Name: "rm", Fn: func(context.Context, Call) (Result, error) { ran.Store(true); return Result{}, nil }},
		Func{Name: "echo", IsReadOnly: true, Schema: json.RawMessage(`{"type":"object","properties":{"s":{"type":"string"}},"required":["s"]}`),
			Fn: func(_ context.Context, c Call) (Result, error) {
				c.Progress("half")
				return Result{Content: string(c.Input)}, nil
			}},
	)
	e := NewExecutor(t.Context(), ExecutorConfig{
		Registry: reg,
		Gate: func(_ context.Context, name string, in json.RawMessage, _ bool) (json.RawMessage, bool, string) {
			if name == "rm" {
				return nil, false, "denied: rm"
			}
			if strings.Contains(string(in), "bad-rewrite") {
				return json.RawMessage(`{"s":1}`), true, ""
			}
			return json.RawMessage(`{"s":"rewritten"}`), true, ""
		},
		After: func(_ context.Context, name string, _ json.RawMessage, r Result) (bool, string) {
			return name == "echo", "enough"
		},
	})
	t.Cleanup(e.Discard)
	e.Add(use("1", "rm"))
	e.Add(llm.ContentBlock{Type: llm.BlockToolUse, ID: "2", Name: "echo", Input: json.RawMessage(`{"s":"x"}`)})
	e.Add(use("3", "echo")) // missing required s
	e.Add(llm.ContentBlock{Type: llm.BlockToolUse, ID: "5", Name: "echo", Input: json.RawMessage(`{"s":"bad-rewrite"}`)})
	e.Add(use("4", "nope"))
	e.Release()
	var outs []Outcome
	var progress []Progress
	for {
		u, ok := e.Next()
		if !ok {
			break
		}
		if u.Progress != nil {
			progress = append(progress, *u.Progress)
		}
		if u.Outcome != nil {
			outs = append(outs, *u.Outcome)
		}
	}
	if ran.Load() || outs[0].Block.Content != "denied: rm" || !outs[0].Block.IsError {
		t.Errorf("denied call: ran=%v result %+v", ran.Load(), outs[0].Block)
	}
	if outs[1].Block.Content != `{"s":"rewritten"}` || !outs[1].Stop || outs[1].StopMessage != "enough" {
		t.Errorf("rewritten call: %+v", outs[1])
	}
	if !strings.Contains(outs[2].Block.Content, "missing required") || !outs[2].Block.IsError {
		t.Errorf("invalid input: %+v", outs[2].Block)
	}
	if !strings.Contains(outs[4].Block.Content, `unknown tool "nope"`) {
		t.Errorf("unknown tool: %+v", outs[4].Block)
	}
	if !strings.Contains(outs[3].Block.Content, "after a hook rewrote it") || !outs[3].Block.IsError {
		t.Errorf("rewrite that breaks the schema: %+v", outs[3].Block)
	}
	if len(progress) != 1 || progress[0] != (Progress{"2", "half"}) {
		t.Errorf("progress = %v", progress)
	}
}

func TestA_tools_images_reach_its_result_block_and_the_After_hook_whole(t *testing.T) {
	img := llm.Image{MediaType: "image/png", Data: "iVBORw0KGgo="}
	shot := Func{Name: "shot", IsReadOnly: true, Fn: func(context.Context, Call) (Result, error) {
		return Result{Content: strings.Repeat("x", 50), Images: []llm.Image{img}}, nil
	}}
	reg, err := NewRegistry(shot)
	if err != nil {
		t.Fatal(err)
	}
	var seen []llm.Image
	e := NewExecutor(t.Context(), ExecutorConfig{Registry: reg, MaxOutputChars: 10, After: func(_ context.Context, _ string, _ json.RawMessage, r Result) (bool, string) {
		seen = r.Images
		return false, ""
	}})
	defer e.Discard()
	e.Add(llm.ContentBlock{Type: llm.BlockToolUse, ID: "t1", Name: "shot", Input: json.RawMessage(`{}`)})
	e.Release()
	u, ok := e.Next()
	if !ok || u.Outcome == nil {
		t.Fatal("no outcome")
	}
	b := u.Outcome.Block
	if len(b.Images) != 1 || b.Images[0] != img || !strings.Contains(b.Content, "output truncated") {
		t.Fatalf("result block %+v: the text is capped, the image kept whole", b)
	}
	if len(seen) != 1 || seen[0] != img {
		t.Fatalf("After saw images %+v", seen)
	}
}

// A tool that learned, after its context ended, what became of its call (a
// command handed to the background) says so with Stands, and its result is
// kept; without Stands, or with an error, the call reads as cancelled.
func TestExecutor_keeps_a_result_that_stands_after_cancellation(t *testing.T) {
	started := make(chan struct{})
	handed := Func{Name: "handed", Description: "hands off", Fn: func(ctx context.Context, _ Call) (Result, error) {
		close(started)
		<-ctx.Done()
		return Result{Content: "handed off as job 3", Stands: true}, nil
	}}
	plain := Func{Name: "plain", Description: "returns late", Fn: func(ctx context.Context, _ Call) (Result, error) {
		<-ctx.Done()
		return Result{Content: "late"}, nil
	}}
	reg, err := NewRegistry(handed, plain)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	e := NewExecutor(ctx, ExecutorConfig{Registry: reg})
	t.Cleanup(e.Discard)
	e.Add(use("h", "handed"))
	e.Add(use("p", "plain"))
	e.Release()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the call never started")
	}
	cancel()
	outs := drain(t, e)
	if len(outs) != 2 || outs[0].Block.Content != "handed off as job 3" || outs[0].Block.IsError {
		t.Fatalf("the standing result = %+v", outs)
	}
	if outs[1].Block.Content != Cancelled {
		t.Fatalf("the call after it = %+v, want %q", outs[1].Block, Cancelled)
	}
}
