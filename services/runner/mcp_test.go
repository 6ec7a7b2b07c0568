package runner

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"jetway/internal/mcptest"
	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/control/agents"
	"jetway/pkg/dispatcherapi"
	"jetway/pkg/llm/llmtest"
	"jetway/services/mcptools"
)

// mcpHook is Config.MCP as cmd/jetway wires it, with the test's
// environment of secret variables.
func mcpHook(env map[string]string) func(context.Context, SessionRef, agents.Profile, func(string, []tool.Tool)) func() []dispatcherapi.MCPServerState {
	hub := mcptools.New(mcptools.Config{AllowHosts: []string{"127.0.0.1"}, SecretEnv: func(v string) (string, bool) { s, ok := env[v]; return s, ok }})
	return func(ctx context.Context, s SessionRef, prof agents.Profile, offer func(string, []tool.Tool)) func() []dispatcherapi.MCPServerState {
		return hub.Open(ctx, mcptools.Ref{Tenant: s.Tenant, Session: s.Session, Run: s.Run, Network: prof.Network, Ask: s.Ask}, prof.MCP, offer).End
	}
}

func TestAn_MCP_tool_call_round_trips_through_the_models_wire_format_and_deny_rules_hold(t *testing.T) {
	e := newEnv(t)
	web := mcptest.ServeHTTP(t)
	e.putProfile("t1", "tooled", agents.Profile{
		Instructions: "Use the web tools.",
		MCP:          []dispatcherapi.AgentMCPServer{{Name: "web", URL: web.URL, Headers: map[string]string{"Authorization": "web-auth"}}},
		Tools:        dispatcherapi.AgentTools{Allow: []string{"mcp__web__*"}, Deny: []string{"mcp__web__env"}},
	})
	model, p := fakeModel(t,
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu_echo", Name: "mcp__web__echo", Input: `{"text":"through the model"}`}}},
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu_env", Name: "mcp__web__env", Input: `{}`}}},
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu_layover", Name: "layover", Input: `{}`}}},
		llmtest.Reply{Text: "done"},
	)
	e.run(Config{ID: "r1", Provider: p, IdleEvict: time.Minute, MCP: mcpHook(map[string]string{"JETWAY_MCP_SECRET_T1__WEB_AUTH": "Bearer w-secret"})})
	e.publishAgent("t1", "s1", "go", "tooled")
	testutil.Eventually(t, 30*time.Second, "the run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})

	reqs := model.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model requests, want 4", len(reqs))
	}
	offered := reqs[0].ToolNames()
	if !slices.Contains(offered, "mcp__web__echo") || slices.Contains(offered, "layover") || slices.Contains(offered, "shell") {
		t.Fatalf("tools offered %v: want the server's tools and only those tools.allow names", offered)
	}
	results := reqs[3].ToolResults()
	if got := results["tu_echo"]; !strings.Contains(got, "echo: through the model") || strings.HasPrefix(got, "ERROR") {
		t.Errorf("echo's result = %s", got)
	}
	if got := results["tu_env"]; !strings.HasPrefix(got, "ERROR") || !strings.Contains(got, "denied") {
		t.Errorf("env's result = %s, want denied by the rule", got)
	}
	if got := results["tu_layover"]; !strings.HasPrefix(got, "ERROR") {
		t.Errorf("layover (not allowed) result = %s, want an error", got)
	}
	if calls := web.Calls(); !slices.Equal(calls, []string{"echo"}) {
		t.Errorf("the server was asked to call %v, want only echo: a denied tool never reaches it", calls)
	}
	for _, h := range web.Headers() {
		if h.Get("Authorization") != "Bearer w-secret" {
			t.Fatalf("a request to the server carried Authorization %q", h.Get("Authorization"))
		}
	}
}

func TestA_servers_new_tool_list_replaces_its_old_one_in_the_run_as_the_profile_allows(t *testing.T) {
	echo := func(name string) tool.Tool {
		return tool.Func{Name: name, Fn: func(context.Context, tool.Call) (tool.Result, error) { return tool.Result{Content: name}, nil }}
	}
	reg, err := tool.NewRegistry(echo("shell"), echo("mcp__other__keep"))
	if err != nil {
		t.Fatal(err)
	}
	prof := agents.Profile{Tools: dispatcherapi.AgentTools{Allow: []string{"shell", "mcp__web__*", "mcp__other__*"}}}
	offerServerTools(reg, prof, "web", []tool.Tool{echo("mcp__web__a"), echo("mcp__web__b")})
	if got := reg.Names(); !slices.Equal(got, []string{"shell", "mcp__other__keep", "mcp__web__a", "mcp__web__b"}) {
		t.Fatalf("after the first list: %v", got)
	}
	offerServerTools(reg, prof, "web", []tool.Tool{echo("mcp__web__b"), echo("mcp__web__c")})
	if got := reg.Names(); !slices.Equal(got, []string{"shell", "mcp__other__keep", "mcp__web__b", "mcp__web__c"}) {
		t.Fatalf("after the changed list: %v, want a gone, c added, the rest kept", got)
	}
	if _, ok := reg.Get("mcp__web__a"); ok {
		t.Fatal("a tool the server dropped can still be called")
	}
	narrow := agents.Profile{Tools: dispatcherapi.AgentTools{Allow: []string{"mcp__web__c"}}}
	offerServerTools(reg, narrow, "web", []tool.Tool{echo("mcp__web__b"), echo("mcp__web__c")})
	if _, ok := reg.Get("mcp__web__b"); ok {
		t.Fatal("a tool tools.allow leaves out was offered")
	}
}

// A server that offered nothing stays in the history: the run's end
// records it with why, after its state has moved on.
func TestThe_end_of_a_run_records_the_MCP_servers_that_were_not_running_and_why(t *testing.T) {
	e := newEnv(t)
	web := mcptest.ServeHTTP(t)
	e.putProfile("t1", "tooled", agents.Profile{
		Instructions: "Use the web tools.",
		MCP: []dispatcherapi.AgentMCPServer{{Name: "web", URL: web.URL},
			{Name: "intranet", URL: "http://10.0.0.1/mcp"}},
	})
	model, p := fakeModel(t, llmtest.Reply{Text: "done"})
	e.run(Config{ID: "r1", Provider: p, IdleEvict: time.Minute, MCP: mcpHook(nil)})
	e.publishAgent("t1", "s1", "go", "tooled")
	testutil.Eventually(t, 30*time.Second, "the run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})
	if offered := model.Requests()[0].ToolNames(); !slices.Contains(offered, "mcp__web__echo") {
		t.Fatalf("the first model call offered %v, want the reachable server's tools", offered)
	}
	for _, r := range e.records("t1", "s1") {
		if r.Kind != RecordRunEnded {
			continue
		}
		t.Logf("run_ended records MCP %+v", r.MCP)
		if len(r.MCP) != 1 || r.MCP[0].Server != "intranet" || r.MCP[0].State != "failed" ||
			!strings.Contains(r.MCP[0].Error, "private address") || !strings.Contains(r.MCP[0].Error, "--mcp-allow-host") {
			t.Fatalf("run_ended records MCP %+v, want intranet failed, refused by the address rule", r.MCP)
		}
	}
}

// A server's resources are tools of the server: tools.allow and
// tools.deny name them like any other.
func TestA_servers_resource_tools_are_offered_and_refused_as_the_profile_says(t *testing.T) {
	e := newEnv(t)
	web := mcptest.ServeHTTP(t)
	e.putProfile("t1", "reader", agents.Profile{
		Instructions: "Read the notes.",
		MCP:          []dispatcherapi.AgentMCPServer{{Name: "web", URL: web.URL}},
		Tools:        dispatcherapi.AgentTools{Allow: []string{"mcp__web__list_resources", "mcp__web__read_resource"}, Deny: []string{"mcp__web__read_resource"}},
	})
	model, p := fakeModel(t,
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{
			{ID: "tu_list", Name: "mcp__web__list_resources", Input: `{}`},
			{ID: "tu_read", Name: "mcp__web__read_resource", Input: `{"uri":"` + mcptest.NoteURI + `"}`},
		}},
		llmtest.Reply{Text: "done"},
	)
	e.run(Config{ID: "r1", Provider: p, IdleEvict: time.Minute, MCP: mcpHook(nil)})
	e.publishAgent("t1", "s1", "go", "reader")
	testutil.Eventually(t, 30*time.Second, "the run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})
	reqs := model.Requests()
	if offered := reqs[0].ToolNames(); !slices.Contains(offered, "mcp__web__list_resources") || slices.Contains(offered, "mcp__web__echo") {
		t.Fatalf("offered %v, want list_resources and no tool tools.allow leaves out", offered)
	}
	results := reqs[1].ToolResults()
	if got := results["tu_list"]; !strings.Contains(got, mcptest.NoteURI) || strings.HasPrefix(got, "ERROR") {
		t.Errorf("list_resources = %s", got)
	}
	if got := results["tu_read"]; !strings.HasPrefix(got, "ERROR") || !strings.Contains(got, "denied") {
		t.Errorf("read_resource = %s, want denied by the rule", got)
	}
}
