package mcptools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/mcptest"
	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/control/sessionrec"
	"jetway/pkg/dispatcherapi"
	"jetway/pkg/tasks/proctree"
	"jetway/services/jobs"
	jobsclient "jetway/services/jobs/client"
	"jetway/services/jobs/jobsapi"
	"jetway/services/mcptools"
)

// workerSecret is in the worker's own environment, as a real worker's
// NATS password would be: no server may see it.
const workerSecret = "worker-secret-3f9a1c"

// Environment of a jobs worker run as a child process of the test binary.
const (
	childURL  = "MCPTOOLS_TEST_CHILD_URL"
	childRoot = "MCPTOOLS_TEST_CHILD_ROOT"
	childRead = "MCPTOOLS_TEST_CHILD_READ"
)

func TestMain(m *testing.M) {
	os.Setenv("NATS_PASSWORD", workerSecret)
	if os.Getenv(childURL) != "" {
		os.Exit(runChildWorker())
	}
	os.Exit(m.Run())
}

var bg = context.Background()

// runChildWorker serves a jobs worker until the process is killed.
func runChildWorker() int {
	nc, err := bus.Connect(bg, bus.ConnConfig{URLs: []string{os.Getenv(childURL)}})
	if err != nil {
		return 2
	}
	w, err := jobs.New(jobs.Config{NC: nc, WorkerID: "child", Root: os.Getenv(childRoot), Grace: 200 * time.Millisecond,
		ReadOnly: []string{os.Getenv(childRead)}})
	if err != nil {
		return 2
	}
	if err := w.Run(bg); err != nil {
		return 1
	}
	return 0
}

const tenant, session = "acme", "s1"

// env is a provisioned JetStream server with a real jobs worker whose
// confined servers may run the test server program.
type env struct {
	t      *testing.T
	root   string
	jc     *jobsclient.Client
	hub    *mcptools.Hub
	server string // the mcptestserver binary
	stop   func()
	kvCtl  func(on bool)
}

// testBus is what every stdio test stands on: the test server built with
// the SDK, a provisioned JetStream server and a jobs client on it. Tests
// skip where the kernel cannot confine a server.
type testBus struct {
	server string
	srv    *server.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	jc     *jobsclient.Client
}

func startBus(t *testing.T) testBus {
	t.Helper()
	if v := proctree.LandlockABI(); v < proctree.MinLandlockABI {
		t.Skipf("kernel Landlock ABI %d; confinement needs %d", v, proctree.MinLandlockABI)
	}
	b := testBus{server: mcptest.Build(t), srv: bustest.StartServerWith(t, 1)}
	b.nc, b.js = bustest.Connect(t, b.srv.ClientURL())
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, b.js, bus.ProvisionConfig{Partitions: 1}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	jc, err := jobsclient.New(jobsclient.Config{NC: b.nc})
	if err != nil {
		t.Fatal(err)
	}
	b.jc = jc
	return b
}

// liveRuns has each tenant's session record name run as its live run, as a
// runner's claim would: the worker starts a server only for the session's
// live run (its fence).
func liveRuns(t *testing.T, js jetstream.JetStream, run string, tenants ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	kv, err := bus.OpenBucket(ctx, js, bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(tenants)
	for _, tn := range slices.Compact(tenants) {
		rec := sessionrec.Record{Tenant: tn, Session: session, State: sessionrec.StateRunning, Run: run, Runner: "test"}
		if _, err := sessionrec.Put(ctx, kv, rec, 0); err != nil {
			t.Fatal(err)
		}
	}
}

func newEnv(t *testing.T, mods ...func(*jobs.Config)) *env {
	t.Helper()
	b := startBus(t)
	bin, nc, js, jc := b.server, b.nc, b.js, b.jc
	liveRuns(t, js, "r-1", append([]string{tenant, "victim"}, mcptest.AttackerTenants...)...)
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	root := filepath.Join(t.TempDir(), "jobs")
	secrets := map[string]string{"JETWAY_MCP_SECRET_ACME__GH_TOKEN": "ghp_server_secret_value_1"}
	cfg := jobs.Config{NC: nc, WorkerID: "w1", Root: root, Grace: 200 * time.Millisecond,
		ReadOnly:  []string{filepath.Dir(bin)},
		SecretEnv: func(v string) (string, bool) { s, ok := secrets[v]; return s, ok }}
	for _, m := range mods {
		m(&cfg)
	}
	w, err := jobs.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	select {
	case <-w.Ready():
	case err := <-done:
		t.Fatalf("worker: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("worker not ready")
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		wcancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("worker did not stop")
		}
	}
	t.Cleanup(stop)
	control, err := bus.OpenBucket(ctx, js, bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, root: root, jc: jc, server: bin, stop: stop,
		hub: mcptools.New(mcptools.Config{Jobs: jc, ConnectTimeout: 20 * time.Second})}
	e.kvCtl = func(on bool) {
		if on {
			if _, err := groundstop.Set(bg, control, tenant, session, groundstop.Record{Reason: "test stop", By: tenant}); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := groundstop.Clear(bg, control, tenant, session); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// offered collects what a Set hands its target, as the runner's
// registry does.
type offered struct {
	mu    sync.Mutex
	tools map[string]tool.Tool
	calls int
}

func (o *offered) target(server string, ts []tool.Tool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	for name := range o.tools {
		if strings.HasPrefix(name, "mcp__"+server+"__") {
			delete(o.tools, name)
		}
	}
	for _, t := range ts {
		o.tools[t.Spec().Name] = t
	}
}

func (o *offered) get(name string) (tool.Tool, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, ok := o.tools[name]
	return t, ok
}

func (e *env) stdio(name string) dispatcherapi.AgentMCPServer {
	return dispatcherapi.AgentMCPServer{Name: name, Command: e.server,
		Env: map[string]string{"GREETING": "hello"}, Secrets: map[string]string{"GH_TOKEN": "gh-token"}}
}

func (e *env) open(specs ...dispatcherapi.AgentMCPServer) (*mcptools.Set, *offered) {
	e.t.Helper()
	o := &offered{tools: map[string]tool.Tool{}}
	set := e.hub.Open(bg, mcptools.Ref{Tenant: tenant, Session: session, Run: "r-1"}, specs, o.target)
	e.t.Cleanup(set.Close)
	return set, o
}

// call runs the offered tool name with input, as the agent loop does.
func call(t *testing.T, o *offered, name, input string) tool.Result {
	t.Helper()
	tl, ok := o.get(name)
	if !ok {
		t.Fatalf("tool %s is not offered; offered: %v", name, o.names())
	}
	ctx, cancel := context.WithTimeout(bg, 60*time.Second)
	defer cancel()
	res, err := tl.Run(ctx, tool.Call{ID: "c1", Input: json.RawMessage(input), Progress: func(string) {}})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func (o *offered) names() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []tool.Tool
	for _, t := range o.tools {
		out = append(out, t)
	}
	return mcptools.Names(out)
}

func TestA_stdio_server_in_the_jobs_worker_offers_its_tools_and_maps_their_results(t *testing.T) {
	e := newEnv(t)
	set, o := e.open(e.stdio("kit"))
	if st := set.States(); len(st) != 1 || st[0].State != "running" || st[0].Transport != "stdio" {
		t.Fatalf("states = %+v, want kit running over stdio", st)
	}
	echo, ok := o.get("mcp__kit__echo")
	if !ok {
		t.Fatalf("offered %v, want mcp__kit__echo", o.names())
	}
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(echo.Spec().InputSchema, &schema); err != nil || schema.Type != "object" || schema.Properties["text"] == nil {
		t.Fatalf("echo's schema = %s (%v), want an object with text", echo.Spec().InputSchema, err)
	}
	if res := call(t, o, "mcp__kit__echo", `{"text":"over NATS"}`); res.IsError || res.Content != "echo: over NATS" {
		t.Fatalf("echo = %+v", res)
	}
	pic := call(t, o, "mcp__kit__picture", `{}`)
	if pic.IsError || pic.Content != "a red dot" || len(pic.Images) != 1 || pic.Images[0].MediaType != "image/png" || pic.Images[0].Data == "" {
		t.Fatalf("picture = %+v, want its text and one png", pic)
	}
	weather := call(t, o, "mcp__kit__weather", `{}`)
	if weather.IsError || !strings.Contains(weather.Content, `"celsius":-3.5`) || !strings.Contains(weather.Content, "Oslo") {
		t.Fatalf("weather = %+v, want its structured content", weather)
	}
	missing := call(t, o, "mcp__kit__read", `{"path":"no-such-file"}`)
	if !missing.IsError || !strings.Contains(missing.Content, "no-such-file") {
		t.Fatalf("read of a missing file = %+v, want the server's error result", missing)
	}
}

func TestA_stdio_server_is_confined_and_its_environment_holds_only_its_own_variables(t *testing.T) {
	e := newEnv(t)
	other := filepath.Join(e.root, "acme", "other", "secret.txt")
	if err := os.MkdirAll(filepath.Dir(other), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, []byte("another session's secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, o := e.open(e.stdio("kit"))
	env := call(t, o, "mcp__kit__env", `{}`)
	for _, want := range []string{"GREETING=hello", "GH_TOKEN=ghp_server_secret_value_1", "HOME=" + filepath.Join(e.root, tenant, session)} {
		if !strings.Contains(env.Content, want) {
			t.Errorf("the server's environment lacks %s:\n%s", want, env.Content)
		}
	}
	if strings.Contains(env.Content, workerSecret) || strings.Contains(env.Content, "NATS_") {
		t.Errorf("the server's environment holds the worker's:\n%s", env.Content)
	}
	for _, path := range []string{other, "/proc/" + strconv.Itoa(os.Getpid()) + "/environ", "/proc/1/environ"} {
		res := call(t, o, "mcp__kit__read", fmt.Sprintf(`{"path":%q}`, path))
		if !res.IsError || strings.Contains(res.Content, "another session's secret") || strings.Contains(res.Content, workerSecret) {
			t.Errorf("read %s = %+v, want it refused", path, res)
		}
	}
	own := filepath.Join(e.root, tenant, session, "notes.txt")
	if err := os.WriteFile(own, []byte("own notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := call(t, o, "mcp__kit__read", `{"path":"notes.txt"}`); res.IsError || res.Content != "own notes" {
		t.Errorf("read of its own workspace = %+v", res)
	}
}

func TestA_crashed_stdio_server_gives_a_clear_tool_error_and_restarts(t *testing.T) {
	e := newEnv(t)
	set, o := e.open(e.stdio("kit"))
	first := call(t, o, "mcp__kit__pid", `{}`)
	call(t, o, "mcp__kit__grow", `{"name":"ephemeral"}`)
	testutil.Eventually(t, 10*time.Second, "the grown tool to be offered", func() bool {
		_, ok := o.get("mcp__kit__ephemeral")
		return ok
	})
	crash := call(t, o, "mcp__kit__crash", `{}`)
	if !crash.IsError || !strings.Contains(crash.Content, "crashed") || !strings.Contains(crash.Content, "boom: crashing on purpose") {
		t.Fatalf("crash = %+v, want a tool error saying it crashed and its last words", crash)
	}
	testutil.Eventually(t, 10*time.Second, "the set to see the crash", func() bool {
		st := set.States()
		return len(st) == 1 && st[0].State == "restarting" && strings.Contains(st[0].Error, "crashed")
	})
	again := call(t, o, "mcp__kit__pid", `{}`)
	if again.IsError || again.Content == first.Content {
		t.Fatalf("after the crash pid = %+v (was %s), want a new server's pid", again, first.Content)
	}
	// The new process lists its own tools: the one the old process grew
	// is gone.
	testutil.Eventually(t, 10*time.Second, "the new server's tool list to be offered", func() bool {
		_, grown := o.get("mcp__kit__ephemeral")
		_, echo := o.get("mcp__kit__echo")
		return !grown && echo
	})
	states, err := e.jc.MCPState(bg, tenant, session)
	if err != nil || len(states) != 1 || states[0].State != "running" || states[0].Restarts != 1 {
		t.Fatalf("worker states = %+v, %v; want running after 1 restart", states, err)
	}
}

func TestA_hanging_tool_call_ends_at_its_timeout_as_a_tool_error(t *testing.T) {
	e := newEnv(t)
	slow := e.stdio("slow")
	slow.Timeout = "1s"
	_, o := e.open(e.stdio("kit"), slow)
	start := time.Now()
	res := call(t, o, "mcp__slow__hang", `{}`)
	if !res.IsError || !strings.Contains(res.Content, "did not answer within 1s") {
		t.Fatalf("hang = %+v, want a timeout tool error", res)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the timeout took %s", d)
	}
	for _, name := range []string{"mcp__slow__echo", "mcp__kit__echo"} {
		if res := call(t, o, name, `{"text":"still here"}`); res.IsError || res.Content != "echo: still here" {
			t.Fatalf("%s after a timeout = %+v", name, res)
		}
	}
}

func TestA_servers_changed_tool_list_is_offered_again(t *testing.T) {
	e := newEnv(t)
	_, o := e.open(e.stdio("kit"))
	if _, ok := o.get("mcp__kit__late"); ok {
		t.Fatal("mcp__kit__late offered before it exists")
	}
	if res := call(t, o, "mcp__kit__grow", `{"name":"late"}`); res.IsError {
		t.Fatalf("grow = %+v", res)
	}
	testutil.Eventually(t, 10*time.Second, "the new tool to be offered", func() bool {
		_, ok := o.get("mcp__kit__late")
		return ok
	})
	if res := call(t, o, "mcp__kit__late", `{"text":"new"}`); res.IsError || res.Content != "late: new" {
		t.Fatalf("late = %+v", res)
	}
}

func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(stat), ") Z ")
}

// serverTree starts a server with an escaped child (setsid) and returns
// both pids.
func serverTree(t *testing.T, o *offered) []int {
	t.Helper()
	var pids []int
	for _, name := range []string{"mcp__kit__pid", "mcp__kit__spawn"} {
		res := call(t, o, name, `{}`)
		pid, err := strconv.Atoi(res.Content)
		if err != nil || res.IsError || !running(pid) {
			t.Fatalf("%s = %+v", name, res)
		}
		pids = append(pids, pid)
	}
	return pids
}

func gone(t *testing.T, what string, pids []int) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, what, func() bool {
		for _, p := range pids {
			if running(p) {
				return false
			}
		}
		return true
	})
}

func TestA_stdio_servers_tree_dies_with_its_session_kill_ground_stop_idle_and_worker(t *testing.T) {
	e := newEnv(t, func(c *jobs.Config) { c.MCPIdle = time.Second })
	set, o := e.open(e.stdio("kit"))
	stopped := func(why string) {
		t.Helper()
		testutil.EventuallyNil(t, 10*time.Second, "the run's connection to end with the stop", func() error {
			if st := set.States(); st[0].State != "stopped" || !strings.Contains(st[0].Error, why) {
				return fmt.Errorf("states %+v", st)
			}
			return nil
		})
	}

	pids := serverTree(t, o)
	if _, err := e.jc.KillSession(bg, tenant, session); err != nil {
		t.Fatal(err)
	}
	gone(t, "kill_session to end the server and its escaped child", pids)
	stopped("kill_session")
	if res := call(t, o, "mcp__kit__echo", `{"text":"x"}`); res.IsError {
		t.Fatalf("a call after kill_session = %+v, want the server started again", res)
	}

	pids = serverTree(t, o)
	e.kvCtl(true)
	gone(t, "Ground Stop to end the server tree", pids)
	stopped("Ground Stop")
	res := call(t, o, "mcp__kit__echo", `{"text":"x"}`)
	if !res.IsError || !strings.Contains(res.Content, "Ground Stop") {
		t.Fatalf("a call under Ground Stop = %+v, want refused naming it", res)
	}
	e.kvCtl(false)
	spec := e.stdio("kit")
	testutil.EventuallyNil(t, 10*time.Second, "the worker to see Ground Stop lifted", func() error {
		_, err := e.jc.MCPOpen(bg, jobsapi.MCPOpenRequest{SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session},
			Server: jobsapi.MCPServer{Name: spec.Name, Command: spec.Command, Env: spec.Env, Secrets: spec.Secrets}})
		return err
	})

	set2, o2 := e.open(spec)
	pids = serverTree(t, o2)
	set2.Close()
	gone(t, "the idle timeout to end the server tree", pids)
	testutil.EventuallyNil(t, 5*time.Second, "the worker to say stopped", func() error {
		st, err := e.jc.MCPState(bg, tenant, session)
		if err != nil || len(st) != 1 || st[0].State != "stopped" || !strings.Contains(st[0].Error, "idle") {
			return fmt.Errorf("states %+v, %v", st, err)
		}
		return nil
	})

	_, o3 := e.open(e.stdio("kit"))
	pids = serverTree(t, o3)
	e.stop()
	gone(t, "the worker's end to end the server tree", pids)
}

func TestA_stdio_server_naming_a_secret_the_worker_lacks_is_refused_naming_the_variable(t *testing.T) {
	e := newEnv(t)
	spec := e.stdio("kit")
	spec.Secrets = map[string]string{"API_KEY": "not-configured"}
	set, o := e.open(spec)
	if _, ok := o.get("mcp__kit__echo"); ok {
		t.Fatal("a server that cannot start offers tools")
	}
	st := set.States()
	if len(st) != 1 || st[0].State != "failed" || !strings.Contains(st[0].Error, "set JETWAY_MCP_SECRET_ACME__NOT_CONFIGURED there") {
		t.Fatalf("states = %+v, want failed naming the tenant's variable", st)
	}
}

func TestAn_http_server_is_reached_from_the_runner_with_its_header_secret(t *testing.T) {
	h := mcptest.ServeHTTP(t)
	hub := mcptools.New(mcptools.Config{AllowHosts: []string{"127.0.0.1"}, SecretEnv: func(v string) (string, bool) {
		return "Bearer web-secret-77", v == "JETWAY_MCP_SECRET_ACME__WEB_AUTH"
	}})
	o := &offered{tools: map[string]tool.Tool{}}
	spec := dispatcherapi.AgentMCPServer{Name: "web", URL: h.URL, Headers: map[string]string{"Authorization": "web-auth"}}
	// The same server under another name, with a short timeout for the
	// hang.
	slow := dispatcherapi.AgentMCPServer{Name: "slow", URL: h.URL, Headers: spec.Headers, Timeout: "1s"}
	set := hub.Open(bg, mcptools.Ref{Tenant: tenant, Session: session, Run: "r-1"}, []dispatcherapi.AgentMCPServer{spec, slow}, o.target)
	t.Cleanup(set.Close)
	if st := set.States(); len(st) != 2 || st[0].State != "running" || st[0].Transport != "http" || st[1].State != "running" {
		t.Fatalf("states = %+v", st)
	}
	if res := call(t, o, "mcp__web__echo", `{"text":"over HTTP"}`); res.IsError || res.Content != "echo: over HTTP" {
		t.Fatalf("echo = %+v", res)
	}
	for _, hdr := range h.Headers() {
		if got := hdr.Get("Authorization"); got != "Bearer web-secret-77" {
			t.Fatalf("a request carried Authorization %q", got)
		}
	}
	if res := call(t, o, "mcp__slow__hang", `{}`); !res.IsError || !strings.Contains(res.Content, "did not answer within 1s") {
		t.Fatalf("hang = %+v, want a timeout tool error", res)
	}
	call(t, o, "mcp__web__grow", `{"name":"later"}`)
	testutil.Eventually(t, 10*time.Second, "the new tool to be offered", func() bool {
		_, ok := o.get("mcp__web__later")
		return ok
	})
	if _, ok := o.get("mcp__web__crash"); ok {
		t.Fatal("the HTTP test server offers crash")
	}
}

func TestAn_http_server_whose_secret_is_not_configured_offers_nothing_and_says_why(t *testing.T) {
	h := mcptest.ServeHTTP(t)
	hub := mcptools.New(mcptools.Config{AllowHosts: []string{"127.0.0.1"}, SecretEnv: func(string) (string, bool) { return "", false }})
	o := &offered{tools: map[string]tool.Tool{}}
	spec := dispatcherapi.AgentMCPServer{Name: "web", URL: h.URL, Headers: map[string]string{"Authorization": "web-auth"}}
	set := hub.Open(bg, mcptools.Ref{Tenant: tenant, Session: session}, []dispatcherapi.AgentMCPServer{spec}, o.target)
	t.Cleanup(set.Close)
	st := set.States()
	if len(st) != 1 || st[0].State != "failed" || !strings.Contains(st[0].Error, "set JETWAY_MCP_SECRET_ACME__WEB_AUTH there") || len(h.Headers()) != 0 {
		t.Fatalf("states = %+v after %d requests, want failed naming the variable before any request", st, len(h.Headers()))
	}
}

// setSecrets puts the victim's secret, a shared one and an unscoped one
// of the kind the lookup used to fall back to into this process's
// environment, which the runner's and (in process) the worker's lookups
// read.
func setSecrets(t *testing.T) {
	t.Setenv(mcptest.VictimVar, mcptest.VictimValue)
	t.Setenv("JETWAY_MCP_SECRET_GH_TOKEN", "unscoped-value-of-old")
	t.Setenv("JETWAY_MCP_SHARED_SECRET_CI_TOKEN", "shared-ci-value")
}

func TestNo_spelling_in_another_tenants_http_headers_reaches_the_victims_secret(t *testing.T) {
	setSecrets(t)
	h := mcptest.ServeHTTP(t)
	hub := mcptools.New(mcptools.Config{AllowHosts: []string{"127.0.0.1"}})
	open := func(tenant, ref string) dispatcherapi.MCPServerState {
		spec := dispatcherapi.AgentMCPServer{Name: "web", URL: h.URL, Headers: map[string]string{"Authorization": ref}}
		set := hub.Open(bg, mcptools.Ref{Tenant: tenant, Session: session}, []dispatcherapi.AgentMCPServer{spec}, (&offered{tools: map[string]tool.Tool{}}).target)
		defer set.Close()
		return set.States()[0]
	}
	for _, attacker := range mcptest.AttackerTenants {
		for _, ref := range append(slices.Clone(mcptest.CrossTenantSpellings), "ci-token", "CI_TOKEN", "shared-ci-token") {
			if st := open(attacker, ref); st.State != "failed" || strings.Contains(st.Error, mcptest.VictimValue) {
				t.Errorf("tenant %s's header naming %q: %+v, want failed", attacker, ref, st)
			}
		}
	}
	if n := len(h.Headers()); n != 0 {
		t.Fatalf("the server got %d requests from other tenants' profiles", n)
	}
	if st := open(tenant, "gh-token"); !strings.Contains(st.Error, "set JETWAY_MCP_SECRET_ACME__GH_TOKEN there") || strings.Contains(st.Error, "unscoped-value") {
		t.Errorf("acme's gh-token: %+v, want failed naming acme's variable: the unscoped one is read no more", st)
	}
	for _, c := range []struct{ tenant, ref, want string }{
		{mcptest.Victim, mcptest.VictimSecret, mcptest.VictimValue},
		{tenant, "shared:ci-token", "shared-ci-value"},
	} {
		before := len(h.Headers())
		if st := open(c.tenant, c.ref); st.State != "running" {
			t.Fatalf("%s's %s: %+v, want running", c.tenant, c.ref, st)
		}
		hdrs := h.Headers()[before:]
		if len(hdrs) == 0 {
			t.Fatalf("%s's %s: no request", c.tenant, c.ref)
		}
		for _, hdr := range hdrs {
			if got := hdr.Get("Authorization"); got != c.want {
				t.Fatalf("%s's %s: a request carried Authorization %q, want %q", c.tenant, c.ref, got, c.want)
			}
		}
	}
}

func TestNo_spelling_in_another_tenants_stdio_secrets_reaches_the_victims_secret(t *testing.T) {
	setSecrets(t)
	e := newEnv(t, func(c *jobs.Config) { c.SecretEnv = nil })
	open := func(tenant string, secrets map[string]string) (*mcptools.Set, *offered) {
		spec := e.stdio("kit")
		spec.Secrets = secrets
		o := &offered{tools: map[string]tool.Tool{}}
		set := e.hub.Open(bg, mcptools.Ref{Tenant: tenant, Session: session, Run: "r-1"}, []dispatcherapi.AgentMCPServer{spec}, o.target)
		t.Cleanup(set.Close)
		return set, o
	}
	for _, attacker := range mcptest.AttackerTenants {
		for _, ref := range mcptest.CrossTenantSpellings {
			set, o := open(attacker, map[string]string{"GH_TOKEN": ref})
			if st := set.States()[0]; st.State != "failed" || strings.Contains(st.Error, mcptest.VictimValue) || len(o.names()) != 0 {
				t.Errorf("tenant %s's secret naming %q: %+v, want failed before the server starts", attacker, ref, st)
			}
			set.Close()
		}
	}
	set, _ := open(tenant, map[string]string{"GH_TOKEN": "gh-token"})
	if st := set.States()[0]; !strings.Contains(st.Error, "set JETWAY_MCP_SECRET_ACME__GH_TOKEN there") {
		t.Errorf("acme's gh-token: %+v, want failed naming acme's variable: the unscoped one is read no more", st)
	}
	set.Close()
	for _, c := range []struct {
		tenant  string
		secrets map[string]string
		want    []string
	}{
		{mcptest.Victim, map[string]string{"GH_TOKEN": mcptest.VictimSecret, "CI": "shared:ci-token"},
			[]string{"GH_TOKEN=" + mcptest.VictimValue, "CI=shared-ci-value"}},
		{tenant, map[string]string{"CI": "shared:ci-token"}, []string{"CI=shared-ci-value"}},
	} {
		set, o := open(c.tenant, c.secrets)
		env := call(t, o, "mcp__kit__env", `{}`)
		for _, want := range c.want {
			if !strings.Contains(env.Content, want) {
				t.Errorf("%s's server environment lacks %s:\n%s", c.tenant, want, env.Content)
			}
		}
		if c.tenant != mcptest.Victim && strings.Contains(env.Content, mcptest.VictimValue) {
			t.Errorf("%s's server holds the victim's secret", c.tenant)
		}
		set.Close()
	}
}

// childWorker runs a jobs worker in a child process of the test binary
// and waits until it answers.
func childWorker(t *testing.T, url, root, read string, jc *jobsclient.Client) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childURL+"="+url, childRoot+"="+root, childRead+"="+read)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	testutil.Eventually(t, 20*time.Second, "the child worker to answer", func() bool {
		ws, _ := jc.Workers(bg)
		return slices.Contains(ws, "child")
	})
	return cmd
}

func TestA_stdio_server_in_a_jobs_worker_process_dies_with_it(t *testing.T) {
	b := startBus(t)
	bin, srv, jc := b.server, b.srv, b.jc
	liveRuns(t, b.js, "r-1", tenant)
	root := filepath.Join(t.TempDir(), "jobs")
	worker := childWorker(t, srv.ClientURL(), root, filepath.Dir(bin), jc)
	hub := mcptools.New(mcptools.Config{Jobs: jc, ConnectTimeout: 20 * time.Second})
	o := &offered{tools: map[string]tool.Tool{}}
	set := hub.Open(bg, mcptools.Ref{Tenant: tenant, Session: session, Run: "r-1"}, []dispatcherapi.AgentMCPServer{{Name: "kit", Command: bin}}, o.target)
	t.Cleanup(set.Close)
	if res := call(t, o, "mcp__kit__echo", `{"text":"via a worker process"}`); res.IsError || res.Content != "echo: via a worker process" {
		t.Fatalf("echo = %+v", res)
	}
	env := call(t, o, "mcp__kit__env", `{}`)
	if strings.Contains(env.Content, workerSecret) || strings.Contains(env.Content, childURL) {
		t.Fatalf("the server's environment holds its worker's:\n%s", env.Content)
	}
	pids := serverTree(t, o)

	if err := worker.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = worker.Wait()
	gone(t, "the server to die with its killed worker", pids[:1])
	res := call(t, o, "mcp__kit__echo", `{"text":"x"}`)
	if !res.IsError || !strings.Contains(res.Content, "not available") && !strings.Contains(res.Content, "failed") {
		t.Fatalf("a call with the worker gone = %+v, want a tool error", res)
	}
	// What escaped the tree (a setsid child) is killed by the worker's
	// next start under the same id, as its jobs' escapees are.
	childWorker(t, srv.ClientURL(), root, filepath.Dir(bin), jc)
	gone(t, "the escaped child to die at the worker's next start", pids[1:])
	if res := call(t, o, "mcp__kit__echo", `{"text":"again"}`); res.IsError || res.Content != "echo: again" {
		t.Fatalf("after the worker's restart echo = %+v, want the server started again", res)
	}
}

func TestAn_http_server_on_an_internal_address_is_refused_unless_the_operator_allows_its_host(t *testing.T) {
	h := mcptest.ServeHTTP(t)
	spec := []dispatcherapi.AgentMCPServer{{Name: "web", URL: h.URL}}
	o := &offered{tools: map[string]tool.Tool{}}
	set := mcptools.New(mcptools.Config{}).Open(bg, mcptools.Ref{Tenant: tenant, Session: session}, spec, o.target)
	t.Cleanup(set.Close)
	st := set.States()
	if len(st) != 1 || st[0].State != "failed" || !strings.Contains(st[0].Error, "loopback") || !strings.Contains(st[0].Error, "--mcp-allow-host 127.0.0.1") || len(h.Headers()) != 0 {
		t.Fatalf("states = %+v after %d requests, want refused before any request, naming the flag", st, len(h.Headers()))
	}
	allowed := mcptools.New(mcptools.Config{AllowHosts: []string{"127.0.0.1"}}).Open(bg, mcptools.Ref{Tenant: tenant, Session: session}, spec, o.target)
	t.Cleanup(allowed.Close)
	if res := call(t, o, "mcp__web__echo", `{"text":"allowed"}`); res.IsError || res.Content != "echo: allowed" {
		t.Fatalf("echo on an allowed host = %+v", res)
	}
}

func TestThe_sessions_next_run_finds_its_stdio_server_running_and_hears_its_list_changes(t *testing.T) {
	e := newEnv(t)
	first, o1 := e.open(e.stdio("kit"))
	pid := call(t, o1, "mcp__kit__pid", `{}`).Content
	first.Close()

	_, o2 := e.open(e.stdio("kit"))
	if got := call(t, o2, "mcp__kit__pid", `{}`).Content; got != pid {
		t.Fatalf("the next run's server has pid %s, want the running one's %s", got, pid)
	}
	if res := call(t, o2, "mcp__kit__grow", `{"name":"second"}`); res.IsError {
		t.Fatalf("grow = %+v", res)
	}
	testutil.Eventually(t, 10*time.Second, "the next run to be offered the new tool", func() bool {
		_, ok := o2.get("mcp__kit__second")
		return ok
	})
	if res := call(t, o2, "mcp__kit__second", `{"text":"hi"}`); res.IsError || res.Content != "second: hi" {
		t.Fatalf("second = %+v", res)
	}
	states, err := e.jc.MCPState(bg, tenant, session)
	if err != nil || len(states) != 1 || states[0].Restarts != 0 || strconv.Itoa(states[0].Pid) != pid {
		t.Fatalf("worker states = %+v, %v; want one server, never restarted", states, err)
	}
}

// An MCP server of the older protocol is initialized once per process;
// the worker answers a later connection's initialize itself.
func TestA_later_connection_to_a_server_of_the_initialize_handshake_is_answered_by_the_worker(t *testing.T) {
	e := newEnv(t)
	e.hub = mcptools.New(mcptools.Config{Jobs: e.jc, ConnectTimeout: 20 * time.Second, ProtocolVersion: "2025-06-18"})
	first, o1 := e.open(e.stdio("kit"))
	pid := call(t, o1, "mcp__kit__pid", `{}`).Content
	first.Close()
	second, o2 := e.open(e.stdio("kit"))
	if st := second.States(); st[0].State != "running" {
		t.Fatalf("the second connection: %+v", st)
	}
	if got := call(t, o2, "mcp__kit__pid", `{}`).Content; got != pid {
		t.Fatalf("pid %s, want the first connection's server %s", got, pid)
	}
	if res := call(t, o2, "mcp__kit__echo", `{"text":"again"}`); res.IsError || res.Content != "echo: again" {
		t.Fatalf("echo on the second connection = %+v", res)
	}
}
