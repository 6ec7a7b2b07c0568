package runner

import (
	"strings"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
	"jetway/services/runner/internal/subagents"
)

// A run whose session was taken over while it was mid-tool — the record
// now names another runner's run — starts no sub-agent: agent_start is
// refused on the fence and says why, and no child session is made.
func TestA_run_that_is_no_longer_its_session_s_live_run_starts_no_sub_agent(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	model, p := routedModel(t, func(r modelReq) llmtest.Reply {
		switch {
		case strings.Contains(r.last, "no longer this session"):
			return llmtest.Reply{Text: "done"}
		case strings.Contains(r.last, "gate opened"):
			return call(subagents.StartTool, map[string]any{"prompt": "help", "name": "kid"})
		}
		return call("wait_for_gate", map[string]any{})
	})
	e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{g.tool()} })
	e.publish(events.KindEvents, "t1", "p1", events.Input{Text: "go"})
	g.waitEntered(t)

	// Another runner, alive, recovered the session meanwhile.
	r2 := e.startRunner("r2", p, nil)
	rec := e.session("t1", "p1")
	rec.Run, rec.Runner, rec.Incarnation = "r-other", "r2", r2.inc()
	e.putRecord(rec)
	close(g.open)

	testutil.Eventually(t, 20*time.Second, "agent_start's refusal to reach the model", func() bool {
		return countIn(model, "", "is no longer this session's live run (its record names run r-other on runner r2)") == 1
	})
	if kid := e.session("t1", "kid"); kid.Runs != 0 || len(kid.Lineage) != 0 {
		t.Fatalf("the fenced run made a child: %+v", kid)
	}
	if kids := e.session("t1", "p1").Children; len(kids) != 0 {
		t.Fatalf("the fenced run named children: %+v", kids)
	}
}
