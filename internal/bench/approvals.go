package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	rec "jetway/pkg/control/approvals"
	"jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
)

// GroupApprovals is a person in the loop: what a session waiting for a
// decision costs, and how soon a decision starts the approved call.
const GroupApprovals = "approvals"

// Names of the approvals figures.
const (
	FigApprovalP50        = "approval decision → approved call starts p50"
	FigApprovalP99        = "approval decision → approved call starts p99"
	FigApprovalIdleMem    = "runner memory per idle session (approvals group)"
	FigApprovalWaitingMem = "runner memory per session waiting for a person"
)

// Goals of the approvals figures (issue 37).
const (
	approvalGoal   = "p99 ≤ 10 ms"
	approvalGoalMS = 10.0
	waitingGoal    = "≤ an idle session's"
)

// approvalTool is the tool the group's profile holds for a person.
const approvalTool = "approved_call"

// approvalSessions is how many sessions the decision figure rotates over.
const approvalSessions = 20

func init() {
	AllGroups = append(AllGroups, GroupApprovals)
	measures[GroupApprovals] = (*env).measureApprovals
}

// approvedCall is a tool that notes when a call of it starts.
func (rb *runnerBench) approvedCall() tool.Tool {
	return tool.Func{Name: approvalTool, Description: "a call the bench's profile holds for a person", Fn: func(context.Context, tool.Call) (tool.Result, error) {
		at := time.Now()
		if ch := rb.executed.Load(); ch != nil {
			select {
			case *ch <- at:
			default:
			}
		}
		return tool.Result{Content: "ran"}, nil
	}}
}

// approvalSizes are the decision figure's samples and the memory figure's
// population: 200 decisions and 1000 sessions (50 and 200 quick), fewer
// when Sizes.Probes or Sizes.IdleSessions say fewer.
func (e *env) approvalSizes() (decisions, sessions int) {
	if e.cfg.Quick {
		return min(e.sizes.Probes, 50), min(e.sizes.IdleSessions, 200)
	}
	return min(e.sizes.Probes, 200), min(e.sizes.IdleSessions, 1000)
}

// measureApprovals runs an in-process runner whose profile holds every
// approved_call for a person, and measures the decision path and the
// memory of waiting sessions, each beside its raw counterpart.
func (e *env) measureApprovals(ctx context.Context) {
	rb, done, err := e.newRunnerBench(ctx)
	if err != nil {
		e.skip(FigApprovalP99, "ms", approvalGoal, err)
		return
	}
	defer done()
	rb.approvals = true
	run := uid()
	stop, err := rb.startRunner(ctx, "bench-approvals-"+run, rb.model)
	if err != nil {
		e.skip(FigApprovalP99, "ms", approvalGoal, err)
		return
	}
	defer stop()
	rb.decisions(ctx, "apd-"+run)
	rb.waitingMemory(ctx, run)
}

// holdFor makes tenant's default profile hold approved_call for a person.
func (rb *runnerBench) holdFor(ctx context.Context, tenant string) error {
	kv, err := rb.e.js.KeyValue(ctx, bus.BucketAgents)
	if err != nil {
		return fmt.Errorf("agents bucket: %w", err)
	}
	_, err = agents.Put(ctx, kv, tenant, agents.DefaultName, agents.Profile{Tools: dispatcherapi.AgentTools{Ask: []string{approvalTool}}})
	return err
}

// askFor queues the model's answer to the next n inputs: a call of
// approved_call, which the profile holds.
func (rb *runnerBench) askFor(n int, tag string) {
	for k := range n {
		rb.front.fake.Enqueue(llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: fmt.Sprintf("toolu_%s%d", tag, k), Name: approvalTool, Input: `{}`}}})
	}
}

// decisions times a decision (recorded as the dispatcher records it, and
// its decided event published) to the start of the approved call, next
// to the same two steps on raw JetStream (a KV write, a publish consumed).
func (rb *runnerBench) decisions(ctx context.Context, tenant string) {
	e := rb.e
	n, _ := e.approvalSizes()
	raw, err := e.rawDecisions(ctx, n)
	if err != nil {
		e.skip(FigApprovalP99, "ms", approvalGoal, err)
		return
	}
	if err := rb.holdFor(ctx, tenant); err != nil {
		e.skip(FigApprovalP99, "ms", approvalGoal, err)
		return
	}
	ch := make(chan time.Time, 1)
	rb.executed.Store(&ch)
	defer rb.executed.Store(nil)
	e.progress("approvals: %d decisions, one at a time, over %d sessions waiting for a person", n, approvalSessions)
	var s samples
	for k := range n {
		d, err := rb.decision(ctx, tenant, sessionName(k%approvalSessions), k, 2*(k/approvalSessions), ch)
		if err != nil {
			e.skip(FigApprovalP99, "ms", approvalGoal, err)
			return
		}
		s = append(s, d)
	}
	p99 := s.pct(99)
	e.add(figure(FigApprovalP50, "ms", s.pct(50)).vs("raw KV write + publish → consume p50", raw.pct(50)).info("-").
		note("%d decisions over %d sessions, each waiting with one held call: from the decision's compare-and-swap on the approval record (as the dispatcher takes it) and its decided event published (sync), to the approved call's start in the runner (which reads the record and moves it to executing first); the baseline is the same two steps on raw JetStream, a KV write and a publish, timed to a consumer receiving the publish", len(s), approvalSessions))
	e.add(figure(FigApprovalP99, "ms", p99).vs("raw KV write + publish → consume p99", raw.pct(99)).goal(approvalGoal, p99 <= approvalGoalMS))
}

// decision makes session wait for a person (an input whose run calls
// approved_call), approves the call and times the decision to its start.
// runs is how many runs the session had before.
func (rb *runnerBench) decision(ctx context.Context, tenant, session string, k, runs int, executed <-chan time.Time) (time.Duration, error) {
	e := rb.e
	rb.askFor(1, fmt.Sprintf("d%d-", k))
	if err := e.publish(ctx, false, tenant, session, events.Input{Text: "ship it"}, false); err != nil {
		return 0, err
	}
	wctx, cancel := deadline(ctx, e.patience())
	defer cancel()
	if err := rb.waitIdle(wctx, tenant, session, runs+1); err != nil {
		return 0, err
	}
	ctl, err := e.js.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		return 0, fmt.Errorf("control bucket: %w", err)
	}
	pending, err := rec.List(wctx, ctl, tenant, session, true)
	if err != nil {
		return 0, err
	}
	if len(pending) != 1 {
		return 0, fmt.Errorf("session %s: %d pending approvals after its run, want 1", session, len(pending))
	}
	a := pending[0]
	t0 := time.Now()
	if _, err := rec.Decide(wctx, ctl, tenant, session, a.ID, rec.Decision{Decision: rec.DecisionApprove, By: "bench"}); err != nil {
		return 0, err
	}
	if err := e.publish(wctx, false, tenant, session, events.ApprovalDecided{Approval: a.ID, Decision: rec.DecisionApprove}, false); err != nil {
		return 0, err
	}
	var d time.Duration
	select {
	case t1 := <-executed:
		d = t1.Sub(t0)
	case <-wctx.Done():
		return 0, fmt.Errorf("approval %s: the approved call did not start: %w", a.ID, wctx.Err())
	}
	return d, rb.waitIdle(wctx, tenant, session, runs+2)
}

// rawDecisions times n times a KV write followed by a sync publish, to a
// consumer receiving the publish: the decision path with nothing of
// jetway's in it.
func (e *env) rawDecisions(ctx context.Context, n int) (samples, error) {
	name := "BENCHAP_" + uid()
	kv, err := e.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("raw decisions: bucket: %w", err)
	}
	defer func() { _ = e.js.DeleteKeyValue(context.WithoutCancel(ctx), name) }()
	subject := "benchap." + name
	st, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("raw decisions: stream: %w", err)
	}
	defer func() { _ = e.js.DeleteStream(context.WithoutCancel(ctx), name) }()
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return nil, fmt.Errorf("raw decisions: consumer: %w", err)
	}
	got := make(chan time.Time, 1)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		got <- time.Now()
		_ = m.Ack()
	})
	if err != nil {
		return nil, fmt.Errorf("raw decisions: consume: %w", err)
	}
	defer cc.Stop()
	var s samples
	for k := range n {
		t0 := time.Now()
		if _, err := kv.Put(ctx, "approval", []byte(fmt.Sprintf(`{"state":"approved","n":%d}`, k))); err != nil {
			return nil, err
		}
		if _, err := e.js.Publish(ctx, subject, []byte(`{"type":"io.jetway.approval.decided"}`)); err != nil {
			return nil, err
		}
		select {
		case t1 := <-got:
			s = append(s, t1.Sub(t0))
		case <-time.After(e.patience()):
			return nil, errors.New("raw decisions: a publish never reached its consumer")
		}
	}
	return s, nil
}

// waitingMemory weighs n idle sessions, then n sessions waiting for a
// person (each run ended holding one call), by the live heap's growth.
func (rb *runnerBench) waitingMemory(ctx context.Context, run string) {
	e := rb.e
	_, n := e.approvalSizes()
	idleT, waitT := "api-"+run, "apw-"+run
	if err := rb.holdFor(ctx, waitT); err != nil {
		e.skip(FigApprovalWaitingMem, "KiB", waitingGoal, err)
		return
	}
	// Warm both kinds first, so neither population pays the runner's and
	// the server's one-time growth (a tenant's first approval, schedule,
	// maps growing) for the other.
	if err := rb.warmBoth(ctx, run); err != nil {
		e.skip(FigApprovalWaitingMem, "KiB", waitingGoal, err)
		return
	}
	heap0 := liveHeap()
	e.progress("approvals: %d idle sessions, then %d waiting for a person", n, n)
	if err := rb.populateTenant(ctx, idleT, n); err != nil {
		e.skip(FigApprovalWaitingMem, "KiB", waitingGoal, err)
		return
	}
	heap1 := liveHeap()
	rb.askFor(n, "w")
	if err := rb.populateTenant(ctx, waitT, n); err != nil {
		e.skip(FigApprovalWaitingMem, "KiB", waitingGoal, err)
		return
	}
	heap2 := liveHeap()
	idle := (float64(heap1) - float64(heap0)) / float64(n) / 1024
	waiting := (float64(heap2) - float64(heap1)) / float64(n) / 1024
	e.add(figure(FigApprovalIdleMem, "KiB", idle).info("-").
		note("live heap growth over %d sessions each after one plain run, idle and cached / %d; includes the embedded nats-server's state in this process", n, n))
	e.add(figure(FigApprovalWaitingMem, "KiB", waiting).vs("idle session, same run", idle).goal(waitingGoal, waiting <= idle).
		note("live heap growth over %d sessions each after one run that ended holding a call for a person (a pending approval in the control bucket, its timeout scheduled; the session idle and cached, its history one tool call and result longer) / %d, weighed right after the same number of idle sessions; includes the embedded nats-server's state (the approval's key and schedule) in this process, so an upper bound", n, n))
}

// populateTenant has n sessions of tenant each handle one input.
func (rb *runnerBench) populateTenant(ctx context.Context, tenant string, n int) error {
	w, err := watchRuns(rb.e.url, tenant)
	if err != nil {
		return err
	}
	defer w.stop()
	return rb.populate(ctx, w, tenant, 0, n)
}

// warmBoth has a few sessions of each kind (idle, waiting for a person)
// handle their run before the memory figure is weighed.
func (rb *runnerBench) warmBoth(ctx context.Context, run string) error {
	const warm = 50
	if err := rb.populateTenant(ctx, "apwarmi-"+run, warm); err != nil {
		return err
	}
	if err := rb.holdFor(ctx, "apwarmw-"+run); err != nil {
		return err
	}
	rb.askFor(warm, "warm")
	return rb.populateTenant(ctx, "apwarmw-"+run, warm)
}
