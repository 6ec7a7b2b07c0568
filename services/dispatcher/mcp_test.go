package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"jetway/internal/mcptest"
	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	"jetway/pkg/dispatcherapi"
	"jetway/pkg/tasks/proctree"
	"jetway/services/jobs"
	jobsclient "jetway/services/jobs/client"
	"jetway/services/mcptools"
	"jetway/services/runner"
)

func TestSessionDetail_shows_each_MCP_server_of_the_sessions_profile_with_its_state(t *testing.T) {
	if v := proctree.LandlockABI(); v < proctree.MinLandlockABI {
		t.Skipf("kernel Landlock ABI %d; confinement needs %d", v, proctree.MinLandlockABI)
	}
	f := newFixture(t)
	ctx := context.Background()
	bin := mcptest.Build(t)
	w, err := jobs.New(jobs.Config{NC: f.nc, WorkerID: "w1", Root: t.TempDir(), Grace: 200 * time.Millisecond, ReadOnly: []string{filepath.Dir(bin)}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
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
	web := mcptest.ServeHTTP(t)
	servers := []dispatcherapi.AgentMCPServer{
		{Name: "kit", Command: bin},
		{Name: "web", URL: web.URL},
		{Name: "later", Command: bin},
	}
	kv, err := f.js.KeyValue(ctx, bus.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agents.Put(ctx, kv, "default", "tooled", agents.Profile{Instructions: "x", MCP: servers}); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(runner.SessionRecord{Tenant: "default", Session: "s1", State: runner.StateRunning, Run: "r-1", Agent: "tooled"})
	if _, err := f.sessions().Create(ctx, "default.s1", b); err != nil {
		t.Fatal(err)
	}
	jc, err := jobsclient.New(jobsclient.Config{NC: f.nc})
	if err != nil {
		t.Fatal(err)
	}
	// The run uses kit and web; later waits for a run that needs it.
	set := mcptools.New(mcptools.Config{Jobs: jc, AllowHosts: []string{"127.0.0.1"}}).Open(ctx, mcptools.Ref{Tenant: "default", Session: "s1", Run: "r-1"}, servers[:2], func(string, []tool.Tool) {})
	t.Cleanup(set.Close)

	want := []dispatcherapi.MCPServerState{
		{Server: "kit", Transport: "stdio", State: "running"},
		{Server: "web", Transport: "http", State: "running"},
		{Server: "later", Transport: "stdio", State: "idle"},
	}
	testutil.EventuallyNil(t, waitFor, "the detail to show every server's state", func() error {
		d := decode[SessionDetail](t, f.do("GET", "/v1/sessions/s1", tokUser, nil), http.StatusOK)
		if fmt.Sprint(d.MCP) != fmt.Sprint(want) {
			return fmt.Errorf("mcp = %+v", d.MCP)
		}
		return nil
	})
	raw := f.do("GET", "/v1/sessions/s1", tokUser, nil)
	var body map[string]json.RawMessage
	if err := json.NewDecoder(raw.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	var entries []map[string]any
	if err := json.Unmarshal(body["mcp"], &entries); err != nil || len(entries) != 3 || entries[0]["server"] != "kit" || entries[0]["transport"] != "stdio" || entries[0]["state"] != "running" {
		t.Fatalf("the wire form of mcp = %s", body["mcp"])
	}

	if _, err := jc.KillSession(ctx, "default", "s1"); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, waitFor, "the detail to show kit stopped", func() error {
		d := decode[SessionDetail](t, f.do("GET", "/v1/sessions/s1", tokUser, nil), http.StatusOK)
		if len(d.MCP) != 3 || d.MCP[0].State != "stopped" || d.MCP[0].Error == "" {
			return fmt.Errorf("mcp = %+v", d.MCP)
		}
		return nil
	})
}
