package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
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
	msg, err := events.Encode(context.Background(), subj, ev)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.js.PublishMsg(context.Background(), msg); err != nil {
		e.t.Fatal(err)
	}
	return ev.ID()
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
}
