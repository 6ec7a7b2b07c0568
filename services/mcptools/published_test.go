package mcptools_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"jetway/internal/mcptest"
	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	"jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/llmtest"
	"jetway/services/jobs"
	"jetway/services/mcptools"
	"jetway/services/runner"
)

// The tests of this file run the MCP reference servers published on npm
// (mcptest.NPM installs them at pinned versions), which nobody here wrote:
// what a person configures from their READMEs must work the same.

// modelRunner is a runner on b whose runs connect their MCP servers
// through hub and whose model answers replies, in order.
func modelRunner(t *testing.T, b testBus, hub *mcptools.Hub, replies ...llmtest.Reply) *llmtest.Anthropic {
	t.Helper()
	model := llmtest.NewAnthropic(t, replies...)
	provider, err := anthropic.New(anthropic.Config{APIKey: "test-key", BaseURL: model.URL(), Model: "claude-test"})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(bg)
	r, err := runner.New(rctx, runner.Config{NC: b.nc, ID: "r1", Provider: provider, IdleEvict: time.Minute,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		MCP: func(ctx context.Context, s runner.SessionRef, prof agents.Profile, offer func(string, []tool.Tool)) func() []dispatcherapi.MCPServerState {
			return hub.Open(ctx, mcptools.Ref{Tenant: s.Tenant, Session: s.Session, Run: s.Run, Network: prof.Network}, prof.MCP, offer).End
		}})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("runner did not stop")
		}
	})
	return model
}

// putAgent stores the profile of tenant's agent name.
func putAgent(t *testing.T, b testBus, name string, prof agents.Profile) {
	t.Helper()
	kv, err := b.js.KeyValue(bg, bus.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agents.Put(bg, kv, tenant, name, prof); err != nil {
		t.Fatal(err)
	}
}

// send starts a run of agent in session sess with text.
func send(t *testing.T, b testBus, sess, agent, text string) {
	t.Helper()
	ev, err := events.New(tenant, sess, "test", events.Input{Text: text})
	if err != nil {
		t.Fatal(err)
	}
	events.SetAgent(&ev, agent)
	subj, _ := events.EventsSubject(tenant, sess)
	msg, err := events.Encode(bg, subj, ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.PublishMsg(bg, msg); err != nil {
		t.Fatal(err)
	}
}

// everythingNames are server-everything's tools as a run offers them
// from the server named server, with the two of its resources.
func everythingNames(server string) []string {
	var out []string
	for _, name := range append(slices.Clone(mcptest.EverythingTools), mcptools.ListResourcesTool, mcptools.ReadResourceTool) {
		out = append(out, "mcp__"+server+"__"+name)
	}
	return out
}

// firstCallsOfferAll starts sessionsInARow new sessions of agent, one
// after another, and checks that each one's first model call offered all
// of want; the first session's model calls echo and reads a resource
// first, whose answers its second call must carry.
func firstCallsOfferAll(t *testing.T, b testBus, hub *mcptools.Hub, agent string, want []string) {
	t.Helper()
	replies := []llmtest.Reply{
		{ToolCalls: []llmtest.ToolCall{
			{ID: "tu_echo", Name: "mcp__" + agent + "__echo", Input: `{"message":"round trip"}`},
			{ID: "tu_list", Name: "mcp__" + agent + "__list_resources", Input: `{}`},
			{ID: "tu_read", Name: "mcp__" + agent + "__read_resource", Input: `{"uri":"demo://resource/dynamic/text/7"}`},
		}},
		{Text: "done"},
	}
	for range sessionsInARow - 1 {
		replies = append(replies, llmtest.Reply{Text: "done"})
	}
	model := modelRunner(t, b, hub, replies...)
	var missed []string
	for i := range sessionsInARow {
		send(t, b, fmt.Sprintf("%s-%d", agent, i), agent, "hello")
		first := i + 1 // the first session makes two calls
		if i == 0 {
			first = 0
		}
		testutil.Eventually(t, 60*time.Second, fmt.Sprintf("session %d's first model call", i+1), func() bool { return model.RequestCount() > first })
		offered := model.Requests()[first].ToolNames()
		var lack []string
		for _, name := range want {
			if !slices.Contains(offered, name) {
				lack = append(lack, name)
			}
		}
		if len(lack) > 0 {
			missed = append(missed, fmt.Sprintf("session %d lacked %v", i+1, lack))
		}
		if i == 0 {
			testutil.Eventually(t, 60*time.Second, "the model call after echo", func() bool { return model.RequestCount() > 1 })
			results := model.Requests()[1].ToolResults()
			for id, want := range map[string]string{"tu_echo": "Echo: round trip", "tu_list": "demo://resource/static/document/",
				"tu_read": "Resource 7: This is a plaintext resource"} {
				if got := results[id]; !strings.Contains(got, want) || strings.HasPrefix(got, "ERROR") {
					t.Errorf("%s's result = %q, want %q in it", id, got, want)
				}
			}
		}
	}
	if len(missed) > 0 {
		t.Fatalf("%d of %d new sessions' first model calls lacked tools: %s", len(missed), sessionsInARow, strings.Join(missed, "; "))
	}
}

func TestNew_sessions_first_model_calls_offer_every_tool_of_the_published_everything_server_over_stdio(t *testing.T) {
	dir := mcptest.NPM(t)
	b := startBus(t)
	childWorker(t, b.srv.ClientURL(), filepath.Join(t.TempDir(), "jobs"), dir, b.jc)
	putAgent(t, b, "evh", agents.Profile{Instructions: "Use the tools.",
		MCP: []dispatcherapi.AgentMCPServer{{Name: "evh", Command: filepath.Join(dir, "node_modules", ".bin", "mcp-server-everything")}}})
	hub := mcptools.New(mcptools.Config{Jobs: b.jc, ConnectTimeout: 30 * time.Second})
	firstCallsOfferAll(t, b, hub, "evh", everythingNames("evh"))
}

func TestNew_sessions_first_model_calls_offer_every_tool_of_the_published_everything_server_over_http(t *testing.T) {
	dir := mcptest.NPM(t)
	url := mcptest.ServeEverythingHTTP(t, dir)
	b := startBus(t)
	putAgent(t, b, "evh", agents.Profile{Instructions: "Use the tools.",
		MCP: []dispatcherapi.AgentMCPServer{{Name: "evh", URL: url}}})
	hub := mcptools.New(mcptools.Config{ConnectTimeout: 30 * time.Second, AllowHosts: []string{"127.0.0.1"}})
	firstCallsOfferAll(t, b, hub, "evh", everythingNames("evh"))
}

func TestThe_published_filesystem_server_runs_confined_in_the_workspace_and_round_trips_a_file(t *testing.T) {
	dir := mcptest.NPM(t)
	e := newEnv(t, func(c *jobs.Config) { c.ReadOnly = append(c.ReadOnly, dir) })
	for i := range sessionsInARow {
		sess := fmt.Sprintf("fs-%d", i)
		_, o := openSession(t, e.hub, sess, dispatcherapi.AgentMCPServer{Name: "fs",
			Command: filepath.Join(dir, "node_modules", ".bin", "mcp-server-filesystem"), Args: []string{"."}})
		names := o.names()
		for _, want := range []string{"mcp__fs__read_text_file", "mcp__fs__write_file", "mcp__fs__list_directory", "mcp__fs__list_allowed_directories"} {
			if !slices.Contains(names, want) {
				t.Fatalf("session %d: offered %v, want %s among them", i+1, names, want)
			}
		}
		if i > 0 {
			continue
		}
		if res := call(t, o, "mcp__fs__write_file", `{"path":"note.txt","content":"written through MCP"}`); res.IsError {
			t.Fatalf("write_file = %+v", res)
		}
		if res := call(t, o, "mcp__fs__read_text_file", `{"path":"note.txt"}`); res.IsError || !strings.Contains(res.Content, "written through MCP") {
			t.Fatalf("read_text_file = %+v", res)
		}
		// Outside the directory it was given the server refuses by itself.
		if res := call(t, o, "mcp__fs__read_text_file", `{"path":"/etc/shadow"}`); !res.IsError {
			t.Fatalf("read_text_file of /etc/shadow = %+v, want refused", res)
		}
	}
}

// An npx server, as the published servers' READMEs configure them, is
// installed once per tenant by the worker: the tenant's next session
// starts it from that install, downloading nothing, and no session's
// workspace holds a copy.
func TestAn_npx_server_is_installed_once_per_tenant_and_the_next_session_starts_it_without_a_download(t *testing.T) {
	mcptest.NPM(t) // the registry is reachable, or the test says why not
	var log testutil.LockedBuffer
	e := newEnv(t, func(c *jobs.Config) { c.Log = zerolog.New(&log) })
	hub := mcptools.New(mcptools.Config{Jobs: e.jc, ConnectTimeout: 2 * time.Minute})
	spec := dispatcherapi.AgentMCPServer{Name: "evh", Command: "npx", Args: []string{"-y", mcptest.EverythingPackage}}
	want := everythingNames("evh")
	var took []time.Duration
	for i := range 2 {
		start := time.Now()
		set, o := openSession(t, hub, fmt.Sprintf("npx-%d", i), spec)
		took = append(took, time.Since(start))
		if names := o.names(); !includesAll(names, want) {
			t.Fatalf("session %d offered %v (states %+v), want all of %v", i+1, names, set.States(), want)
		}
		if res := call(t, o, "mcp__evh__echo", `{"message":"via npx"}`); res.IsError || !strings.Contains(res.Content, "Echo: via npx") {
			t.Fatalf("session %d: echo = %+v", i+1, res)
		}
	}
	t.Logf("time to the first tool list: first session %s (installing), second session %s", took[0].Round(time.Millisecond), took[1].Round(time.Millisecond))
	if n := strings.Count(log.String(), "MCP package installed"); n != 1 {
		t.Fatalf("the package was installed %d times, want once for the tenant", n)
	}
	_ = filepath.WalkDir(e.root, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == ".npm" {
			t.Errorf("a download of the package in %s", path)
		}
		return nil
	})
}

func includesAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
