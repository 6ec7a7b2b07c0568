package mcptools_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/dispatcherapi"
	"jetway/services/jobs/jobsapi"
)

// workerState is the session's server as its jobs worker says it is (what
// the session detail shows).
func workerState(t *testing.T, e *env, name string) jobsapi.MCPServerState {
	t.Helper()
	states, err := e.jc.MCPState(bg, tenant, session)
	if err != nil {
		t.Fatalf("mcp_state: %v", err)
	}
	for _, s := range states {
		if s.Server == name {
			return s
		}
	}
	return jobsapi.MCPServerState{}
}

// failedFor fails the test unless the server is failed with an error
// holding every one of want, in the run's states and at the worker, both
// during the run and after it ended.
func failedFor(t *testing.T, e *env, spec dispatcherapi.AgentMCPServer, want ...string) {
	t.Helper()
	set, o := e.open(spec)
	if names := o.names(); len(names) != 0 {
		t.Fatalf("a server that cannot start offers %v", names)
	}
	holds := func(what, state, msg string) {
		t.Helper()
		if state != "failed" {
			t.Fatalf("%s: state %q (%s), want failed", what, state, msg)
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Fatalf("%s: error %q does not say %q", what, msg, w)
			}
		}
	}
	st := set.States()
	t.Logf("the run says: %s", st[0].Error)
	holds("the run", st[0].State, st[0].Error)
	ws := workerState(t, e, spec.Name)
	t.Logf("the worker says: %s", ws.Error)
	holds("the worker", ws.State, ws.Error)
	ended := set.End()
	if len(ended) != 1 {
		t.Fatalf("the run's end lists %+v, want the failed server", ended)
	}
	holds("the run's end", ended[0].State, ended[0].Error)
	ws = workerState(t, e, spec.Name)
	holds("the worker after the run", ws.State, ws.Error)
}

func TestA_stdio_server_jobs_may_not_execute_is_failed_naming_its_path_and_the_job_read_flag(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "kit")
	b, err := os.ReadFile(e.server)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	failedFor(t, e, dispatcherapi.AgentMCPServer{Name: "kit", Command: bin}, "may not read or execute "+bin, "--job-read "+dir)
}

func TestA_stdio_server_that_exits_before_it_answers_initialize_is_failed_with_its_last_words(t *testing.T) {
	e := newEnv(t)
	spec := dispatcherapi.AgentMCPServer{Name: "kit", Command: "/bin/sh", Args: []string{"-c", "echo 'config.json: no such file' >&2; exit 2"}}
	failedFor(t, e, spec, "exited before it answered initialize", "exit status 2", "its last words: config.json: no such file")
}

func TestA_stdio_server_naming_a_missing_secret_is_failed_at_the_worker_too(t *testing.T) {
	e := newEnv(t)
	spec := e.stdio("kit")
	spec.Secrets = map[string]string{"API_KEY": "not-configured"}
	failedFor(t, e, spec, "set JETWAY_MCP_SECRET_ACME__NOT_CONFIGURED there")
}

func TestA_refused_http_server_stays_failed_with_the_rule_after_the_run(t *testing.T) {
	e := newEnv(t)
	spec := dispatcherapi.AgentMCPServer{Name: "web", URL: "http://127.0.0.1:1/mcp"}
	set, _ := e.open(spec)
	set.Close()
	testutil.Eventually(t, 10*time.Second, "the worker to keep the refusal after the run", func() bool {
		ws := workerState(t, e, "web")
		return ws.State == "failed" && strings.Contains(ws.Error, "loopback") && strings.Contains(ws.Error, "--mcp-allow-host 127.0.0.1")
	})
	if st := set.States(); st[0].State != "failed" {
		t.Fatalf("after the run: %+v, want failed", st)
	}
}

func TestAn_http_server_with_a_missing_secret_stays_failed_after_the_run(t *testing.T) {
	e := newEnv(t)
	spec := dispatcherapi.AgentMCPServer{Name: "web", URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "web-auth"}}
	set, _ := e.open(spec)
	set.Close()
	testutil.Eventually(t, 10*time.Second, "the worker to keep the missing secret after the run", func() bool {
		ws := workerState(t, e, "web")
		return ws.State == "failed" && strings.Contains(ws.Error, "set JETWAY_MCP_SECRET_ACME__WEB_AUTH there")
	})
}
