package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	"jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
	"jetway/pkg/handover"
	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
	"jetway/pkg/llm/providers"
	"jetway/services/jobs"
	jobsclient "jetway/services/jobs/client"
	"jetway/services/jobs/jobtools"
)

// putProfile stores a profile as the dispatcher does; it returns its version.
func (e *env) putProfile(tenant, name string, p agents.Profile) uint64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := e.js.KeyValue(ctx, bus.BucketAgents)
	if err != nil {
		e.t.Fatal(err)
	}
	stored, err := agents.Put(ctx, kv, tenant, name, p)
	if err != nil {
		e.t.Fatal(err)
	}
	return stored.Version
}

// publishAgent publishes an input naming an agent (the jetwayagent
// extension), as a NATS publisher would, and returns its CE id.
func (e *env) publishAgent(tenant, session, text, agent string) string {
	e.t.Helper()
	ev, err := events.New(tenant, session, "test", events.Input{Text: text})
	if err != nil {
		e.t.Fatal(err)
	}
	events.SetAgent(&ev, agent)
	subj, _ := events.EventsSubject(tenant, session)
	return e.send(subj, ev)
}

// runStarts are the run_started records of a session's transcript.
func runStarts(recs []Record) []Record {
	var out []Record
	for _, r := range recs {
		if r.Kind == RecordRunStarted {
			out = append(out, r)
		}
	}
	return out
}

func TestAn_input_naming_an_agent_binds_the_session_and_each_run_records_the_version_it_went_by(t *testing.T) {
	e := newEnv(t)
	v1 := e.putProfile("t1", "reviewer", agents.Profile{Instructions: "Review, v1."})
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "ok"})
	e.startRunner("r1", p, nil)

	e.publishAgent("t1", "s1", "look at this", "reviewer")
	testutil.Eventually(t, 20*time.Second, "the first run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})
	// The binding stays without being named again; an update reaches the
	// next run.
	v2 := e.putProfile("t1", "reviewer", agents.Profile{Instructions: "Review, v2."})
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "and this"})
	testutil.Eventually(t, 20*time.Second, "the second run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 2
	})
	reqs := model.Requests()
	if first, second := fmt.Sprint(reqs[0].JSON()["system"]), fmt.Sprint(reqs[len(reqs)-1].JSON()["system"]); !strings.Contains(first, "Review, v1.") || !strings.Contains(second, "Review, v2.") {
		t.Fatalf("system prompts %q then %q, want v1's then v2's", first, second)
	}
	starts := runStarts(e.records("t1", "s1"))
	if len(starts) != 2 || starts[0].Agent != "reviewer" || starts[0].AgentVersion != v1 || starts[1].Agent != "reviewer" || starts[1].AgentVersion != v2 {
		t.Fatalf("runs went by %+v, want reviewer v%d then v%d", starts, v1, v2)
	}
	testutil.Eventually(t, 10*time.Second, "the record to say the binding", func() bool {
		rec := e.session("t1", "s1")
		return rec.State == StateIdle && rec.Agent == "reviewer" && rec.AgentVersion == v2
	})
}

func TestAn_unknown_agent_arriving_straight_over_NATS_is_refused_naming_it(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t)
	e.startRunner("r1", p, nil)
	id := e.publishAgent("t1", "s1", "hi", "nobody")
	testutil.Eventually(t, 20*time.Second, "the refusal to be recorded", func() bool {
		return countKind(e.records("t1", "s1"), RecordRefused) == 1
	})
	recs := e.records("t1", "s1")
	if why := refusal(recs, id); !strings.Contains(why, `"nobody"`) {
		t.Fatalf("refusal %q does not name the agent", why)
	}
	if countKind(recs, RecordRunStarted) != 0 || model.RequestCount() != 0 {
		t.Fatal("an event naming an unknown agent started a run")
	}
	// The session is not bound to it: a later input runs as the default.
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "hi again"})
	model.SetFallback(llmtest.Reply{Text: "ok"})
	testutil.Eventually(t, 20*time.Second, "a default run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})
	if s := runStarts(e.records("t1", "s1")); s[0].Agent != agents.DefaultName || s[0].AgentVersion != 0 {
		t.Fatalf("the run went by %q v%d, want the implicit default", s[0].Agent, s[0].AgentVersion)
	}
}

func TestA_recovered_run_goes_by_the_version_its_interrupted_run_had(t *testing.T) {
	e := newEnv(t)
	v1 := e.putProfile("t1", "reviewer", agents.Profile{Instructions: "Review, v1."})
	ghostRun(e, nil, 0)
	rec := e.session("t1", "s1")
	rec.Agent, rec.AgentVersion = "reviewer", v1
	e.putRecord(rec)
	v2 := e.putProfile("t1", "reviewer", agents.Profile{Instructions: "Review, v2."})

	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "recovered"})
	e.startRunner("r1", p, nil)
	testutil.Eventually(t, 20*time.Second, "the recovered run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})
	starts := runStarts(e.records("t1", "s1"))
	last := starts[len(starts)-1]
	if last.Cause != "recovered" || last.AgentVersion != v1 || v2 == v1 {
		t.Fatalf("the recovered run went by %q v%d (cause %s), want v%d, not the newer v%d", last.Agent, last.AgentVersion, last.Cause, v1, v2)
	}
	if sys := fmt.Sprint(model.Requests()[0].JSON()["system"]); !strings.Contains(sys, "Review, v1.") || strings.Contains(sys, "v2") {
		t.Fatalf("the recovered run's system prompt is not v1's: %s", sys)
	}
}

// counted is a tool that counts its runs.
func counted(name string, n *atomic.Int32) tool.Tool {
	return tool.Func{Name: name, Description: "counts", Fn: func(context.Context, tool.Call) (tool.Result, error) {
		n.Add(1)
		return tool.Result{Content: name + " ran"}, nil
	}}
}

func TestTwo_sessions_bound_to_two_profiles_reach_their_own_model_instructions_tools_and_limits(t *testing.T) {
	e := newEnv(t)
	alphaModel := llmtest.NewAnthropic(t,
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "a1", Name: "tool_b", Input: `{}`}}}, // not alpha's
		llmtest.Reply{Text: "alpha done"})
	betaModel := llmtest.NewOpenAI(t,
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "b1", Name: "tool_b", Input: `{}`}}},
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "b2", Name: "tool_b", Input: `{}`}}},
		llmtest.Reply{Text: "beta never gets here"})
	runnerModel, p := fakeModel(t)
	env := map[string]string{
		"JETWAY_ENDPOINT_FA_BASE_URL": alphaModel.URL(), "JETWAY_ENDPOINT_FA_KEY_ENV": "FA_KEY", "FA_KEY": "k-alpha",
		"JETWAY_ENDPOINT_FO_BASE_URL": betaModel.URL(),
	}
	var built atomic.Int32
	modelFor := func(m dispatcherapi.AgentModel) (llm.Provider, error) {
		built.Add(1)
		return providers.ForModel(providers.Model{Provider: m.Provider, Name: m.Name, Endpoint: m.Endpoint}, func(k string) string { return env[k] })
	}
	var ranA, ranB atomic.Int32
	e.putProfile("t1", "alpha", agents.Profile{Instructions: "You are ALPHA.",
		Model: dispatcherapi.AgentModel{Provider: "anthropic", Name: "claude-alpha", Endpoint: "fa"},
		Tools: dispatcherapi.AgentTools{Allow: []string{"tool_a"}}})
	e.putProfile("t1", "beta", agents.Profile{Instructions: "You are BETA.",
		Model:  dispatcherapi.AgentModel{Provider: "openai", Name: "gpt-beta", Endpoint: "fo"},
		Tools:  dispatcherapi.AgentTools{Allow: []string{"tool_b"}},
		Limits: dispatcherapi.AgentLimits{MaxTurns: 1}})
	e.run(Config{ID: "r1", Provider: p, ModelFor: modelFor, MaxTurns: 10, IdleEvict: time.Minute,
		Tools: func(SessionRef) []tool.Tool { return []tool.Tool{counted("tool_a", &ranA), counted("tool_b", &ranB)} }})

	e.publishAgent("t1", "sa", "go", "alpha")
	e.publishAgent("t1", "sb", "go", "beta")
	testutil.Eventually(t, 30*time.Second, "both runs to end", func() bool {
		return countKind(e.records("t1", "sa"), RecordRunEnded) == 1 && countKind(e.records("t1", "sb"), RecordRunEnded) == 1
	})

	if runnerModel.RequestCount() != 0 {
		t.Fatalf("the runner's own model was called %d times; both sessions have their own", runnerModel.RequestCount())
	}
	// Alpha: its model, its prompt, only its tool; its call of beta's tool
	// ran nothing.
	if alphaModel.RequestCount() != 2 {
		t.Fatalf("alpha's model called %d times, want 2", alphaModel.RequestCount())
	}
	a := alphaModel.Requests()[0]
	if sys := fmt.Sprint(a.JSON()["system"]); !strings.Contains(sys, "You are ALPHA.") || strings.Contains(sys, "BETA") {
		t.Fatalf("alpha's system prompt: %s", sys)
	}
	if got := a.ToolNames(); !slices.Equal(got, []string{"tool_a"}) {
		t.Fatalf("alpha was offered %v, want only tool_a", got)
	}
	if a.JSON()["model"] != "claude-alpha" {
		t.Fatalf("alpha's model name %v", a.JSON()["model"])
	}
	// Beta: its model over the OpenAI wire, its prompt, its tool, and its
	// one-turn limit ends the run before a second tool turn.
	if betaModel.RequestCount() != 1 {
		t.Fatalf("beta's model called %d times, want 1 (max_turns 1)", betaModel.RequestCount())
	}
	b := betaModel.Requests()[0]
	if body := string(b.Body); !strings.Contains(body, "You are BETA.") || strings.Contains(body, "ALPHA") {
		t.Fatalf("beta's request lacks its own system prompt:\n%s", body)
	}
	if got := b.ToolNames(); !slices.Equal(got, []string{"tool_b"}) {
		t.Fatalf("beta was offered %v, want only tool_b", got)
	}
	if ranA.Load() != 0 || ranB.Load() != 1 {
		t.Fatalf("tool_a ran %d times, tool_b %d: want 0 and 1 (beta's one call; alpha's call of tool_b refused)", ranA.Load(), ranB.Load())
	}
	reasons := map[string]string{}
	for _, s := range []string{"sa", "sb"} {
		for _, r := range e.records("t1", s) {
			if r.Kind == RecordRunEnded {
				reasons[s] = r.Reason
			}
		}
	}
	if reasons["sa"] != "completed" || reasons["sb"] != "max_turns" {
		t.Fatalf("runs ended %v, want alpha completed and beta at max_turns", reasons)
	}
	if built.Load() != 2 {
		t.Fatalf("built %d providers, want one per profile model", built.Load())
	}
}

// startWorker serves a real jobs worker on the env's server, its
// workspaces under root, and returns a client of it.
func (e *env) startWorker(root string) *jobsclient.Client {
	e.t.Helper()
	w, err := jobs.New(jobs.Config{NC: e.nc, WorkerID: "w1", Root: root, Grace: 200 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	e.t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			e.t.Error("worker did not stop")
		}
	})
	select {
	case <-w.Ready():
	case err := <-done:
		e.t.Fatalf("worker: %v", err)
	case <-time.After(20 * time.Second):
		e.t.Fatal("worker not ready")
	}
	c, err := jobsclient.New(jobsclient.Config{NC: e.nc})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func TestWorkspace_AGENTS_md_is_its_own_system_block_after_the_instructions_present_absent_or_oversized(t *testing.T) {
	e := newEnv(t)
	root := t.TempDir()
	jc := e.startWorker(root)
	write := func(session, body string) {
		dir := filepath.Join(root, "t1", session)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "AGENTS.md"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("present", "Use make test, never go test ./...\n")
	write("big", strings.Repeat("line of the house rules\n", MaxInstructionBytes/20)+"THE END\n")
	e.putProfile("t1", "coder", agents.Profile{Instructions: "You code."})

	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "ok"})
	e.run(Config{ID: "r1", Provider: p, IdleEvict: time.Minute,
		ReadInstructions: func(ctx context.Context, s SessionRef, path string, max int) (Instructions, error) {
			f, err := jobtools.ReadInstructions(ctx, jc, s.Tenant, s.Session, path, max)
			return Instructions{Text: f.Text, Found: f.Found, Cut: f.Cut}, err
		}})
	for _, s := range []string{"present", "absent", "big"} {
		e.publishAgent("t1", s, "work in "+s, "coder")
	}
	// The implicit default reads no file, as the runner never did.
	write("present-default", "NOT FOR THE DEFAULT\n")
	e.publish(events.KindEvents, "t1", "present-default", events.Input{Text: "work in present-default"})
	testutil.Eventually(t, 30*time.Second, "four runs to end", func() bool {
		n := 0
		for _, s := range []string{"present", "absent", "big", "present-default"} {
			n += countKind(e.records("t1", s), RecordRunEnded)
		}
		return n == 4
	})

	system := map[string][]string{}
	for _, r := range model.Requests() {
		var blocks []string
		sys, _ := r.JSON()["system"].([]any)
		for _, b := range sys {
			blocks = append(blocks, b.(map[string]any)["text"].(string))
		}
		for _, s := range []string{"present-default", "present", "absent", "big"} {
			if strings.Contains(string(r.Body), `"work in `+s+`"`) {
				system[s] = blocks
				break
			}
		}
	}
	if b := system["present"]; len(b) != 2 || b[0] != "You code." || !strings.Contains(b[1], "AGENTS.md") || !strings.Contains(b[1], "Use make test, never go test ./...") {
		t.Errorf("present: system blocks %q, want the instructions then AGENTS.md's own block", b)
	}
	if b := system["absent"]; len(b) != 1 || b[0] != "You code." {
		t.Errorf("absent: system blocks %q, want the instructions alone", b)
	}
	b := system["big"]
	if len(b) != 2 || strings.Contains(b[1], "THE END") || !strings.Contains(b[1], "longer than a run start sends") || len(b[1]) > MaxInstructionBytes+500 {
		t.Errorf("oversized: %d blocks, the second %d bytes; want its beginning under the cap and a note saying so", len(b), len(b[len(b)-1]))
	}
	for _, blk := range system["present-default"] {
		if strings.Contains(blk, "NOT FOR THE DEFAULT") {
			t.Errorf("the implicit default read AGENTS.md: %q", system["present-default"])
		}
	}
}

func TestA_stored_default_profile_applies_to_unbound_sessions(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "ok"})
	r := e.startRunner("r1", p, nil)
	v := e.putProfile("t1", agents.DefaultName, agents.Profile{Instructions: "Be brief."})
	testutil.Eventually(t, 10*time.Second, "the runner to know the stored default", func() bool {
		m := r.defaults.Load()
		if m == nil {
			return false
		}
		_, ok := m.Get(agents.Key("t1", agents.DefaultName))
		return ok
	})
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "hi"})
	testutil.Eventually(t, 20*time.Second, "the run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})
	if s := runStarts(e.records("t1", "s1")); s[0].Agent != agents.DefaultName || s[0].AgentVersion != v {
		t.Fatalf("the run went by %q v%d, want the stored default v%d", s[0].Agent, s[0].AgentVersion, v)
	}
	if sys := fmt.Sprint(model.Requests()[0].JSON()["system"]); !strings.Contains(sys, "Be brief.") {
		t.Fatalf("system prompt %s lacks the stored default's instructions", sys)
	}
	// Another tenant still has the implicit one.
	e.publish(events.KindEvents, "t2", "s1", events.Input{Text: "hi"})
	testutil.Eventually(t, 20*time.Second, "t2's run to end", func() bool {
		return countKind(e.records("t2", "s1"), RecordRunEnded) == 1
	})
	if s := runStarts(e.records("t2", "s1")); s[0].AgentVersion != 0 {
		t.Fatalf("t2's run went by v%d, want the implicit default", s[0].AgentVersion)
	}
}

func TestA_profile_update_reaches_the_next_run_not_the_live_one_nor_its_steer(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	v1 := e.putProfile("t1", "reviewer", agents.Profile{Instructions: "Review, v1."})
	model, p := fakeModel(t, llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: "wait_for_gate", Input: `{}`}}})
	model.SetFallback(llmtest.Reply{Text: "ok"})
	e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{g.tool()} })
	e.publishAgent("t1", "s1", "review the change", "reviewer")
	waitGate(t, g)

	// Changed while the run is live: neither it nor its steer sees it.
	v2 := e.putProfile("t1", "reviewer", agents.Profile{Instructions: "Review, v2."})
	e.publish(events.KindEvents, "t1", "s1", events.Steer{Note: "look at the tests too"})
	testutil.Eventually(t, 20*time.Second, "the steered run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 2
	})
	steered := model.Requests()[model.RequestCount()-1]
	// The next run takes the new version.
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "and now?"})
	testutil.Eventually(t, 20*time.Second, "the next run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 3
	})
	next := model.Requests()[model.RequestCount()-1]

	starts := runStarts(e.records("t1", "s1"))
	if len(starts) != 3 || starts[1].Cause != "steered" || starts[0].AgentVersion != v1 || starts[1].AgentVersion != v1 || starts[2].AgentVersion != v2 {
		t.Fatalf("runs went by %+v, want v%d, v%d (steered), v%d", starts, v1, v1, v2)
	}
	if sys := fmt.Sprint(steered.JSON()["system"]); !strings.Contains(sys, "Review, v1.") {
		t.Fatalf("the steered run's system prompt is not v1's: %s", sys)
	}
	if sys := fmt.Sprint(next.JSON()["system"]); !strings.Contains(sys, "Review, v2.") {
		t.Fatalf("the next run's system prompt is not v2's: %s", sys)
	}
}

func TestA_profile_s_recovery_policy_holds_unless_the_session_overrides_it(t *testing.T) {
	for _, c := range []struct {
		name      string
		override  *handover.RecoveryOverride
		recovered bool
	}{
		{"profile_manual", nil, false},
		{"session_overrides_automatic", &handover.RecoveryOverride{Policy: new(handover.Automatic)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			v := e.putProfile("t1", "careful", agents.Profile{Instructions: "Careful.", Recovery: "manual"})
			ghostRun(e, c.override, 0)
			rec := e.session("t1", "s1")
			rec.Agent, rec.AgentVersion = "careful", v
			e.putRecord(rec)
			model, p := fakeModel(t)
			model.SetFallback(llmtest.Reply{Text: "going on"})
			e.startRunner("r1", p, nil)
			if c.recovered {
				testutil.Eventually(t, 20*time.Second, "the recovered run to end", func() bool {
					return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
				})
				return
			}
			testutil.Eventually(t, 20*time.Second, "the session to be interrupted", func() bool {
				return e.session("t1", "s1").State == StateInterrupted
			})
			if model.RequestCount() != 0 {
				t.Fatal("recovered against the profile's manual policy")
			}
		})
	}
}

func TestInterrupted_work_of_a_profile_that_is_gone_waits_for_a_person_who_rebinds_it(t *testing.T) {
	e := newEnv(t)
	ghostRun(e, nil, 0)
	rec := e.session("t1", "s1")
	rec.Agent = "gone" // deleted, and no version of it kept
	e.putRecord(rec)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "going on"})
	e.startRunner("r1", p, nil)
	testutil.Eventually(t, 20*time.Second, "the session to be interrupted naming the agent", func() bool {
		rec := e.session("t1", "s1")
		return rec.State == StateInterrupted && strings.Contains(rec.Reason, `"gone"`)
	})
	if model.RequestCount() != 0 {
		t.Fatal("a run started without its profile")
	}
	e.publishAgent("t1", "s1", "go on as the default", agents.DefaultName)
	testutil.Eventually(t, 20*time.Second, "the person's run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})
	if rec := e.session("t1", "s1"); rec.Agent != agents.DefaultName || rec.Cause != "steered" {
		t.Fatalf("record = agent %q cause %q, want rebound to the default and sent on", rec.Agent, rec.Cause)
	}
}

// A rebinding that arrives during a live run is kept in the session record
// (next_agent) at once, not only in the runner that took it: should that
// runner die before the run ends, the run that follows elsewhere still goes
// by the new profile. Shown in two halves: the record holds it while the
// run is live, and a runner taking over a record holding it binds the
// session to it.
func TestA_rebinding_during_a_live_run_is_kept_in_the_session_record(t *testing.T) {
	e := newEnv(t)
	e.putProfile("t1", "reviewer", agents.Profile{Instructions: "Review."})
	model, p := fakeModel(t)
	model.SetRouter(func(body []byte) (llmtest.Reply, bool) {
		if strings.Contains(readReq(body).last, "start") {
			return call("hold", map[string]any{}), true
		}
		return llmtest.Reply{Text: "ok"}, true
	})
	entered, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	hold := tool.Func{Name: "hold", Description: "waits", Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
		if once.CompareAndSwap(false, true) {
			close(entered)
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return tool.Result{Content: "held"}, nil
	}}
	// s2: a run interrupted (its runner gone) with a rebinding kept.
	turn := llm.UserText("go on")
	turn.ID = "m-1"
	e.appendRecord("t1", "s2", Record{Kind: RecordRunStarted, Run: "r-ghost", Runner: "ghost", Cause: "dispatch"})
	e.appendRecord("t1", "s2", Record{Kind: RecordMessage, Run: "r-ghost", Runner: "ghost", Message: &turn})
	e.putRecord(SessionRecord{Tenant: "t1", Session: "s2", State: StateRunning, Run: "r-ghost", Runner: "ghost",
		Incarnation: "gone", Since: time.Now().UTC(), Inputs: []string{"go on"}, Runs: 1, NextAgent: "reviewer"})
	e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{hold} })
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "start"})
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the run never called hold")
	}
	e.publishAgent("t1", "s1", "switch", "reviewer")
	testutil.Eventually(t, 20*time.Second, "the record to keep the rebinding while the run is live", func() bool {
		rec := e.session("t1", "s1")
		return rec.State == StateRunning && rec.NextAgent == "reviewer"
	})
	close(release)
	testutil.Eventually(t, 20*time.Second, "the run's end to bind the session", func() bool {
		rec := e.session("t1", "s1")
		return rec.State == StateIdle && rec.Agent == "reviewer" && rec.NextAgent == ""
	})

	// The other half: s2's run was interrupted (its runner gone) with a
	// rebinding kept. Whether the recovery runs or is refused (no jobs worker here says the
	// run's commands are gone), the runner that took s2 over bound it to the
	// kept profile when it decided.
	testutil.Eventually(t, 20*time.Second, "s2 taken over and bound to the kept rebinding", func() bool {
		rec := e.session("t1", "s2")
		return rec.State != StateRunning && rec.Agent == "reviewer" && rec.NextAgent == ""
	})
}

func TestA_run_refused_for_its_agent_s_model_keeps_the_session_bound_to_that_agent_not_default(t *testing.T) {
	e := newEnv(t)
	e.putProfile("t1", "reviewer", agents.Profile{Instructions: "Review.",
		Model: dispatcherapi.AgentModel{Provider: "anthropic", Name: "claude-x"}})
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "ok"})
	e.startRunner("r1", p, nil) // no ModelFor: serves only its own model

	id := e.publishAgent("t1", "s1", "review this", "reviewer")
	testutil.Eventually(t, 20*time.Second, "the refusal to be recorded", func() bool {
		return countKind(e.records("t1", "s1"), RecordRefused) == 1
	})
	if why := refusal(e.records("t1", "s1"), id); !strings.Contains(why, "reviewer") {
		t.Fatalf("refusal %q does not name the agent", why)
	}
	if rec := e.session("t1", "s1"); rec.Agent != "reviewer" {
		t.Fatalf("after the refusal the session is bound to %q, want reviewer", rec.Agent)
	}
	// The next input, naming no agent, goes by the binding: refused
	// again, never a quiet run of the default.
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "and now?"})
	testutil.Eventually(t, 20*time.Second, "the second refusal", func() bool {
		return countKind(e.records("t1", "s1"), RecordRefused) == 2
	})
	if n := countKind(e.records("t1", "s1"), RecordRunStarted); n != 0 || model.RequestCount() != 0 {
		t.Fatalf("%d runs started, %d model calls: the session ran as default", n, model.RequestCount())
	}
}

func TestA_runner_s_heartbeat_says_which_models_it_serves(t *testing.T) {
	e := newEnv(t)
	_, p := fakeModel(t)
	modelFor := func(dispatcherapi.AgentModel) (llm.Provider, error) { return p, nil }
	e.run(Config{ID: "r1", Provider: p, ModelFor: modelFor, Models: []string{"anthropic", "openai@LOCAL"}, IdleEvict: time.Minute})
	e.startRunner("r2", p, nil)
	kv, err := e.js.KeyValue(context.Background(), bus.BucketRunners)
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"r1": `"models":["anthropic","openai@LOCAL"]`, "r2": `"models":[]`} {
		testutil.EventuallyNil(t, 10*time.Second, id+"'s heartbeat", func() error {
			en, err := kv.Get(context.Background(), id)
			if err != nil {
				return err
			}
			if !strings.Contains(string(en.Value()), want) {
				return fmt.Errorf("heartbeat %s, want %s", en.Value(), want)
			}
			return nil
		})
	}
}
