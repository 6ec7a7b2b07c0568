package jobs_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"jetway/internal/mcptest"
	"jetway/internal/testutil"

	"jetway/services/jobs"
	"jetway/services/jobs/jobsapi"
)

// The MCP ops through a real worker: what a worker refuses and why. The
// servers themselves are tested with a real MCP server in services/mcptools.

func mcpOpen(command string) jobsapi.MCPOpenRequest {
	return jobsapi.MCPOpenRequest{SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session},
		Server: jobsapi.MCPServer{Name: "kit", Command: command}}
}

func TestMCP_server_on_a_worker_that_cannot_confine_is_refused_saying_why(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1", func(c *jobs.Config) { c.NoLandlock = true })
	_, err := e.cli.MCPOpen(bg, mcpOpen("/bin/sh"))
	ae := wantCode(t, err, jobsapi.CodeUnavailable, jobsapi.ErrUnavailable)
	if !strings.Contains(ae.Message, "cannot confine") || !strings.Contains(ae.Message, "--allow-unconfined-jobs") {
		t.Errorf("refusal %q does not say why", ae.Message)
	}
	states, err := e.cli.MCPState(bg, tenant, session)
	if err != nil || len(states) != 0 {
		t.Errorf("states after a refusal = %+v, %v; want none", states, err)
	}
}

func TestMCP_bad_requests_are_refused_naming_what_is_wrong(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1", func(c *jobs.Config) {
		c.NoLandlock, c.AllowUnconfined = true, true
		c.SecretEnv = func(string) (string, bool) { return "", false }
	})
	bad := mcpOpen("/bin/cat")
	bad.Server.Name = "no spaces"
	_, err := e.cli.MCPOpen(bg, bad)
	if ae := wantCode(t, err, jobsapi.CodeBadRequest, jobsapi.ErrBadRequest); !strings.Contains(ae.Message, "server name") {
		t.Errorf("bad name: %q", ae.Message)
	}
	env := mcpOpen("/bin/cat")
	env.Server.Env = map[string]string{"NATS_URL": "nats://x"}
	_, err = e.cli.MCPOpen(bg, env)
	if ae := wantCode(t, err, jobsapi.CodeBadRequest, jobsapi.ErrBadRequest); !strings.Contains(ae.Message, "NATS_URL") {
		t.Errorf("a worker variable: %q", ae.Message)
	}
	secret := mcpOpen("/bin/cat")
	secret.Server.Secrets = map[string]string{"TOKEN": "nope"}
	_, err = e.cli.MCPOpen(bg, secret)
	if ae := wantCode(t, err, jobsapi.CodeBadRequest, jobsapi.ErrBadRequest); !strings.Contains(ae.Message, "JETWAY_MCP_SECRET_ACME__NOPE") {
		t.Errorf("a missing secret: %q", ae.Message)
	}
	// A program that is not there starts (through the shim that
	// confines and limits it) and ends at once: a crash, saying why.
	_, _ = e.cli.MCPOpen(bg, mcpOpen("/no/such/server"))
	testutil.EventuallyNil(t, 10*time.Second, "the missing program's end", func() error {
		states, err := e.cli.MCPState(bg, tenant, session)
		if err != nil || len(states) != 1 || states[0].State == "running" || !strings.Contains(states[0].Error, "/no/such/server") {
			return fmt.Errorf("states %+v, %v", states, err)
		}
		return nil
	})

	// /bin/cat echoes every line: a stand-in that shows the framing.
	conn, err := e.cli.MCPOpen(bg, mcpOpen("/bin/cat"))
	if err != nil {
		t.Fatal(err)
	}
	cr := jobsapi.MCPConnRequest{SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session}, Server: "kit", Conn: conn.Conn}
	msg := json.RawMessage(`{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	if err := e.cli.MCPSend(bg, jobsapi.MCPSendRequest{MCPConnRequest: cr, Messages: []json.RawMessage{msg}}); err != nil {
		t.Fatal(err)
	}
	got, err := e.cli.MCPRecv(bg, jobsapi.MCPRecvRequest{MCPConnRequest: cr, WaitMS: 10_000})
	if err != nil || len(got.Messages) != 1 || string(got.Messages[0]) != string(msg) {
		t.Fatalf("recv = %+v, %v; want the line back", got, err)
	}
	// An answer to a request this connection never sent (one an earlier
	// connection sent) is not handed to it: cat echoes this "answer" back.
	stray := json.RawMessage(`{"jsonrpc":"2.0","id":99,"result":{}}`)
	next := json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/progress"}`)
	if err := e.cli.MCPSend(bg, jobsapi.MCPSendRequest{MCPConnRequest: cr, Messages: []json.RawMessage{stray, next}}); err != nil {
		t.Fatal(err)
	}
	got, err = e.cli.MCPRecv(bg, jobsapi.MCPRecvRequest{MCPConnRequest: cr, WaitMS: 10_000})
	if err != nil || len(got.Messages) != 1 || string(got.Messages[0]) != string(next) {
		t.Fatalf("recv = %+v, %v; want only the notification, not the stray answer", got, err)
	}
	if err := e.cli.MCPSend(bg, jobsapi.MCPSendRequest{MCPConnRequest: cr, Messages: []json.RawMessage{json.RawMessage(`[1,`)}}); err == nil {
		t.Error("a message that is not JSON was sent")
	}
	// A second connection takes the server over: the first is told why.
	if _, err := e.cli.MCPOpen(bg, mcpOpen("/bin/cat")); err != nil {
		t.Fatal(err)
	}
	got, err = e.cli.MCPRecv(bg, jobsapi.MCPRecvRequest{MCPConnRequest: cr, WaitMS: 10_000})
	if err != nil || !got.Closed || !strings.Contains(got.Reason, "another connection") {
		t.Fatalf("the first connection's recv = %+v, %v; want closed, taken over", got, err)
	}
	err = e.cli.MCPSend(bg, jobsapi.MCPSendRequest{MCPConnRequest: cr, Messages: []json.RawMessage{msg}})
	wantCode(t, err, jobsapi.CodeConflict, jobsapi.ErrConflict)
}

// A stdio server's secrets are read only from the variables of the
// session's tenant, or the operator's shared ones by shared:<name>: every
// spelling another tenant's profile might use for the victim's secret is
// refused, with the victim's variable set in this worker's environment
// (not parallel: t.Setenv).
func TestMCP_secret_names_resolve_only_inside_the_sessions_tenant(t *testing.T) {
	t.Setenv(mcptest.VictimVar, mcptest.VictimValue)
	t.Setenv("JETWAY_MCP_SECRET_GH_TOKEN", "unscoped-value-of-old")
	t.Setenv("JETWAY_MCP_SHARED_SECRET_CI_TOKEN", "shared-ci-value")
	e := newEnv(t)
	e.startWorker("w1", func(c *jobs.Config) { c.NoLandlock, c.AllowUnconfined = true, true })
	// The server prints its two secrets as a notification, then echoes.
	open := func(tenant string, secrets map[string]string) (jobsapi.MCPOpenResponse, error) {
		return e.cli.MCPOpen(bg, jobsapi.MCPOpenRequest{SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session},
			Server: jobsapi.MCPServer{Name: "kit", Command: "/bin/sh", Secrets: secrets, Args: []string{"-c",
				`printf '{"jsonrpc":"2.0","method":"env","params":{"gh":"%s","ci":"%s"}}\n' "$GH_TOKEN" "$CI_TOKEN"; exec cat`}}})
	}
	for _, attacker := range mcptest.AttackerTenants {
		for _, ref := range mcptest.CrossTenantSpellings {
			_, err := open(attacker, map[string]string{"GH_TOKEN": ref})
			var ae *jobsapi.Error
			if !errors.As(err, &ae) || ae.Code != jobsapi.CodeBadRequest || strings.Contains(ae.Message, mcptest.VictimValue) {
				t.Errorf("tenant %s naming %q: %v, want refused before the server starts", attacker, ref, err)
			}
		}
	}
	// The old unscoped variable is read by no one, and the refusal names
	// the tenant's own variable.
	_, err := open(tenant, map[string]string{"GH_TOKEN": "gh-token"})
	if ae := wantCode(t, err, jobsapi.CodeBadRequest, jobsapi.ErrBadRequest); !strings.Contains(ae.Message, "set JETWAY_MCP_SECRET_ACME__GH_TOKEN there") ||
		strings.Contains(ae.Message, "unscoped-value-of-old") {
		t.Errorf("acme's gh-token: %q, want the variable to set and no value", ae.Message)
	}
	// The shared secret is reached only by its explicit form.
	for _, ref := range []string{"ci-token", "CI_TOKEN", "shared-ci-token", "shared_ci_token", "SHARED_SECRET_CI_TOKEN", "shared__ci_token"} {
		if _, err := open(tenant, map[string]string{"CI_TOKEN": ref}); err == nil {
			t.Errorf("acme's %q resolved; only shared:ci-token names the shared secret", ref)
		}
	}
	for _, c := range []struct {
		tenant  string
		secrets map[string]string
		want    string
	}{
		{mcptest.Victim, map[string]string{"GH_TOKEN": mcptest.VictimSecret, "CI_TOKEN": "shared:ci-token"},
			`"gh":"` + mcptest.VictimValue + `","ci":"shared-ci-value"`},
		{tenant, map[string]string{"CI_TOKEN": "shared:ci-token"}, `"gh":"","ci":"shared-ci-value"`},
	} {
		conn, err := open(c.tenant, c.secrets)
		if err != nil {
			t.Fatalf("%s's own secrets: %v", c.tenant, err)
		}
		got, err := e.cli.MCPRecv(bg, jobsapi.MCPRecvRequest{MCPConnRequest: jobsapi.MCPConnRequest{
			SessionRequest: jobsapi.SessionRequest{Tenant: c.tenant, Session: session}, Server: "kit", Conn: conn.Conn}, WaitMS: 10_000})
		if err != nil || len(got.Messages) != 1 || !strings.Contains(string(got.Messages[0]), c.want) {
			t.Fatalf("%s's server heard %+v (%v), want %s", c.tenant, got, err, c.want)
		}
	}
}
