package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"jetway/pkg/agent"
	"jetway/pkg/llm"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/llmtest"
)

// GroupAgent is the agent loop's overhead per model turn.
const GroupAgent = "agent"

// Names of the agent loop figures.
const (
	FigAgentTurnP50      = "agent loop turn p50"
	FigAgentTurnP99      = "agent loop turn p99"
	FigAgentOverhead     = "agent loop overhead per turn (p50)"
	FigAgentOverheadMean = "agent loop overhead per turn (mean)"
	FigAgentAllocs       = "agent loop allocations per turn"
)

func init() {
	AllGroups = append(AllGroups, GroupAgent)
	measures[GroupAgent] = (*env).measureAgent
}

// measureAgent times one model turn through agent.Query (provider, request
// view, stream decoding into events, recorder-less history) next to a bare
// streaming SDK call to the same local fake server, interleaved so that
// drift on a shared machine hits both alike.
func (e *env) measureAgent(ctx context.Context) {
	const goal = "< 1 ms added per turn"
	srv := llmtest.StartAnthropic()
	defer srv.Close()
	srv.SetRecording(false)
	srv.SetFallback(llmtest.Reply{Text: "All tests passed.", Latency: e.cfg.ModelLatency, Usage: llm.Usage{InputTokens: 12, OutputTokens: 5}})

	client := sdk.NewClient(option.WithoutEnvironmentDefaults(), option.WithAPIKey("bench"), option.WithMaxRetries(0), option.WithBaseURL(srv.URL()))
	bare := func() error {
		stream := client.Messages.NewStreaming(ctx, sdk.MessageNewParams{
			Model: "claude-bench", MaxTokens: anthropic.DefaultMaxTokens,
			Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("did the tests pass?"))},
		})
		// Read to its end; closing only gives the connection back.
		defer func() { _ = stream.Close() }()
		var acc sdk.Message
		for stream.Next() {
			if err := acc.Accumulate(stream.Current()); err != nil {
				return err
			}
		}
		if err := stream.Err(); err != nil {
			return err
		}
		if len(acc.Content) == 0 {
			return errors.New("bare SDK call: empty answer")
		}
		return nil
	}

	provider, err := anthropic.New(anthropic.Config{APIKey: "bench", BaseURL: srv.URL(), Model: "claude-bench"})
	if err != nil {
		e.skip(FigAgentOverhead, "ms", goal, err)
		return
	}
	loop := func() error {
		in := agent.QueryInput{Provider: provider, Messages: []llm.Message{llm.UserText("did the tests pass?")}}
		for ev, err := range agent.Query(ctx, in, agent.QueryDeps{}) {
			if err != nil {
				return err
			}
			if ev.Kind != agent.KindResult {
				continue
			}
			t := ev.Terminal
			if t.Err != nil {
				return t.Err
			}
			if t.Reason != agent.ReasonCompleted || t.Turns != 1 {
				return fmt.Errorf("agent loop ended %s after %d turns, want completed after 1", t.Reason, t.Turns)
			}
			return nil
		}
		return errors.New("agent loop ended without a result")
	}

	n := e.sizes.AgentTurns
	e.progress("agent: %d model turns through the loop, %d bare SDK calls, interleaved", n, n)
	for range max(10, n/10) { // warm connections and code paths
		if err := bare(); err != nil {
			e.skip(FigAgentOverhead, "ms", goal, fmt.Errorf("bare SDK call: %w", err))
			return
		}
		if err := loop(); err != nil {
			e.skip(FigAgentOverhead, "ms", goal, fmt.Errorf("agent loop: %w", err))
			return
		}
	}
	var bs, ls samples
	for range n {
		t0 := time.Now()
		if err := bare(); err != nil {
			e.skip(FigAgentOverhead, "ms", goal, fmt.Errorf("bare SDK call: %w", err))
			return
		}
		t1 := time.Now()
		if err := loop(); err != nil {
			e.skip(FigAgentOverhead, "ms", goal, fmt.Errorf("agent loop: %w", err))
			return
		}
		bs, ls = append(bs, t1.Sub(t0)), append(ls, time.Since(t1))
		if ctx.Err() != nil {
			return
		}
	}
	e.add(figure(FigAgentTurnP50, "ms", ls.pct(50)).vs("bare SDK call p50", bs.pct(50)).info("-").
		note("%d turns, each one streamed model turn through agent.Query over the Anthropic provider, vs a bare streaming SDK call with accumulation to the same local fake server", n))
	e.add(figure(FigAgentTurnP99, "ms", ls.pct(99)).vs("bare SDK call p99", bs.pct(99)).info("-"))
	over := ls.pct(50) - bs.pct(50)
	e.add(figure(FigAgentOverhead, "ms", over).goal(goal, over < 1))
	overMean := ls.mean() - bs.mean()
	e.add(figure(FigAgentOverheadMean, "ms", overMean).goal(goal, overMean < 1))

	// Allocations: counted per phase, not interleaved, since the counter is
	// process-wide. Both phases include the in-process fake server's own
	// allocations, so the difference is what the loop adds.
	count := func(f func() error) (float64, error) {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			if err := f(); err != nil {
				return 0, err
			}
		}
		runtime.ReadMemStats(&after)
		return float64(after.Mallocs-before.Mallocs) / float64(n), nil
	}
	bareAllocs, err := count(bare)
	if err != nil {
		e.skip(FigAgentAllocs, "allocs/turn", "reported", err)
		return
	}
	loopAllocs, err := count(loop)
	if err != nil {
		e.skip(FigAgentAllocs, "allocs/turn", "reported", err)
		return
	}
	e.add(figure(FigAgentAllocs, "allocs/turn", loopAllocs).vs("bare SDK call", bareAllocs).info("reported").
		note("heap allocations per turn including the in-process fake server's; the loop adds %.0f", loopAllocs-bareAllocs))
}
