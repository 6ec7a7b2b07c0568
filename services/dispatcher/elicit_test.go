package dispatcher

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"jetway/internal/mcptest"
	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/llmtest"
	"jetway/pkg/tasks/proctree"
	"jetway/services/jobs"
	jobsclient "jetway/services/jobs/client"
	"jetway/services/mcptools"
	"jetway/services/runner"
)

// askingSession is the whole road of an MCP server's question: a jobs
// worker running the test server as a real stdio process, a runner whose
// runs connect it and put its questions to a person, and a model (the
// Anthropic wire format) that calls its ask tool in session s1, then
// answers "done".
func askingSession(t *testing.T) (*fixture, *llmtest.Anthropic) {
	t.Helper()
	if v := proctree.LandlockABI(); v < proctree.MinLandlockABI {
		t.Skipf("kernel Landlock ABI %d; confinement needs %d", v, proctree.MinLandlockABI)
	}
	f := newFixture(t)
	bin := mcptest.Build(t)
	startWorker(t, f, bin)
	kv, err := f.js.KeyValue(context.Background(), bus.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	prof := agents.Profile{Instructions: "x", MCP: []api.AgentMCPServer{{Name: "kit", Command: bin}}}
	if _, err := agents.Put(context.Background(), kv, "default", "asker", prof); err != nil {
		t.Fatal(err)
	}
	model := llmtest.NewAnthropic(t, llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu_ask", Name: "mcp__kit__" + mcptest.AskTool, Input: `{"question":"Which colour?"}`}}})
	model.SetFallback(llmtest.Reply{Text: "done"})
	jc, err := jobsclient.New(jobsclient.Config{NC: f.nc})
	if err != nil {
		t.Fatal(err)
	}
	hub := mcptools.New(mcptools.Config{Jobs: jc, ConnectTimeout: 20 * time.Second})
	startRunner(t, f, model, func(ctx context.Context, s runner.SessionRef, prof agents.Profile, offer func(string, []tool.Tool)) func() []api.MCPServerState {
		return hub.Open(ctx, mcptools.Ref{Tenant: s.Tenant, Session: s.Session, Run: s.Run, Network: prof.Network, Ask: s.Ask}, prof.MCP, offer).End
	})
	decode[Accepted](t, f.do("POST", "/v1/sessions/s1/input", tokUser, api.InputRequest{Text: "paint it", Agent: "asker"}), http.StatusAccepted)
	return f, model
}

func startWorker(t *testing.T, f *fixture, bin string) {
	t.Helper()
	w, err := jobs.New(jobs.Config{NC: f.nc, WorkerID: "w1", Root: t.TempDir(), Grace: 200 * time.Millisecond, ReadOnly: []string{filepath.Dir(bin)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("jobs worker did not stop")
		}
	})
	select {
	case <-w.Ready():
	case <-time.After(waitFor):
		t.Fatal("jobs worker not ready")
	}
}

func startRunner(t *testing.T, f *fixture, model *llmtest.Anthropic, mcp func(context.Context, runner.SessionRef, agents.Profile, func(string, []tool.Tool)) func() []api.MCPServerState) {
	t.Helper()
	p, err := anthropic.New(anthropic.Config{APIKey: "test-key", BaseURL: model.URL(), Model: "claude-test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := runner.New(ctx, runner.Config{NC: f.nc, ID: "r1", Provider: p, MCP: mcp, IdleEvict: time.Minute,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Error("runner did not stop")
		}
	})
}

// theQuestion waits until session s1 shows waiting for the server's
// question, and returns it.
func theQuestion(t *testing.T, f *fixture) api.Approval {
	t.Helper()
	var q api.Approval
	testutil.EventuallyNil(t, 60*time.Second, "the session waiting for the server's question", func() error {
		resp := f.do("GET", "/v1/sessions/s1", tokUser, nil)
		if resp.StatusCode != http.StatusOK {
			_ = resp.Body.Close()
			return fmt.Errorf("session detail: %s", resp.Status)
		}
		d := decode[SessionDetail](t, resp, http.StatusOK)
		list := decode[api.ApprovalList](t, f.do("GET", "/v1/sessions/s1/approvals", tokUser, nil), http.StatusOK).Approvals
		if len(list) != 1 || d.State != "waiting" || len(d.Waiting) != 1 {
			return fmt.Errorf("approvals %+v, state %s", list, d.State)
		}
		q = list[0]
		return nil
	})
	if q.Kind != "question" || !strings.Contains(q.Question, "MCP server kit asks: Which colour?") {
		t.Fatalf("approval = %+v, want the server's question", q)
	}
	return q
}

// resultOfAsk waits for the model's second call and returns what it read
// as the ask tool's result.
func resultOfAsk(t *testing.T, model *llmtest.Anthropic) string {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, "the model's second call", func() bool { return model.RequestCount() >= 2 })
	return model.Requests()[1].ToolResults()["tu_ask"]
}

func TestAn_MCP_servers_question_is_answered_through_the_API_and_the_answer_reaches_the_server_and_the_model(t *testing.T) {
	f, model := askingSession(t)
	q := theQuestion(t, f)
	if model.RequestCount() != 1 {
		t.Fatalf("%d model calls while the question waits, want 1", model.RequestCount())
	}
	decode[api.Approval](t, f.do("POST", "/v1/sessions/s1/approvals/"+q.ID, tokUser, `{"decision":"answer","answer":"blue"}`), http.StatusOK)
	if got := resultOfAsk(t, model); !strings.Contains(got, `"the person answered answer=blue"`) || strings.Contains(got, "ERROR") {
		t.Fatalf("the model read %q as the tool's result, want the server's report of the answer", got)
	}
	f.waitRecord(t, "the run to end", func(r runner.SessionRecord) bool { return r.State == runner.StateIdle })
	for i, r := range model.Requests() {
		if strings.Contains(fmt.Sprint(r.JSON()), "answered your question") {
			t.Fatalf("model request %d carried the decision as a notice too: it went to the server only", i)
		}
	}
	d := decode[SessionDetail](t, f.do("GET", "/v1/sessions/s1", tokUser, nil), http.StatusOK)
	if d.State != "idle" || len(d.Waiting) != 0 {
		t.Fatalf("after the answer: state %s, waiting %+v", d.State, d.Waiting)
	}
	decode[map[string]any](t, f.do("POST", "/v1/sessions/s1/approvals/"+q.ID, tokUser, `{"decision":"answer","answer":"red"}`), http.StatusConflict)
}

func TestA_rejected_MCP_question_is_declined_to_the_server(t *testing.T) {
	f, model := askingSession(t)
	q := theQuestion(t, f)
	decode[api.Approval](t, f.do("POST", "/v1/sessions/s1/approvals/"+q.ID, tokUser, `{"decision":"reject","reason":"not yours to ask"}`), http.StatusOK)
	if got := resultOfAsk(t, model); !strings.Contains(got, `"the person chose decline"`) || strings.Contains(got, "ERROR") {
		t.Fatalf("the model read %q, want the server's report of a decline", got)
	}
}
