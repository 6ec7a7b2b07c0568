package deploytest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	"jetway/pkg/control/layovers"
	"jetway/pkg/events"
	"jetway/pkg/llm/script"
	"jetway/services/dispatcher"
	"jetway/services/jobs"
	jobsclient "jetway/services/jobs/client"
	"jetway/services/jobs/jobsapi"
	"jetway/services/mcptools"
	"jetway/services/notifier"
	"jetway/services/runner"
)

// TestServices_work_under_their_own_users runs the real dispatcher,
// runner, jobs worker and notifier code on connections as their deployment
// users, so a service that starts touching a subject its user may not is
// caught here rather than in production: an event goes in through the
// dispatcher's HTTP API and over its NATS API, a runner runs the session, a
// job event from the jobs user becomes a headline the tenant user reads.
func TestServices_work_under_their_own_users(t *testing.T) {
	d := render(t, renderOptions{})
	d.startCluster()
	d.provision()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A compromised jobs worker listens for every reply it may while the
	// services work: other services' inboxes are refused outright, so it
	// captures nothing meant for them.
	spy := d.connect("jobs")
	var foreign atomic.Int64
	foreignInboxes := []string{"_INBOX.>", "_INBOX_runner.>", "_INBOX_dispatcher.>", "_INBOX_notifier.>"}
	for _, subj := range foreignInboxes {
		if _, err := spy.Subscribe(subj, func(*nats.Msg) { foreign.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, subj := range foreignInboxes {
		spy.waitViolation(t, subj)
	}

	// The tenant watches its headlines the way a terminal would, in its
	// own account: jetway.notify.<session> there is
	// jetway.notify.acme.<session> in JETWAY.
	acme := d.connect("tenant-acme")
	headlines, err := acme.SubscribeSync("jetway.notify.*")
	if err != nil {
		t.Fatal(err)
	}
	acme.noViolation(t)

	nconn := d.connect("notifier")
	n, err := notifier.New(notifier.Config{Conn: nconn.Conn, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	nctx, stopNotifier := context.WithCancel(ctx)
	nerr := make(chan error, 1)
	go func() { nerr <- n.Run(nctx) }()
	t.Cleanup(func() {
		stopNotifier()
		if err := <-nerr; err != nil && ctx.Err() == nil {
			t.Errorf("notifier: %v", err)
		}
	})
	ready := time.NewTimer(30 * time.Second)
	defer ready.Stop()
	select {
	case <-n.Ready():
	case err := <-nerr:
		t.Fatalf("notifier stopped before it was ready: %v", err)
	case err := <-nconn.errs: // most likely a permission the notifier user lacks
		t.Fatalf("notifier: %v", err)
	case <-ready.C:
		t.Fatal("notifier not ready within 30s")
	}

	// A runner with the deterministic demo script for a model.
	rconn := d.connect("runner")
	startDemoRunner(t, ctx, rconn, "deploytest-runner")

	// A jobs worker: it registers its micro service, binds and keeps its
	// table as the jobs user.
	jconn := d.connect("jobs")
	jobsRoot := t.TempDir()
	worker, err := jobs.New(jobs.Config{NC: jconn.Conn, WorkerID: "deploytest-jobs", Root: jobsRoot, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	startService(t, ctx, "jobs worker", worker.Run, worker.Ready(), jconn)

	const token = "acme-token"
	const acmeAdmin, globexToken = "acme-admin-token", "globex-token"
	disp := d.connect("dispatcher")
	dsp, store := startDispatcher(t, disp, auth.Grant{Token: token, Tenant: "acme"},
		auth.Grant{Token: acmeAdmin, Tenant: "acme", Role: auth.RoleAdmin},
		auth.Grant{Token: globexToken, Tenant: "globex"})
	api := httptest.NewServer(dsp.Handler())
	t.Cleanup(api.Close)

	t.Run("dispatcher_http_input_lands_in_the_session", func(t *testing.T) {
		if status, body := call(t, ctx, http.MethodPost, api.URL+"/v1/sessions/s1/input", token, `{"text":"hello"}`); status != http.StatusAccepted {
			t.Fatalf("input: %d %s", status, body)
		}
		if status, body := call(t, ctx, http.MethodGet, api.URL+"/v1/sessions", token, ""); status != http.StatusOK {
			t.Fatalf("sessions (reads the sessions bucket): %d %s", status, body)
		}
		// The detail counts the session's waiting events in its work
		// shard (the layout read from shard 0).
		if status, body := call(t, ctx, http.MethodGet, api.URL+"/v1/sessions/s1", token, ""); status != http.StatusOK ||
			!strings.Contains(body, `"pending_events"`) {
			t.Fatalf("session detail (counts waiting events in the shard): %d %s", status, body)
		}
		disp.noViolation(t)
	})

	t.Run("runner_runs_the_session_the_tenant_sent_input_to", func(t *testing.T) {
		outc := make(chan *nats.Msg, 64)
		out, err := acme.ChanSubscribe("jetway.out.s7", outc)
		if err != nil {
			t.Fatal(err)
		}
		defer out.Unsubscribe()
		acme.noViolation(t)
		if status, body := call(t, ctx, http.MethodPost, api.URL+"/v1/sessions/s7/input", token, `{"text":"hello runner"}`); status != http.StatusAccepted {
			t.Fatalf("input: %d %s", status, body)
		}
		// Any run output means the runner took the event from its work
		// partition, recorded the turn and ran the model.
		timer := time.NewTimer(30 * time.Second)
		defer timer.Stop()
		select {
		case <-outc:
		case err := <-rconn.errs:
			t.Fatalf("runner: %v", err)
		case <-timer.C:
			t.Fatal("no run output for acme/s7 within 30s")
		}
		rconn.noViolation(t)
	})

	t.Run("a_tenant_admin_s_agent_profile_binds_a_session_the_runner_runs_by", func(t *testing.T) {
		if status, body := call(t, ctx, http.MethodPut, api.URL+"/v1/agents/reviewer", acmeAdmin, `{"instructions":"Review."}`); status != http.StatusOK {
			t.Fatalf("put profile (the dispatcher writes jetway_agents): %d %s", status, body)
		}
		outc := make(chan *nats.Msg, 64)
		out, err := acme.ChanSubscribe("jetway.out.s8", outc)
		if err != nil {
			t.Fatal(err)
		}
		defer out.Unsubscribe()
		if status, body := call(t, ctx, http.MethodPost, api.URL+"/v1/sessions/s8/input", token, `{"text":"review","agent":"reviewer"}`); status != http.StatusAccepted {
			t.Fatalf("input naming the agent: %d %s", status, body)
		}
		timer := time.NewTimer(30 * time.Second)
		defer timer.Stop()
		for {
			select {
			case m := <-outc:
				var started struct {
					Agent   string `json:"agent"`
					Version uint64 `json:"agent_version"`
				}
				if m.Header.Get("ce-type") != "io.jetway.run.started" || json.Unmarshal(m.Data, &started) != nil {
					continue
				}
				if started.Agent != "reviewer" || started.Version == 0 {
					t.Fatalf("the run went by %q v%d, want the stored reviewer", started.Agent, started.Version)
				}
				disp.noViolation(t)
				rconn.noViolation(t)
				return
			case err := <-rconn.errs:
				t.Fatalf("runner: %v", err)
			case <-timer.C:
				t.Fatal("no run.started for acme/s8 within 30s")
			}
		}
	})

	// The loader-variable attack in the cluster's layout: a tenant admin's
	// profile whose stdio MCP server sets every loader variable to a
	// library in the session's workspace, which tries to read the
	// deployment's secrets (the services' passwords, the tenants' seeds)
	// and to write outside. It runs only in the confined server.
	t.Run("a_profile_s_loader_variables_run_nothing_unconfined", func(t *testing.T) {
		if _, err := exec.LookPath("gcc"); err != nil {
			t.Skip("no gcc to compile the test's shared library")
		}
		ws := filepath.Join(jobsRoot, "acme", "s9")
		if err := os.MkdirAll(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		leak := filepath.Join(t.TempDir(), "leaked")
		inside := filepath.Join(ws, "ran-confined")
		lib := loaderLibrary(t, ws, filepath.Join(d.dir, "accounts.conf"), leak, inside)
		env := map[string]string{"LD_AUDIT": lib, "LD_PRELOAD": lib, "GCONV_PATH": ws, "LD_LIBRARY_PATH": ws}
		profile, _ := json.Marshal(map[string]any{"instructions": "loader attack",
			"mcp": []any{map[string]any{"name": "evil", "command": "/bin/sh", "args": []string{"-c", "sleep 30"}, "env": env}}})
		if status, body := call(t, ctx, http.MethodPut, api.URL+"/v1/agents/evil", acmeAdmin, string(profile)); status != http.StatusOK {
			t.Fatalf("put profile: %d %s", status, body)
		}
		if status, body := call(t, ctx, http.MethodPost, api.URL+"/v1/sessions/s9/input", token, `{"text":"hello","agent":"evil"}`); status != http.StatusAccepted {
			t.Fatalf("input: %d %s", status, body)
		}
		testutil.EventuallyNil(t, 60*time.Second, "the library to run in the confined MCP server", func() error {
			_, err := os.Stat(inside)
			return err
		})
		if b, err := os.ReadFile(leak); err == nil {
			t.Fatalf("the library ran unconfined and wrote outside: %q", b)
		}
	})

	t.Run("a_tenant_admin_s_global_stop_is_refused_and_another_tenant_keeps_running", func(t *testing.T) {
		status, body := call(t, ctx, http.MethodPost, api.URL+"/v1/stop?scope=global", acmeAdmin, `{"reason":"stop everyone"}`)
		if status != http.StatusForbidden || !strings.Contains(body, "operator") {
			t.Fatalf("acme admin's global stop: %d %s, want 403 naming the operator role", status, body)
		}
		msg := nats.NewMsg(dispatcher.SubjectStop)
		msg.Header.Set("Authorization", "Bearer "+acmeAdmin)
		msg.Data = []byte(`{"action":"on","scope":"global"}`)
		reply, err := acme.RequestMsgWithContext(ctx, msg)
		if err != nil || reply.Header.Get("Nats-Service-Error-Code") != "403" {
			t.Fatalf("acme admin's global stop over NATS: %v, %v", reply, err)
		}
		if status, body := call(t, ctx, http.MethodGet, api.URL+"/v1/stop", acmeAdmin, ""); status != http.StatusOK ||
			!strings.Contains(body, `"global_stop":false`) {
			t.Fatalf("acme's view after the refusals: %d %s, want the global switch off", status, body)
		}
		// The other tenant is healthy: its input runs.
		globex := d.connect("tenant-globex")
		outc := make(chan *nats.Msg, 64)
		out, err := globex.ChanSubscribe("jetway.out.g1", outc)
		if err != nil {
			t.Fatal(err)
		}
		defer out.Unsubscribe()
		globex.noViolation(t)
		if status, body := call(t, ctx, http.MethodPost, api.URL+"/v1/sessions/g1/input", globexToken, `{"text":"still here?"}`); status != http.StatusAccepted {
			t.Fatalf("globex input: %d %s", status, body)
		}
		timer := time.NewTimer(30 * time.Second)
		defer timer.Stop()
		select {
		case <-outc:
		case <-timer.C:
			t.Fatal("no run output for globex/g1 within 30s")
		}
		disp.noViolation(t)
	})

	t.Run("dispatcher_sets_a_session_s_recovery_policy", func(t *testing.T) {
		status, body := call(t, ctx, http.MethodPut, api.URL+"/v1/sessions/s9/recovery", token, `{"policy":"manual"}`)
		if status != http.StatusOK {
			t.Fatalf("set recovery as the dispatcher user: %d %s", status, body)
		}
		if !strings.Contains(string(body), `"manual"`) {
			t.Fatalf("recovery answer %s does not name the policy it set", body)
		}
		disp.noViolation(t)
	})

	t.Run("what_the_api_writes_it_reads_back_at_once_on_the_cluster", func(t *testing.T) {
		// Each write is read back the moment it is answered, by the
		// dispatcher on whichever node it is connected to: a profile's new
		// instructions, and a sign-in code spent as soon as it is made.
		// Reads answered by a replica that had not applied the write yet
		// said "unknown agent" (404) or "never issued", under load: on a
		// quiet machine replicas rarely lag, so the mechanism itself (the
		// leader answers these reads) is held by pkg/bus's
		// TestLeader_read_buckets_see_each_write_at_once_from_a_follower.
		// Few enough calls for the tenant's request limit (burst 40).
		for i := range 8 {
			want := fmt.Sprintf("Review, take %d.", i)
			if status, body := call(t, ctx, http.MethodPut, api.URL+"/v1/agents/fresh", acmeAdmin, `{"instructions":"`+want+`"}`); status != http.StatusOK {
				t.Fatalf("put profile, take %d: %d %s", i, status, body)
			}
			if status, body := call(t, ctx, http.MethodGet, api.URL+"/v1/agents/fresh", acmeAdmin, ""); status != http.StatusOK || !strings.Contains(body, want) {
				t.Fatalf("profile read right after put %d: %d %s, want its instructions %q", i, status, body, want)
			}
		}
		for i := range 4 {
			status, body := call(t, ctx, http.MethodPost, api.URL+"/v1/signin/codes", acmeAdmin, "")
			var code struct{ Code string }
			if status != http.StatusCreated || json.Unmarshal([]byte(body), &code) != nil || code.Code == "" {
				t.Fatalf("make sign-in code %d: %d %s", i, status, body)
			}
			if status, body := call(t, ctx, http.MethodPost, api.URL+"/v1/signin", "", `{"code":"`+code.Code+`"}`); status != http.StatusOK {
				t.Fatalf("spend sign-in code %d right after it was made: %d %s", i, status, body)
			}
		}
		disp.noViolation(t)
	})

	t.Run("a_console_sign_in_code_is_made_and_spent_once_as_the_dispatcher_user", func(t *testing.T) {
		// Made (control bucket: list old codes, create), spent (read, and a
		// roll-up that expects the revision), refused when reused: every
		// step on the dispatcher's own permissions.
		status, body := call(t, ctx, http.MethodPost, api.URL+"/v1/signin/codes", acmeAdmin, "")
		var code struct{ Code string }
		if status != http.StatusCreated || json.Unmarshal([]byte(body), &code) != nil || code.Code == "" {
			t.Fatalf("make a sign-in code as the dispatcher user: %d %s", status, body)
		}
		exchange := `{"code":"` + code.Code + `"}`
		if status, body := call(t, ctx, http.MethodPost, api.URL+"/v1/signin", "", exchange); status != http.StatusOK ||
			!strings.Contains(body, `"token":"`+acmeAdmin+`"`) || !strings.Contains(body, `"role":"admin"`) {
			t.Fatalf("spend it: %d %s, want acme's admin token back", status, body)
		}
		if status, body := call(t, ctx, http.MethodPost, api.URL+"/v1/signin", "", exchange); status != http.StatusGone ||
			!strings.Contains(body, "signin-code-used") {
			t.Fatalf("spend it again: %d %s, want 410 signin-code-used", status, body)
		}
		disp.noViolation(t)
	})

	t.Run("dispatcher_nats_api_answers_a_tenant", func(t *testing.T) {
		msg := nats.NewMsg(dispatcher.SubjectInput)
		msg.Header.Set("Authorization", "Bearer "+token)
		msg.Data = []byte(`{"session":"s2","text":"over nats"}`)
		reply, err := acme.RequestMsgWithContext(ctx, msg)
		if err != nil {
			t.Fatalf("request %s as tenant-acme: %v", dispatcher.SubjectInput, err)
		}
		var got struct{ ID string }
		if err := json.Unmarshal(reply.Data, &got); err != nil || got.ID == "" {
			t.Fatalf("reply %q (%v), want an event id", reply.Data, err)
		}
		acme.noViolation(t)
		disp.noViolation(t)
	})

	t.Run("runner_books_a_layover_the_dispatcher_cancels", func(t *testing.T) {
		r := d.connect("runner")
		holder, err := events.ScheduleSubject("acme", "s5", "l1")
		if err != nil {
			t.Fatal(err)
		}
		target, err := events.FiredSubject(bus.PartitionFor("acme", "s5", deployPartitions), "acme", "s5")
		if err != nil {
			t.Fatal(err)
		}
		// As the runner's bookLayover does: the schedule, then the record.
		if _, err := r.js.PublishMsg(ctx, &nats.Msg{Subject: holder, Data: []byte(`{}`)},
			jetstream.WithScheduleAt(time.Now().Add(time.Hour)), jetstream.WithScheduleTarget(target)); err != nil {
			t.Fatalf("runner: schedule: %v", err)
		}
		control, err := r.js.KeyValue(ctx, bus.BucketControl)
		if err != nil {
			t.Fatal(err)
		}
		if err := layovers.Put(ctx, control, layovers.Layover{
			Tenant: "acme", Session: "s5", ID: "l1", At: time.Now().Add(time.Hour), BookedAt: time.Now(),
		}); err != nil {
			t.Fatalf("runner: record layover: %v", err)
		}
		r.noViolation(t)

		p, err := store.Authenticate(token)
		if err != nil {
			t.Fatal(err)
		}
		// A refused API call only times out; keep that short.
		cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
		defer ccancel()
		ok, err := dsp.CancelLayover(cctx, p, "s5")
		if err != nil || !ok {
			t.Fatalf("dispatcher: cancel layover = %v, %v; want true", ok, err)
		}
		disp.noViolation(t)
	})

	t.Run("job_event_becomes_a_headline_the_tenant_reads", func(t *testing.T) {
		jobsUser := d.connect("jobs")
		ev, err := events.New("acme", "s1", "jetway/jobs", events.JobExited{
			ID: 3, Program: "gh", ExitStatus: 0, RunningForMS: (21 * time.Minute).Milliseconds(), Status: events.StatusExited,
		})
		if err != nil {
			t.Fatal(err)
		}
		subject, err := events.JobEventsSubject("acme", "s1")
		if err != nil {
			t.Fatal(err)
		}
		m, err := events.Encode(ctx, subject, ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := jobsUser.js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("jobs: publish job event: %v", err)
		}
		for {
			hm, err := headlines.NextMsg(30 * time.Second)
			if err != nil {
				t.Fatalf("no headline for the job event: %v", err)
			}
			got, err := events.ReadEvent(hm.Header, hm.Data)
			if err != nil {
				t.Fatalf("headline: %v", err)
			}
			if strings.Contains(string(got.Data()), "job 3 (gh) exited 0 after 21m") {
				break
			}
			t.Logf("other headline: %s", got.Data())
		}
		jobsUser.noViolation(t)
	})

	t.Run("runner_starts_a_job_whose_exit_reaches_the_tenant", func(t *testing.T) {
		notes, err := acme.SubscribeSync("jetway.notify.s8")
		if err != nil {
			t.Fatal(err)
		}
		defer notes.Unsubscribe()
		acme.noViolation(t)
		// The runner's tools reach the jobs workers through this client:
		// discovery ($SRV), the session binding (jetway_workers), requests.
		jc, err := jobsclient.New(jobsclient.Config{NC: rconn.Conn})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := jc.Start(ctx, jobsapi.StartRequest{
			SessionRequest: jobsapi.SessionRequest{Tenant: "acme", Session: "s8"}, Command: "true",
		}); err != nil {
			t.Fatalf("runner: start a job: %v", err)
		}
		for {
			m, err := notes.NextMsg(30 * time.Second)
			if err != nil {
				t.Fatalf("no headline for the job's exit: %v", err)
			}
			if strings.Contains(string(m.Data), "job 1 (true) exited 0") {
				break
			}
		}
		rconn.noViolation(t)
		jconn.noViolation(t)
	})

	// Nothing any service did in the background was refused either.
	for _, c := range []*client{rconn, jconn, nconn, disp} {
		c.noViolation(t)
	}

	// Replies flowed (each service's own inbox got them) and the spy got
	// none of them.
	for name, c := range map[string]*client{"runner": rconn, "dispatcher": disp, "notifier": nconn} {
		if c.Stats().InMsgs == 0 {
			t.Errorf("the %s connection received nothing: the eavesdropping check proves nothing", name)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := foreign.Load(); n != 0 {
		t.Fatalf("the jobs user captured %d messages from other services' inboxes", n)
	}
}

// startService runs a service's Run in the background until the test ends,
// and fails the test if it stops early, if ready (when given) does not close
// within 30 s, or if the server refused anything on its connection while it
// started (most likely a permission its user lacks).
func startService(t *testing.T, ctx context.Context, name string, run func(context.Context) error, ready <-chan struct{}, c *client) {
	t.Helper()
	sctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- run(sctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-errc; err != nil && ctx.Err() == nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	if ready == nil {
		return
	}
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case <-ready:
	case err := <-errc:
		errc <- err
		t.Fatalf("%s stopped before it was ready: %v", name, err)
	case err := <-c.errs:
		t.Fatalf("%s: %v", name, err)
	case <-timer.C:
		t.Fatalf("%s not ready within 30s", name)
	}
	c.noViolation(t)
}

// startDemoRunner runs a runner on c (a connection as the runner user)
// with the deterministic demo script for a model, until the test ends.
func startDemoRunner(t *testing.T, ctx context.Context, c *client, id string) {
	t.Helper()
	demo, err := script.Demo()
	if err != nil {
		t.Fatal(err)
	}
	// Its profiles' stdio MCP servers start in the session's jobs worker,
	// as a deployed runner's do.
	jc, err := jobsclient.New(jobsclient.Config{NC: c.Conn})
	if err != nil {
		t.Fatal(err)
	}
	hub := mcptools.New(mcptools.Config{Jobs: jc, Log: zerolog.Nop()})
	mcp := func(ctx context.Context, s runner.SessionRef, prof agents.Profile, offer func(string, []tool.Tool)) func() []agents.MCPServerState {
		return hub.Open(ctx, mcptools.Ref{Tenant: s.Tenant, Session: s.Session, Run: s.Run, Lineage: s.Lineage, Network: prof.Network}, prof.MCP, offer).End
	}
	rn, err := runner.New(ctx, runner.Config{NC: c.Conn, ID: id, Provider: demo, Logger: zerolog.Nop(), MCP: mcp})
	if err != nil {
		t.Fatalf("runner as the runner user: %v", err)
	}
	startService(t, ctx, "runner", rn.Run, nil, c)
}

// startDispatcher serves the dispatcher's NATS API on c (a connection as
// the dispatcher user) with the tokens grants, until the test ends.
func startDispatcher(t *testing.T, c *client, grants ...auth.Grant) (*dispatcher.Dispatcher, *auth.Store) {
	t.Helper()
	store, err := auth.New(grants...)
	if err != nil {
		t.Fatal(err)
	}
	dsp, err := dispatcher.New(dispatcher.Config{Conn: c.Conn, Auth: store})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := dsp.StartNATS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	return dsp, store
}

// call makes one request to the dispatcher's HTTP API as a tenant's token
// and returns the status and the body.
func call(t *testing.T, ctx context.Context, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// loaderLibrary compiles into dir a shared library whose constructor (and,
// loaded by LD_AUDIT, whose la_version) marks inside, and, if it can read
// secret, copies its first bytes to leak; it returns the library's path.
func loaderLibrary(t *testing.T, dir, secret, leak, inside string) string {
	t.Helper()
	code := fmt.Sprintf(`#include <fcntl.h>
#include <unistd.h>
static void all(void) {
	char buf[64];
	int fd = open(%q, O_WRONLY|O_CREAT|O_APPEND, 0644);
	if (fd >= 0) { write(fd, "x\n", 2); close(fd); }
	int s = open(%q, O_RDONLY);
	ssize_t n = s >= 0 ? read(s, buf, sizeof buf) : -1;
	int l = open(%q, O_WRONLY|O_CREAT|O_APPEND, 0644);
	if (l >= 0) { if (n > 0) write(l, buf, n); else write(l, "ran\n", 4); close(l); }
}
__attribute__((constructor)) static void init(void) { all(); }
unsigned int la_version(unsigned int v) { all(); return v; }
`, inside, secret, leak)
	src := filepath.Join(t.TempDir(), "evil.c")
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "evil.so")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return lib
}
