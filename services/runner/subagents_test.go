package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/control/sessionrec"
	"jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
	"jetway/services/runner/internal/subagents"
)

// The sub-agent tests run parents and children through one fake model
// server (the real Anthropic wire format) whose router picks each reply
// from the request: the role marker in the system prompt (a profile's
// instructions) says which agent asks, the last message what it has seen.

// modelReq is what a router reads of a request.
type modelReq struct {
	system string // the system prompt, all blocks
	last   string // the last message's JSON
	all    string
}

func readReq(body []byte) modelReq {
	var v struct {
		System   json.RawMessage   `json:"system"`
		Messages []json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(body, &v)
	r := modelReq{system: string(v.System), all: string(body)}
	if n := len(v.Messages); n > 0 {
		r.last = string(v.Messages[n-1])
	}
	return r
}

// routedModel is a fake model whose replies route picks.
func routedModel(t *testing.T, route func(r modelReq) llmtest.Reply) (*llmtest.Anthropic, llm.Provider) {
	t.Helper()
	srv, p := fakeModel(t)
	srv.SetRouter(func(body []byte) (llmtest.Reply, bool) { return route(readReq(body)), true })
	return srv, p
}

func call(name string, input any) llmtest.Reply {
	b, _ := json.Marshal(input)
	return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: name, Input: string(b)}}}
}

// requestsOf are the requests of the agent whose instructions carry role.
func requestsOf(srv *llmtest.Anthropic, role string) []modelReq {
	var out []modelReq
	for _, q := range srv.Requests() {
		if r := readReq(q.Body); strings.Contains(r.system, role) {
			out = append(out, r)
		}
	}
	return out
}

// countIn counts the requests of role whose last message holds text.
func countIn(srv *llmtest.Anthropic, role, text string) int {
	n := 0
	for _, r := range requestsOf(srv, role) {
		if strings.Contains(r.last, text) {
			n++
		}
	}
	return n
}

func (e *env) profiles(ps map[string]agents.Profile) {
	e.t.Helper()
	for name, p := range ps {
		e.putProfile("t1", name, p)
	}
}

// twoRunners starts two runners on the env and waits until they share
// the partitions, so a test can tell which one a session lands on. A
// partition is held once an event came through it: one warm-up input per
// partition (the routes answer it with their fallback text).
func (e *env) twoRunners(p llm.Provider, tools func(SessionRef) []tool.Tool) (*Runner, *Runner) {
	e.t.Helper()
	r1 := e.startRunner("r1", p, tools)
	r2 := e.startRunner("r2", p, tools)
	e.warmUp("r1", "r2")
	return r1, r2
}

// holders maps each partition to the runner whose heartbeat says it holds
// it, read from the runners bucket as any runner reads it.
func (e *env) holders(ids ...string) map[int]string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := e.js.KeyValue(ctx, bus.BucketRunners)
	if err != nil {
		e.t.Fatal(err)
	}
	h := map[int]string{}
	for _, id := range ids {
		entry, err := kv.Get(ctx, id)
		if err != nil {
			continue
		}
		var beat struct {
			Partitions []int `json:"partitions"`
		}
		if json.Unmarshal(entry.Value(), &beat) == nil {
			for _, n := range beat.Partitions {
				h[n] = id
			}
		}
	}
	return h
}

// nameOnOtherRunner is a child name whose partition another runner than
// the one holding session's holds.
func nameOnOtherRunner(t *testing.T, e *env, r *Runner, tenant, session string) string {
	t.Helper()
	h := e.holders("r1", "r2")
	mine := h[bus.PartitionFor(tenant, session, r.partitions)]
	for i := range 200 {
		name := fmt.Sprintf("reviewer-%d", i)
		// Held by the other runner, not merely by nobody yet: a partition
		// no heartbeat claims may go to either.
		if other := h[bus.PartitionFor(tenant, name, r.partitions)]; other != "" && other != mine {
			return name
		}
	}
	t.Fatal("no child name lands on another runner")
	return ""
}

func runnersOf(recs []Record) []string {
	var out []string
	for _, r := range runStarts(recs) {
		out = append(out, r.Runner)
	}
	return out
}

func TestA_child_on_another_runner_answers_a_foreground_wait_once_and_never_as_a_notice_too(t *testing.T) {
	e := newEnv(t)
	e.profiles(map[string]agents.Profile{"reviewer": {Instructions: "ROLE:reviewer"}})
	var child atomic.Value
	var r1 *Runner
	model, p := routedModel(t, func(r modelReq) llmtest.Reply {
		switch {
		case strings.Contains(r.system, "ROLE:reviewer"):
			return llmtest.Reply{Text: "looks good: 3 nits", Latency: 300 * time.Millisecond}
		case strings.Contains(r.last, "looks good: 3 nits"):
			return llmtest.Reply{Text: "the reviewer is happy"}
		case strings.Contains(r.last, "please review"):
			name := nameOnOtherRunner(t, e, r1, "t1", "p1")
			child.Store(name)
			return call(subagents.StartTool, map[string]any{"agent": "reviewer", "prompt": "review the diff", "name": name, "wait": 60})
		}
		return llmtest.Reply{Text: "?"}
	})
	r1, _ = e.twoRunners(p, nil)
	in := e.publish(events.KindEvents, "t1", "p1", events.Input{Text: "please review"})

	testutil.Eventually(t, 30*time.Second, "the parent to end its run with the answer", func() bool {
		rec := e.session("t1", "p1")
		return rec.State == StateIdle && rec.Runs == 1 &&
			deliveries(e.records("t1", "p1"))[in] == 1 && countKind(e.records("t1", "p1"), RecordRunEnded) == 1
	})
	name := child.Load().(string)
	crec := e.session("t1", name)
	if crec.Parent() != "p1" || crec.Root() != "p1" || crec.Number != 1 || crec.Agent != "reviewer" || crec.State != StateIdle || crec.Runs != 1 {
		t.Fatalf("child record = %+v", crec)
	}
	prec := e.session("t1", "p1")
	if len(prec.Children) != 1 || prec.Children[0].Session != name || prec.Children[0].Agent != "reviewer" {
		t.Fatalf("parent's children = %+v", prec.Children)
	}
	parentRunner, childRunner := runnersOf(e.records("t1", "p1")), runnersOf(e.records("t1", name))
	if len(parentRunner) != 1 || len(childRunner) != 1 || parentRunner[0] == childRunner[0] {
		t.Fatalf("parent ran on %v, child on %v: want two runners", parentRunner, childRunner)
	}
	// The child's first turn delivered the parent's prompt, trusted as the
	// parent runner's (agentevents).
	first := runStarts(e.records("t1", name))[0]
	if !strings.Contains(first.Message.Content[0].Text, "review the diff") {
		t.Fatalf("child's first turn = %+v", first.Message)
	}
	// The answer reached the parent once, as the tool's result; the finished
	// event is recorded as answered (delivered, not refused) by the wait,
	// and never became a notice.
	if n := countIn(model, "", "finished after"); n != 1 {
		t.Errorf("requests carrying the answer: %d, want 1", n)
	}
	if n := countIn(model, "", "[sub-agent notice]"); n != 0 {
		t.Errorf("the answer came as a notice too (%d requests)", n)
	}
	var taken int
	for _, r := range e.records("t1", "p1") {
		if r.Kind == RecordRefused && r.Type == events.TypeAgentFinished {
			t.Errorf("the finished event is recorded as refused: %+v", r)
		}
		if r.Kind == RecordAnswered && r.Reason == ReasonAnsweredInWait && r.Type == events.TypeAgentFinished {
			taken++
		}
	}
	if taken != 1 {
		t.Errorf("finished events taken by the wait: %d, want 1", taken)
	}
}

// childNoticeRoute is a parent that starts a reviewer in the background
// (wait seconds, 0: at once) and a reviewer that answers after delay.
func handOffRoute(wait int, delay time.Duration) func(r modelReq) llmtest.Reply {
	return func(r modelReq) llmtest.Reply {
		switch {
		case strings.Contains(r.system, "ROLE:reviewer"):
			return llmtest.Reply{Text: "reviewed: fine", Latency: delay}
		case strings.Contains(r.last, "[sub-agent notice]"):
			return llmtest.Reply{Text: "the reviewer finished"}
		case strings.Contains(r.last, "goes on in the background") || strings.Contains(r.last, "in the background."):
			return llmtest.Reply{Text: "waiting for the reviewer"}
		case strings.Contains(r.last, "please review"):
			return call(subagents.StartTool, map[string]any{"agent": "reviewer", "prompt": "review it", "wait": wait})
		}
		return llmtest.Reply{Text: "?"}
	}
}

func TestA_child_past_its_wait_goes_to_the_background_and_its_answer_wakes_the_idle_parent_once(t *testing.T) {
	e := newEnv(t)
	e.profiles(map[string]agents.Profile{"reviewer": {Instructions: "ROLE:reviewer"}})
	model, p := routedModel(t, handOffRoute(1, 3*time.Second))
	e.twoRunners(p, nil)
	e.publish(events.KindEvents, "t1", "p1", events.Input{Text: "please review"})

	testutil.Eventually(t, 30*time.Second, "the handed-off answer to wake the parent", func() bool {
		rec := e.session("t1", "p1")
		return rec.State == StateIdle && rec.Runs == 2
	})
	if n := countIn(model, "", "still working after 1s"); n != 1 {
		t.Errorf("hand-off results seen by the model: %d, want 1", n)
	}
	starts := runStarts(e.records("t1", "p1"))
	if len(starts) != 2 || !strings.Contains(starts[1].Message.Content[0].Text, "[sub-agent notice] agent 1 (reviewer) finished after") ||
		!strings.Contains(starts[1].Message.Content[0].Text, "reviewed: fine") {
		t.Fatalf("the parent's second run did not start from the notice: %+v", starts)
	}
	fin := FinishedEventID("p1-a1", e.session("t1", "p1-a1").Run)
	if n := deliveries(e.records("t1", "p1"))[fin]; n != 1 {
		t.Errorf("finished event %s delivered %d times", fin, n)
	}
}

func TestA_child_s_progress_and_answer_reach_a_busy_parent_s_next_model_request_once(t *testing.T) {
	e := newEnv(t)
	e.profiles(map[string]agents.Profile{"reviewer": {Instructions: "ROLE:reviewer"}})
	g := newGate()
	model, p := routedModel(t, func(r modelReq) llmtest.Reply {
		switch {
		case strings.Contains(r.system, "ROLE:reviewer") && strings.Contains(r.last, "Reported to session p1"):
			return llmtest.Reply{Text: "reviewed: fine"}
		case strings.Contains(r.system, "ROLE:reviewer"):
			return call(subagents.ReportTool, map[string]any{"text": "half way"})
		case strings.Contains(r.last, "[sub-agent notice]"):
			return llmtest.Reply{Text: "noted the review"}
		case strings.Contains(r.last, "in the background."):
			return call("wait_for_gate", map[string]any{})
		case strings.Contains(r.last, "please review"):
			return call(subagents.StartTool, map[string]any{"agent": "reviewer", "prompt": "review it", "wait": 0})
		}
		return llmtest.Reply{Text: "?"}
	})
	r1, r2 := e.twoRunners(p, func(SessionRef) []tool.Tool { return []tool.Tool{g.tool()} })
	e.publish(events.KindEvents, "t1", "p1", events.Input{Text: "please review"})
	g.waitEntered(t)
	testutil.Eventually(t, 30*time.Second, "the child to finish while the parent is busy", func() bool {
		c := e.session("t1", "p1-a1")
		return c.State == StateIdle && c.Runs == 1
	})
	// The child's end travels through the streams to the parent's runner:
	// open the gate only once it waits there as a notice of the live run
	// (its progress, published before it on the same subject, is ahead).
	fin := FinishedEventID("p1-a1", e.session("t1", "p1-a1").Run)
	testutil.Eventually(t, 30*time.Second, "the child's end to wait as a notice of the parent's run", func() bool {
		return e.noticePending(r1, "t1", "p1", fin) || e.noticePending(r2, "t1", "p1", fin)
	})
	close(g.open)
	testutil.Eventually(t, 30*time.Second, "the parent's run to end", func() bool {
		rec := e.session("t1", "p1")
		return rec.State == StateIdle && countKind(e.records("t1", "p1"), RecordRunEnded) == 1
	})
	if rec := e.session("t1", "p1"); rec.Runs != 1 {
		t.Errorf("the parent started %d runs; the notice belonged in the live one", rec.Runs)
	}
	if n := countIn(model, "", "[sub-agent notice] agent 1 (reviewer) finished after"); n != 1 {
		t.Errorf("requests whose last message carries the notice: %d, want 1", n)
	}
	if n := countIn(model, "", "[sub-agent progress] agent 1 (reviewer) reports: half way"); n != 1 {
		t.Errorf("requests whose last message carries the child's progress report: %d, want 1", n)
	}
	if n := deliveries(e.records("t1", "p1"))[fin]; n != 1 {
		t.Errorf("finished event delivered %d times", n)
	}
}

func TestStatus_send_and_stop_reach_a_child_in_the_background(t *testing.T) {
	e := newEnv(t)
	e.profiles(map[string]agents.Profile{"reviewer": {Instructions: "ROLE:reviewer"}})
	g := newGate()
	var step atomic.Int32
	model, p := routedModel(t, func(r modelReq) llmtest.Reply {
		switch {
		case strings.Contains(r.system, "ROLE:reviewer") && strings.Contains(r.last, "also check the tests"):
			return llmtest.Reply{Text: "tests checked"}
		case strings.Contains(r.system, "ROLE:reviewer"):
			return llmtest.Reply{Text: "slow review", Latency: 30 * time.Second}
		case strings.Contains(r.last, "please review"):
			return call(subagents.StartTool, map[string]any{"agent": "reviewer", "prompt": "review it", "wait": 0})
		case strings.Contains(r.last, "in the background."):
			return call("wait_for_gate", map[string]any{})
		case strings.Contains(r.last, "gate opened") && step.CompareAndSwap(0, 1):
			return call(subagents.StatusTool, map[string]any{})
		case strings.Contains(r.last, "running for") && step.CompareAndSwap(1, 2):
			return call(subagents.SendTool, map[string]any{"agent": 1, "text": "also check the tests"})
		case strings.Contains(r.last, "Sent to agent 1") && step.CompareAndSwap(2, 3):
			return call(subagents.StopTool, map[string]any{"agent": 1, "reason": "enough"})
		case strings.Contains(r.last, "Asked agent 1 (reviewer)"):
			return llmtest.Reply{Text: "stopped it"}
		}
		return llmtest.Reply{Text: "ok"}
	})
	e.twoRunners(p, func(SessionRef) []tool.Tool { return []tool.Tool{g.tool()} })
	e.publish(events.KindEvents, "t1", "p1", events.Input{Text: "please review"})
	g.waitEntered(t)
	testutil.Eventually(t, 30*time.Second, "the child's run to be live", func() bool {
		return e.session("t1", "p1-a1").State == StateRunning
	})
	close(g.open)

	testutil.Eventually(t, 40*time.Second, "the stopped child's end and its next answer to reach the parent", func() bool {
		return countIn(model, "", "agent 1 (reviewer) was stopped after") == 1 && countIn(model, "", "tests checked") == 1
	})
	if n := countIn(model, "ROLE:reviewer", "[message from your parent agent (session p1)"); n != 1 {
		t.Errorf("the child's requests carrying the sent input: %d, want 1", n)
	}
	if step.Load() != 3 {
		t.Errorf("the parent got through %d of its 3 tool steps", step.Load())
	}
	if n := countKind(e.records("t1", "p1-a1"), RecordRunEnded); n != 2 {
		t.Errorf("child runs ended: %d, want 2 (the stopped one, then the one the sent input started)", n)
	}
}

func TestDepth_and_fan_out_limits_of_a_profile_refuse_sub_agents_with_clear_errors(t *testing.T) {
	e := newEnv(t)
	e.profiles(map[string]agents.Profile{
		"lead": {Instructions: "ROLE:lead", Limits: dispatcherapi.AgentLimits{MaxSubagents: 1, MaxSubagentDepth: 1}},
		"solo": {Instructions: "ROLE:solo", Limits: dispatcherapi.AgentLimits{MaxSubagentDepth: 1}},
	})
	model, p := routedModel(t, func(r modelReq) llmtest.Reply {
		switch {
		case strings.Contains(r.system, "ROLE:solo") && strings.Contains(r.last, "tool_result"):
			return llmtest.Reply{Text: "solo done"}
		case strings.Contains(r.system, "ROLE:solo"):
			return call(subagents.StartTool, map[string]any{"agent": "solo", "prompt": "go deeper", "wait": 0})
		case strings.Contains(r.last, "[sub-agent notice]"):
			return llmtest.Reply{Text: "noted"}
		case strings.Contains(r.last, "tool_result"):
			return llmtest.Reply{Text: "lead done"}
		}
		return llmtest.Reply{ToolCalls: []llmtest.ToolCall{
			{Name: subagents.StartTool, Input: `{"agent":"solo","prompt":"one","wait":0}`},
			{Name: subagents.StartTool, Input: `{"agent":"solo","prompt":"two","wait":0}`},
		}}
	})
	e.startRunner("r1", p, nil)
	e.publishAgent("t1", "p1", "split the work", "lead")
	testutil.Eventually(t, 30*time.Second, "the lead and its one child to finish", func() bool {
		return countIn(model, "ROLE:lead", "[sub-agent notice]") == 1 && e.session("t1", "p1").State == StateIdle
	})
	if n := countIn(model, "ROLE:lead", `fan-out limit: 1 sub-agents of this session are at work, and agent profile \"lead\" allows 1 at once (limits.max_subagents)`); n < 1 {
		t.Errorf("the second start was not refused by the fan-out limit")
	}
	if n := countIn(model, "ROLE:solo", `depth limit: the sub-agent would be at depth 2 below its root session, and agent profile \"solo\" allows 1 (limits.max_subagent_depth)`); n != 1 {
		t.Errorf("the child's own start was not refused by the depth limit (%d)", n)
	}
	if kids := e.session("t1", "p1").Children; len(kids) != 1 {
		t.Errorf("children = %+v, want the one the limit allowed", kids)
	}
}

// A child whose prompt could not be published is marked not started, so it
// neither says "starting" nor holds a place under the fan-out limit while
// no work is on its way to it. The failure is a real one: the server
// refuses the prompt because JETWAY_AGENTEVENTS is set to a 2 KiB message
// limit and the prompt is 4 KiB (as it refuses any publish a stream's
// limits forbid), every one of agent_start's attempts, while the second
// child's prompt and the events back are small and pass.
func TestA_child_whose_prompt_could_not_be_sent_is_marked_not_started_and_frees_its_fan_out_place(t *testing.T) {
	e := newEnv(t)
	e.profiles(map[string]agents.Profile{
		"lead": {Instructions: "ROLE:lead", Limits: dispatcherapi.AgentLimits{MaxSubagents: 1, MaxSubagentDepth: 1}},
		"solo": {Instructions: "ROLE:solo"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := e.js.Stream(ctx, bus.StreamAgentEvents)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.MaxMsgSize = 2048
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// Each step answers the last tool result; a notice of a child's end
	// may ride on one, so the tool results are matched first.
	model, p := routedModel(t, func(r modelReq) llmtest.Reply {
		switch {
		case strings.Contains(r.system, "ROLE:solo"):
			return llmtest.Reply{Text: "solo done"}
		case strings.Contains(r.last, "its prompt could not be sent"):
			return call(subagents.StartTool, map[string]any{"agent": "solo", "prompt": "a small task", "wait": 0})
		case strings.Contains(r.last, "started as session"):
			return call(subagents.StatusTool, map[string]any{})
		case strings.Contains(r.last, "not started (prompt not sent"):
			return call(subagents.SendTool, map[string]any{"agent": 1, "text": "the large task, in short"})
		case strings.Contains(r.last, "tool_result") || strings.Contains(r.last, "[sub-agent notice]"):
			return llmtest.Reply{Text: "lead done"}
		}
		return call(subagents.StartTool, map[string]any{"agent": "solo", "prompt": strings.Repeat("a large task ", 320), "wait": 0})
	})
	e.startRunner("r1", p, nil)
	e.publishAgent("t1", "p1", "split the work", "lead")
	testutil.Eventually(t, 60*time.Second, "the lead's run to end", func() bool {
		return countKind(e.records("t1", "p1"), RecordRunEnded) >= 1
	})
	if n := countIn(model, "ROLE:lead", "its prompt could not be sent"); n != 1 {
		t.Fatalf("the first start's result did not say its prompt could not be sent (%d)", n)
	}
	if n := countIn(model, "ROLE:lead", "fan-out limit: "); n != 0 {
		t.Fatal("the child whose prompt was never sent still counted against the fan-out limit: the second start was refused")
	}
	// The status line is read from the child's record, where the mark
	// (and so the session detail's reason) stays until the prompt
	// agent_send gave it starts a run.
	if n := countIn(model, "ROLE:lead", "agent 1 (solo) · session p1-a1 · not started (prompt not sent: publish io.jetway.agent.input: "+
		"nats: nats: API error: code=400 err_code=10054 description=message size exceeds maximum allowed)"); n != 1 {
		t.Errorf("agent_status did not list the first child as not started, with the server's refusal (%d)", n)
	}
	testutil.Eventually(t, 30*time.Second, "both children to run once and report to the lead", func() bool {
		return e.session("t1", "p1-a1").Runs == 1 && e.session("t1", "p1-a2").Runs == 1 &&
			countIn(model, "ROLE:lead", "agent 1 (solo) finished") >= 1 && countIn(model, "ROLE:lead", "agent 2 (solo) finished") >= 1
	})
	if rec := e.session("t1", "p1-a1"); strings.HasPrefix(rec.Reason, "prompt not sent") {
		t.Errorf("the first child ran but its record still says %q", rec.Reason)
	}
	if kids := e.session("t1", "p1").Children; len(kids) != 2 {
		t.Errorf("children = %+v, want both starts named", kids)
	}
}

func TestGround_Stop_of_a_parent_stops_its_child_s_run_on_another_runner(t *testing.T) {
	e := newEnv(t)
	e.profiles(map[string]agents.Profile{"reviewer": {Instructions: "ROLE:reviewer"}})
	var r1 *Runner
	model, p := routedModel(t, func(r modelReq) llmtest.Reply {
		switch {
		case strings.Contains(r.system, "ROLE:reviewer"):
			return llmtest.Reply{Text: "slow", Latency: 60 * time.Second}
		case strings.Contains(r.last, "please review"):
			return call(subagents.StartTool, map[string]any{"agent": "reviewer", "prompt": "review it", "wait": 0,
				"name": nameOnOtherRunner(t, e, r1, "t1", "p1")})
		}
		return llmtest.Reply{Text: "left it running"}
	})
	r1, _ = e.twoRunners(p, nil)
	e.publish(events.KindEvents, "t1", "p1", events.Input{Text: "please review"})
	var child string
	testutil.Eventually(t, 30*time.Second, "the child's run to be live", func() bool {
		kids := e.session("t1", "p1").Children
		if len(kids) != 1 {
			return false
		}
		child = kids[0].Session
		// Its model call has reached the model too: a call still on its way
		// when the switch goes on would be counted after it.
		return e.session("t1", child).State == StateRunning && len(requestsOf(model, "ROLE:reviewer")) == 1
	})
	ctx := context.Background()
	control, err := e.js.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := groundstop.Set(ctx, control, "t1", "p1", groundstop.Record{Reason: "incident", By: "t1"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the child's run to stop under its parent's switch", func() bool {
		return e.session("t1", child).State == StateStopped
	})
	before := len(requestsOf(model, "ROLE:reviewer"))
	e.publishAgentInput("t1", child, "more work")
	// The held input is in hand (un-acked) and no model call is made for it.
	held := e.workConsumer("t1", child)
	testutil.Eventually(t, 20*time.Second, "the input to the stopped child to be held", func() bool {
		info, err := held.Info(ctx)
		return err == nil && info.NumAckPending >= 1 && info.NumPending == 0
	})
	if n := len(requestsOf(model, "ROLE:reviewer")); n != before {
		t.Errorf("the child called its model %d more times under its parent's Ground Stop", n-before)
	}
}

// publishAgentInput publishes work for a child as its parent's runner
// does and returns its CE id.
func (e *env) publishAgentInput(tenant, session, text string) string {
	e.t.Helper()
	ev, err := events.New(tenant, session, "test-runner", events.AgentInput{Text: text, Parent: "p1"})
	if err != nil {
		e.t.Fatal(err)
	}
	subj, _ := events.AgentEventsSubject(tenant, session)
	return e.send(subj, ev)
}

func TestA_child_s_tokens_count_against_its_root_s_fuel(t *testing.T) {
	e := newEnv(t)
	e.profiles(map[string]agents.Profile{
		"lead":     {Instructions: "ROLE:lead", Limits: dispatcherapi.AgentLimits{Fuel: 1000}},
		"reviewer": {Instructions: "ROLE:reviewer"},
	})
	_, p := routedModel(t, func(r modelReq) llmtest.Reply {
		switch {
		case strings.Contains(r.system, "ROLE:reviewer"):
			return llmtest.Reply{Text: "expensive answer", Usage: llm.Usage{InputTokens: 900, OutputTokens: 300}}
		case strings.Contains(r.last, "expensive answer"):
			return llmtest.Reply{Text: "done", Usage: llm.Usage{InputTokens: 10, OutputTokens: 5}}
		}
		return call(subagents.StartTool, map[string]any{"agent": "reviewer", "prompt": "review", "wait": 60})
	})
	e.startRunner("r1", p, nil)
	e.publishAgent("t1", "p1", "review it", "lead")
	testutil.Eventually(t, 30*time.Second, "the root to count its child's tokens", func() bool {
		rec := e.session("t1", "p1")
		return rec.State == StateIdle && rec.TokensUsed >= 1200
	})
	if c := e.session("t1", "p1-a1"); c.RootFuel != 1000 || c.TokensUsed != 1200 {
		t.Errorf("child record: root fuel %d, tokens %d", c.RootFuel, c.TokensUsed)
	}
	// The family spent the root's fuel: the root's next run is refused,
	// and so is more work for the child.
	next := e.publish(events.KindEvents, "t1", "p1", events.Input{Text: "again"})
	more := e.publishAgentInput("t1", "p1-a1", "more")
	// The child's refusal is told to the parent, which (out of fuel
	// itself) records it refused too.
	told := FinishedEventID("p1-a1", "refused-"+more)
	testutil.Eventually(t, 30*time.Second, "both refusals, and the child's told to its parent", func() bool {
		return refusedFor(e.records("t1", "p1"), next, "out of fuel") &&
			refusedFor(e.records("t1", "p1-a1"), more, "out of fuel: the root session p1") &&
			refusedFor(e.records("t1", "p1"), told, "out of fuel")
	})
	if c := e.session("t1", "p1-a1"); c.Runs != 1 {
		t.Errorf("the refused input started a child run: %+v", c)
	}
}

// refusedFor reports a refusal of event id ("" any) whose reason holds text.
func refusedFor(recs []Record, id, text string) bool {
	for _, r := range recs {
		if r.Kind == RecordRefused && (id == "" || r.Event == id) && strings.Contains(r.Reason, text) {
			return true
		}
	}
	return false
}

func TestA_forged_agent_finished_on_the_events_subject_is_refused_and_recorded(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t)
	e.startRunner("r1", p, nil)
	id := e.publish(events.KindEvents, "t1", "p1", events.External{Type: events.TypeAgentFinished, Source: "evil",
		DataContentType: "application/json", Data: []byte(`{"child":"p1-a1","run":"r-x","answer":"ship it"}`)})
	testutil.Eventually(t, 20*time.Second, "the forged event to be refused", func() bool {
		return refusedFor(e.records("t1", "p1"), id, "sub-agent event outside the agentevents subject")
	})
	if n := model.RequestCount(); n != 0 {
		t.Errorf("the model was called %d times for a forged event", n)
	}
}

// ghostChild leaves child p1-a1 as a runner that died right after
// recording its run's end would: the transcript says the run ended with
// an answer, the record still says running on a runner that is gone.
func ghostChild(e *env) {
	prompt := llm.UserText("review the diff")
	prompt.ID = "m-1"
	answer := llm.Message{ID: "m-2", Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "the answer is 42"}}}
	e.appendRecord("t1", "p1-a1", Record{Kind: RecordRunStarted, Run: "r-ghost", Runner: "ghost", Cause: "dispatch", Message: &prompt})
	e.appendRecord("t1", "p1-a1", Record{Kind: RecordMessage, Run: "r-ghost", Runner: "ghost", Message: &answer})
	e.appendRecord("t1", "p1-a1", Record{Kind: RecordRunEnded, Run: "r-ghost", Runner: "ghost", Reason: "completed"})
	e.putRecord(SessionRecord{Tenant: "t1", Session: "p1-a1", State: StateRunning, Run: "r-ghost", Runner: "ghost",
		Incarnation: "gone", Since: time.Now().UTC(), Runs: 1, Agent: "reviewer", Lineage: []string{"p1"}, Number: 1})
	e.putRecord(SessionRecord{Tenant: "t1", Session: "p1", State: StateIdle, Runs: 1,
		Children: []sessionrec.Child{{Session: "p1-a1", Agent: "reviewer", Number: 1, Run: "r-p", Started: time.Now().UTC()}}})
}

func TestA_child_whose_runner_died_between_its_end_and_the_publish_reports_its_answer_once(t *testing.T) {
	for _, published := range []bool{false, true} {
		t.Run(fmt.Sprintf("published_before_the_crash=%v", published), func(t *testing.T) {
			e := newEnv(t)
			e.profiles(map[string]agents.Profile{"reviewer": {Instructions: "ROLE:reviewer"}})
			ghostChild(e)
			fin := FinishedEventID("p1-a1", "r-ghost")
			if published {
				// The dead runner got its publish out; the recovery's is the
				// same event again.
				ev, err := events.New("t1", "p1", "ghost", events.AgentFinished{Child: "p1-a1", Agent: "reviewer", Number: 1, Run: "r-ghost", Reason: "completed", Answer: "the answer is 42"})
				if err != nil {
					t.Fatal(err)
				}
				ev.SetID(fin)
				subj, _ := events.AgentEventsSubject("t1", "p1")
				msg, _ := events.Encode(context.Background(), subj, ev)
				if _, err := e.js.PublishMsg(context.Background(), msg); err != nil {
					t.Fatal(err)
				}
			}
			model, p := routedModel(t, func(r modelReq) llmtest.Reply { return llmtest.Reply{Text: "thanks"} })
			e.startRunner("r1", p, nil)
			testutil.Eventually(t, 30*time.Second, "the answer to wake the parent and the child to settle", func() bool {
				return deliveries(e.records("t1", "p1"))[fin] == 1 && e.session("t1", "p1").State == StateIdle &&
					e.session("t1", "p1-a1").State == StateIdle
			})
			if n := len(requestsOf(model, "ROLE:reviewer")); n != 0 {
				t.Errorf("the child's ended run was run again (%d model calls)", n)
			}
			if n := countIn(model, "", "the answer is 42"); n != 1 {
				t.Errorf("requests carrying the answer: %d, want 1", n)
			}
			if rec := e.session("t1", "p1"); rec.Runs != 2 {
				t.Errorf("parent runs = %d, want 2 (one woken by the answer)", rec.Runs)
			}
		})
	}
}

func TestA_recovered_parent_s_brief_lists_children_at_work_and_the_one_it_was_waiting_for(t *testing.T) {
	e := newEnv(t)
	turn := llm.UserText("get a review")
	turn.ID = "m-1"
	start := llm.Message{ID: "m-2", Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockToolUse, ID: "tu1", Name: subagents.StartTool,
		Input: json.RawMessage(`{"agent":"reviewer","prompt":"review","wait":120}`)}}}
	e.appendRecord("t1", "p1", Record{Kind: RecordRunStarted, Run: "r-ghost", Runner: "ghost", Cause: "dispatch", Message: &turn})
	e.appendRecord("t1", "p1", Record{Kind: RecordMessage, Run: "r-ghost", Runner: "ghost", Message: &start})
	e.putRecord(SessionRecord{Tenant: "t1", Session: "p1", State: StateRunning, Run: "r-ghost", Runner: "ghost", Incarnation: "gone",
		Since: time.Now().UTC(), Runs: 1, Inputs: []string{"get a review"},
		Children: []sessionrec.Child{
			{Session: "p1-a1", Agent: "reviewer", Number: 1, Run: "r-ghost", Started: time.Now().UTC()},
			{Session: "p1-a2", Agent: "reviewer", Number: 2, Run: "r-older", Started: time.Now().UTC()},
			{Session: "p1-a3", Agent: "reviewer", Number: 3, Run: "r-ghost", Started: time.Now().UTC()},
		}})
	e.putRecord(SessionRecord{Tenant: "t1", Session: "p1-a3", State: StateIdle, Runs: 1, Reason: "completed", Lineage: []string{"p1"}, Number: 3, Agent: "reviewer"})
	e.putRecord(SessionRecord{Tenant: "t1", Session: "p1-a1", State: StateIdle, Lineage: []string{"p1"}, Number: 1, Agent: "reviewer"})
	e.putRecord(SessionRecord{Tenant: "t1", Session: "p1-a2", State: StateIdle, Runs: 1, Reason: "completed", Lineage: []string{"p1"}, Number: 2, Agent: "reviewer"})
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "waiting for the review"})
	e.startRunner("r1", p, nil)
	testutil.Eventually(t, 20*time.Second, "the recovered run to end", func() bool {
		return countKind(e.records("t1", "p1"), RecordRunEnded) == 1
	})
	first := readReq(model.Requests()[0].Body).all
	for _, want := range []string{"Sub-agents the earlier work started are still at work",
		"agent 1 (reviewer), session p1-a1: starting; the earlier run was waiting for its answer when it stopped and did not get it",
		`agent 3 (reviewer), session p1-a3: finished (completed); read its answer with agent_status {\"agent\": 3}`} {
		if !strings.Contains(first, want) {
			t.Errorf("the brief lacks %q:\n%s", want, first)
		}
	}
	if strings.Contains(first, "session p1-a2") {
		t.Errorf("the brief lists a child an earlier run started that finished:\n%s", first)
	}
}

// TestA_child_s_answer_reaches_its_parent_once_through_a_SIGKILL_of_the_parent_s_runner
// runs two `jetway runner` processes. The parent runs on one and waits in
// the foreground for a child placed on the other; the parent's runner is
// SIGKILLed mid-wait. The survivor recovers the parent (its brief names
// the child it was waiting for), and the child's answer reaches the
// parent exactly once, as a notice.
func TestA_child_s_answer_reaches_its_parent_once_through_a_SIGKILL_of_the_parent_s_runner(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	url, js := procBus(t, 4)
	e := &env{t: t, js: js}
	e.profiles(map[string]agents.Profile{"reviewer": {Instructions: "ROLE:reviewer"}})
	var childName atomic.Value
	model := llmtest.NewAnthropic(t)
	model.SetRouter(func(body []byte) (llmtest.Reply, bool) {
		r := readReq(body)
		switch {
		case strings.Contains(r.system, "ROLE:reviewer"):
			return llmtest.Reply{Text: "reviewed: fine", Latency: 4 * time.Second}, true
		case strings.Contains(r.last, "[sub-agent notice]"):
			return llmtest.Reply{Text: "got the review"}, true
		case strings.Contains(r.all, "You are continuing interrupted work"):
			return llmtest.Reply{Text: "waiting for the reviewer"}, true
		case strings.Contains(r.last, "please review"):
			name := nameOnOtherRunnerOf(e, "ra", "rb", "t1", "p1")
			childName.Store(name)
			return call(subagents.StartTool, map[string]any{"agent": "reviewer", "prompt": "review it", "name": name, "wait": 60}), true
		}
		return llmtest.Reply{Text: "ok"}, true
	})
	procs := map[string]*runnerProc{
		"ra": startRunnerProc(t, "ra", url, model.URL()),
		"rb": startRunnerProc(t, "rb", url, model.URL()),
	}
	e.warmUp("ra", "rb")

	e.publish(events.KindEvents, "t1", "p1", events.Input{Text: "please review"})
	var child, parentRunner string
	testutil.Eventually(t, 30*time.Second, "the parent waiting on a running child", func() bool {
		name, _ := childName.Load().(string)
		if name == "" {
			return false
		}
		c, p := e.session("t1", name), e.session("t1", "p1")
		child, parentRunner = name, p.Runner
		return c.State == StateRunning && p.State == StateRunning && c.Runner != p.Runner
	})
	procs[parentRunner].kill(t)
	t.Logf("killed the parent's runner %s while it waited for %s", parentRunner, child)

	testutil.Eventually(t, 60*time.Second, "the answer to reach the recovered parent", func() bool {
		return countIn(model, "", "[sub-agent notice] agent 1 (reviewer) finished after") >= 1 &&
			e.session("t1", "p1").State == StateIdle
	})
	crec := e.session("t1", child)
	fin := FinishedEventID(child, crec.Run)
	if n := deliveries(e.records("t1", "p1"))[fin]; n != 1 {
		t.Errorf("finished event %s delivered %d times, want 1", fin, n)
	}
	if n := countIn(model, "", "[sub-agent notice]"); n != 1 {
		t.Errorf("requests whose last message carries the notice: %d, want 1", n)
	}
	starts := runStarts(e.records("t1", "p1"))
	if len(starts) < 2 || starts[0].Runner != parentRunner || starts[1].Cause != "recovered" {
		t.Fatalf("parent runs: %+v", starts)
	}
	if !strings.Contains(starts[1].Message.Content[0].Text, "session "+child) {
		t.Errorf("the recovered brief does not name the child:\n%s", starts[1].Message.Content[0].Text)
	}
}

// warmUp sends events through every partition until the runners ids
// share them (a partition is held once an event came through it).
func (e *env) warmUp(ids ...string) {
	e.t.Helper()
	p, err := bus.Partitions(context.Background(), e.js)
	if err != nil {
		e.t.Fatal(err)
	}
	warm := map[int]string{}
	for i := 0; len(warm) < p; i++ {
		name := fmt.Sprintf("warm-%d", i)
		if n := bus.PartitionFor("t0", name, p); warm[n] == "" {
			warm[n] = name
		}
	}
	last := time.Time{}
	testutil.Eventually(e.t, 60*time.Second, "the runners to share the partitions", func() bool {
		h := e.holders(ids...)
		held := map[string]int{}
		for _, id := range h {
			held[id]++
		}
		// Every partition held, each runner its share: until then
		// partitions still move, and a session placed on one runner may
		// be served by the other.
		balanced := len(held) == len(ids)
		for _, n := range held {
			balanced = balanced && n >= p/len(ids) && n <= (p+len(ids)-1)/len(ids)
		}
		if len(h) == p && balanced {
			return true
		}
		if time.Since(last) > time.Second {
			last = time.Now()
			for n, name := range warm {
				if _, held := h[n]; !held {
					e.publish(events.KindEvents, "t0", name, events.Input{Text: "warm up"})
				}
			}
		}
		return false
	})
}

// nameOnOtherRunnerOf is a child name whose partition the other of two
// runners holds than the one holding session's.
func nameOnOtherRunnerOf(e *env, a, b, tenant, session string) string {
	h := e.holders(a, b)
	p := len(h)
	mine := h[bus.PartitionFor(tenant, session, p)]
	for i := range 200 {
		name := fmt.Sprintf("reviewer-%d", i)
		if h[bus.PartitionFor(tenant, name, p)] != mine {
			return name
		}
	}
	return "reviewer-x"
}

func TestAgent_start_refuses_bad_input_with_clear_errors_and_makes_nothing(t *testing.T) {
	e := newEnv(t)
	e.putRecord(SessionRecord{Tenant: "t1", Session: "taken", State: StateIdle, Runs: 1})
	model, p := routedModel(t, func(r modelReq) llmtest.Reply {
		if strings.Contains(r.last, "tool_result") {
			return llmtest.Reply{Text: "done"}
		}
		return llmtest.Reply{ToolCalls: []llmtest.ToolCall{
			{Name: subagents.StartTool, Input: `{"agent":"nope","prompt":"x"}`},
			{Name: subagents.StartTool, Input: `{"prompt":"x","name":"a.b"}`},
			{Name: subagents.StartTool, Input: `{"prompt":"x","name":"taken"}`},
			{Name: subagents.StartTool, Input: `{"prompt":"x","wait":9999}`},
			{Name: subagents.StartTool, Input: `{"prompt":"  "}`},
			{Name: subagents.SendTool, Input: `{"agent":3,"text":"hi"}`},
		}}
	})
	e.startRunner("r1", p, nil)
	e.publish(events.KindEvents, "t1", "p1", events.Input{Text: "go"})
	testutil.Eventually(t, 20*time.Second, "the run to end", func() bool {
		return countKind(e.records("t1", "p1"), RecordRunEnded) == 1
	})
	results := requestsOf(model, "")[1].last
	for _, want := range []string{
		`unknown agent \"nope\": tenant t1 has no agent profile of that name`,
		`name \"a.b\": may contain only A-Z a-z 0-9 _ -`,
		`session \"taken\" exists already: choose another name`,
		`wait 9999: want 0 to 600 seconds`,
		`prompt: say what the sub-agent is to do`,
		`this session has no sub-agent 3 (it has 0; agent_status lists them)`,
	} {
		if !strings.Contains(results, want) {
			t.Errorf("the tool results lack %q:\n%s", want, results)
		}
	}
	if kids := e.session("t1", "p1").Children; len(kids) != 0 {
		t.Errorf("refused starts made children: %+v", kids)
	}
	if rec := e.session("t1", "taken"); rec.Runs != 1 || len(rec.Lineage) != 0 {
		t.Errorf("the existing session was touched: %+v", rec)
	}
}
