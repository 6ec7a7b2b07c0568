package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
	"jetway/services/jobs/jobtools"
	"jetway/services/runner/internal/subagents"
)

// A runner must know every switch before it takes its first event: a
// switch set while no runner ran (or before this one started) is the
// operator's word, and a runner that consumed before it had read the
// switches would start the very run the switch was set to stop. The
// bucket holds many other switches, read before this session's, as a
// control bucket in use does.
func TestA_switch_set_before_a_runner_starts_holds_for_its_first_event(t *testing.T) {
	for _, scope := range []struct{ name, tenant, session string }{
		{"session", "t1", "s1"},
		{"tenant", "t1", ""},
	} {
		t.Run(scope.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			control, err := e.js.KeyValue(ctx, bus.BucketControl)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 300 {
				if _, err := groundstop.Set(ctx, control, "other", fmt.Sprintf("s%03d", i), groundstop.Record{By: "other"}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := groundstop.Set(ctx, control, scope.tenant, scope.session, groundstop.Record{Reason: "before start", By: "t1"}); err != nil {
				t.Fatal(err)
			}
			id := e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "work"})

			model, p := fakeModel(t, llmtest.Reply{Text: "ok"})
			e.startRunner("r1", p, nil)
			held := e.workConsumer("t1", "s1")
			testutil.Eventually(t, 20*time.Second, "the event to be taken and held", func() bool {
				info, err := held.Info(ctx)
				return err == nil && info.NumAckPending == 1 && info.NumPending == 0
			})

			if n := model.RequestCount(); n != 0 {
				t.Fatalf("the model was called %d times under a switch set before the runner started", n)
			}
			if recs := e.records("t1", "s1"); len(recs) != 0 {
				t.Fatalf("the session's transcript grew under the switch: %+v", recs)
			}

			if err := groundstop.Clear(ctx, control, scope.tenant, scope.session); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 20*time.Second, "the held event to run once the switch is lifted", func() bool {
				return deliveries(e.records("t1", "s1"))[id] == 1 && e.session("t1", "s1").State == StateIdle
			})

		})
	}
}

// workConsumer is the work consumer of the session's partition.
func (e *env) workConsumer(tenant, session string) interface {
	Info(context.Context) (*jetstream.ConsumerInfo, error)
} {
	e.t.Helper()
	ctx := context.Background()
	p, err := bus.Partitions(ctx, e.js)
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := e.js.Consumer(ctx, bus.WorkStream(0), bus.WorkConsumerName(bus.PartitionFor(tenant, session, p)))
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// The reproduction, end to end through a real runner, a real jobs
// worker and the model's real SSE protocol: a run starts a background
// heartbeat and then waits on a foreground one; Ground Stop of the session
// ends both within a second (the worker kills on the switch it watches,
// the runner cancels the run), and once the switch is lifted the model's
// next request reads that the commands were killed by Ground Stop. Lifting
// starts no command again.
func TestGround_Stop_kills_the_runs_commands_and_the_model_reads_so(t *testing.T) {
	e := newEnv(t)
	root := t.TempDir()
	jc := e.startWorker(root)
	model, p := fakeModel(t, llmtest.Reply{ToolCalls: []llmtest.ToolCall{
		{ID: "c1", Name: jobtools.Shell, Input: `{"command":"` + testutil.Heartbeat(t, "bg") + `","background":true}`},
		{ID: "c2", Name: jobtools.Shell, Input: `{"command":"` + testutil.Heartbeat(t, "fg") + `","timeout":600}`},
	}})
	model.SetFallback(llmtest.Reply{Text: "noted"})
	e.startRunner("r1", p, func(s SessionRef) []tool.Tool {
		return jobtools.Tools(jc, s.Tenant, s.Session, s.Run, s.Network, s.Lineage...)
	})
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "start the heartbeats"})

	bgBeat, fgBeat := filepath.Join(root, "t1", "s1", "bg"), filepath.Join(root, "t1", "s1", "fg")
	testutil.Eventually(t, 20*time.Second, "both heartbeats to beat", func() bool { return testutil.FileSize(bgBeat) > 0 && testutil.FileSize(fgBeat) > 0 })

	at := time.Now()
	e.setStop("t1", "s1", true)
	testutil.HeartbeatsGone(t, at, "bg", "fg")
	testutil.Eventually(t, 20*time.Second, "the run to stop", func() bool { return e.session("t1", "s1").State == StateStopped })
	before := model.RequestCount()

	e.setStop("t1", "s1", false)
	killed := func(id int) string { return fmt.Sprintf("job %d (while) was killed", id) }
	testutil.Eventually(t, 20*time.Second, "the model to read that both commands were killed by Ground Stop", func() bool {
		var after string
		for _, r := range model.Requests()[before:] {
			after += string(r.Body)
		}
		return strings.Contains(after, killed(1)) && strings.Contains(after, killed(2))
	})
	if next := string(model.Requests()[before].Body); !strings.Contains(next, "killed by Ground Stop") || strings.Contains(next, "incident 7") {
		t.Errorf("the model's next request does not say Ground Stop killed the commands (or names the switch's reason): %.2000s", next)
	}
	// Two paths end the foreground call and either may be first: the
	// runner cancels it, or the worker, watching the same switch, kills
	// its command and the call returns that. Each result names Ground Stop.
	if r := model.Requests()[before].ToolResults()["c2"]; !strings.Contains(r, "cancelled by Ground Stop") && !strings.Contains(r, "killed by Ground Stop") {
		t.Errorf("the foreground call's result reads %q; want it cancelled, or its command killed, by Ground Stop", r)
	}
	for _, f := range []string{"bg", "fg"} {
		if n := testutil.ProcessesWith(testutil.HeartbeatMarker(t, f)); len(n) > 0 {
			t.Errorf("heartbeat %s runs again after the switch was lifted: pids %v", f, n)
		}
	}
	jobs, err := jc.List(context.Background(), "t1", "s1")
	if err != nil || len(jobs) != 2 || jobs[0].Status != "killed" || jobs[1].Status != "killed" {
		t.Errorf("jobs after the switch was lifted: %+v, %v; want both killed, none started again", jobs, err)
	}
}

// A sub-agent's background command outlives the child's run; the root's
// switch still kills it, though no run of the child is live for a runner
// to stop: the child's runs sent its lineage with the command, and the
// jobs worker kills by it.
func TestGround_Stop_of_a_root_kills_its_idle_sub_agents_background_command(t *testing.T) {
	e := newEnv(t)
	root := t.TempDir()
	jc := e.startWorker(root)
	e.profiles(map[string]agents.Profile{"helper": {Instructions: "ROLE:helper"}})
	beat := testutil.Heartbeat(t, "hb")
	_, p := routedModel(t, func(r modelReq) llmtest.Reply {
		switch {
		case strings.Contains(r.system, "ROLE:helper") && strings.Contains(r.last, "tool_result"):
			return llmtest.Reply{Text: "started it"}
		case strings.Contains(r.system, "ROLE:helper"):
			return call(jobtools.Shell, map[string]any{"command": beat, "background": true})
		case strings.Contains(r.last, "start a helper"):
			return call(subagents.StartTool, map[string]any{"agent": "helper", "prompt": "start the heartbeat", "wait": 0})
		}
		return llmtest.Reply{Text: "ok"}
	})
	e.startRunner("r1", p, func(s SessionRef) []tool.Tool {
		return jobtools.Tools(jc, s.Tenant, s.Session, s.Run, s.Network, s.Lineage...)
	})
	e.publish(events.KindEvents, "t1", "p1", events.Input{Text: "start a helper"})

	var child, hb string
	testutil.Eventually(t, 30*time.Second, "the child's run to end with its heartbeat beating", func() bool {
		kids := e.session("t1", "p1").Children
		if len(kids) != 1 {
			return false
		}
		child = kids[0].Session
		hb = filepath.Join(root, "t1", child, "hb")
		return e.session("t1", child).State == StateIdle && testutil.FileSize(hb) > 0
	})

	at := time.Now()
	e.setStop("t1", "p1", true)
	testutil.HeartbeatsGone(t, at, "hb")
	// The record says so a moment after the processes are gone.
	testutil.EventuallyNil(t, 10*time.Second, "the child's heartbeat listed killed", func() error {
		jobs, err := jc.List(context.Background(), "t1", child)
		if err != nil || len(jobs) != 1 || jobs[0].Status != "killed" {
			return fmt.Errorf("the child's jobs: %+v, %v", jobs, err)
		}
		return nil
	})
}

// setStop sets or clears the Ground Stop switch of tenant/session (its
// reason is one the model must never read).
func (e *env) setStop(tenant, session string, on bool) {
	e.t.Helper()
	ctx := context.Background()
	control, err := e.js.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		e.t.Fatal(err)
	}
	if on {
		_, err = groundstop.Set(ctx, control, tenant, session, groundstop.Record{Reason: "incident 7", By: tenant})
	} else {
		err = groundstop.Clear(ctx, control, tenant, session)
	}
	if err != nil {
		e.t.Fatal(err)
	}
}
