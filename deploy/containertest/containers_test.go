package containertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"

	"jetway/deploy/certs"
	"jetway/pkg/bus"
	"jetway/pkg/client"
	"jetway/pkg/events"
	"jetway/services/jobs"
	jobsclient "jetway/services/jobs/client"
	"jetway/services/jobs/jobsapi"
)

const (
	root = "../.."
	// runWait bounds one agent run seen through the stream, a takeover
	// after a runner's death included (three missed heartbeats, then the
	// partition moves), on a busy two-core machine.
	runWait = 3 * time.Minute
	tenant  = "acme"
)

// stack is one deployment of the compose services in podman.
type stack struct {
	project string
	env     []string // the scripts' environment (project, ports, secrets, tag)
	http    string   // the dispatcher's base URL
	nats    string   // nats-1's client URL on the host
	secrets string
	token   string
}

// requirePodman skips the test where podman is missing, under -short, or
// where JETWAY_CONTAINER_TESTS=0 says to; JETWAY_CONTAINER_TESTS=1 says the
// containers must be tested, and makes a missing podman a failure.
func requirePodman(t *testing.T) {
	t.Helper()
	mode := os.Getenv("JETWAY_CONTAINER_TESTS")
	switch {
	case mode == "0":
		t.Skip("JETWAY_CONTAINER_TESTS=0: container tests skipped")
	case mode != "1" && testing.Short():
		t.Skip("-short: the container test builds images and runs a whole deployment")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		if mode == "1" {
			t.Fatal("JETWAY_CONTAINER_TESTS=1 but podman is not installed: apt-get install podman runc debootstrap")
		}
		t.Skip("podman is not installed, so the images cannot be built and run here (apt-get install podman runc debootstrap); JETWAY_CONTAINER_TESTS=1 makes this a failure")
	}
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// freePort is a loopback port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// script runs one of the repository's scripts with the stack's environment
// and returns its combined output, failing the test when it fails.
func (s *stack) script(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", args[0]), args[1:]...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func podman(args ...string) ([]byte, error) {
	return exec.Command("podman", args...).CombinedOutput()
}

// startStack builds the images and brings a stack of its own up (its own
// project name, ports, secrets and image tag, so it meets no other), and
// tears all of it down when the test ends.
func startStack(t *testing.T) *stack {
	t.Helper()
	id := randomHex(t, 4)
	s := &stack{project: "jwtest-" + id, secrets: t.TempDir(), token: randomHex(t, 16)}
	accounts, err := os.ReadFile(filepath.Join(root, "deploy/nats/accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	users, err := certs.UsersInConfig(accounts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Generate(certs.Config{Dir: s.secrets, Users: users, BcryptCost: 4}); err != nil {
		t.Fatal(err)
	}
	httpPort, natsPort := freePort(t), freePort(t)
	s.http = "http://127.0.0.1:" + strconv.Itoa(httpPort)
	s.nats = "tls://127.0.0.1:" + strconv.Itoa(natsPort)
	tag := "test-" + id
	// Without a model key the runners play the demo script; keys of the
	// caller's environment must not turn this into calls to a real model.
	// The scripts' other settings (a Debian mirror, ulimits) pass through;
	// the stack's own come last and win.
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "ANTHROPIC_") || strings.HasPrefix(name, "OPENAI_") || name == "JETWAY_SCRIPT" {
			continue
		}
		s.env = append(s.env, kv)
	}
	s.env = append(s.env,
		"JETWAY_PROJECT="+s.project, "JETWAY_IMAGE_TAG="+tag, "JETWAY_SECRETS="+s.secrets,
		"JETWAY_STATE="+t.TempDir(), "JETWAY_HTTP_PORT="+strconv.Itoa(httpPort), "JETWAY_NATS_PORT="+strconv.Itoa(natsPort),
		"JETWAY_TOKENS="+s.token+":"+tenant)

	t.Cleanup(func() {
		for _, img := range []string{"jetway", "jetway-nats", "jetway-jobs"} {
			if out, err := podman("rmi", "-f", img+":"+tag); err != nil {
				t.Logf("remove image %s:%s: %v\n%s", img, tag, err, out)
			}
		}
	})
	start := time.Now()
	out := s.script(t, 25*time.Minute, "images.sh")
	t.Logf("images built in %s:\n%s", time.Since(start).Round(time.Second), out)

	t.Cleanup(func() {
		if t.Failed() {
			s.dumpLogs(t)
		}
		s.script(t, 2*time.Minute, "containers.sh", "down", "--volumes")
		if out, _ := podman("ps", "-aq", "--filter", "label=io.jetway.project="+s.project); len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("containers of %s left after down: %s", s.project, out)
		}
	})
	start = time.Now()
	out = s.script(t, 5*time.Minute, "containers.sh", "up")
	t.Logf("stack up in %s:\n%s", time.Since(start).Round(time.Second), out)
	s.runsTheComposeServices(t)
	return s
}

// runsTheComposeServices fails the test unless the stack's containers are
// the services of deploy/docker-compose.yml, the one-shot provisioner (gone
// once it succeeded) aside: the script and the compose file describe one
// deployment.
func (s *stack) runsTheComposeServices(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "deploy/docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]any `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &compose); err != nil {
		t.Fatalf("deploy/docker-compose.yml: %v", err)
	}
	var want []string
	for name := range compose.Services {
		if name != "provision" {
			want = append(want, name)
		}
	}
	out, err := podman("ps", "--filter", "label=io.jetway.project="+s.project, "--format", "{{.Names}}")
	if err != nil {
		t.Fatalf("podman ps: %v\n%s", err, out)
	}
	var got []string
	for _, name := range strings.Fields(string(out)) {
		got = append(got, strings.TrimPrefix(name, s.project+"-"))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("running containers %v, want the compose services %v", got, want)
	}
}

// dumpLogs logs the last lines of every container of the stack.
func (s *stack) dumpLogs(t *testing.T) {
	out, _ := podman("ps", "-a", "--filter", "label=io.jetway.project="+s.project, "--format", "{{.Names}}")
	for _, name := range strings.Fields(string(out)) {
		logs, _ := podman("logs", "--tail", "40", name)
		t.Logf("--- podman logs %s\n%s", name, logs)
	}
}

// container is the podman name of a compose service of the stack.
func (s *stack) container(service string) string { return s.project + "-" + service }

// stream follows a session's SSE stream into memory until the test ends.
type stream struct {
	mu     sync.Mutex
	events []client.Event
	err    error
	more   chan struct{} // closed and replaced on every event
}

func (s *stack) follow(t *testing.T, c *client.Client, session string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.Stream(ctx, session, client.StreamOptions{})
	if err != nil {
		cancel()
		t.Fatalf("open the stream of %s: %v", session, err)
	}
	f := &stream{more: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			e, err := st.Next()
			f.mu.Lock()
			if err != nil {
				f.err = err
			} else {
				f.events = append(f.events, e)
			}
			close(f.more)
			f.more = make(chan struct{})
			f.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); st.Close(); <-done })
	return f
}

// run is one agent run as the stream shows it.
type run struct {
	started events.RunStarted
	ended   bool
	text    string
}

// runOf is the run that delivered the input with CE id ceID, as far as the
// stream has shown it.
func runOf(evs []client.Event, ceID string) (run, bool) {
	var r run
	found := false
	for _, e := range evs {
		switch e.Type {
		case events.TypeRunStarted:
			var s events.RunStarted
			if json.Unmarshal(e.Data, &s) == nil && slices.Contains(s.Events, ceID) {
				r.started, found = s, true
			}
		case events.TypeRunText:
			var x events.RunText
			if found && json.Unmarshal(e.Data, &x) == nil && x.Run == r.started.Run {
				r.text += x.Text
			}
		case events.TypeRunEnded:
			var x events.RunEnded
			if found && json.Unmarshal(e.Data, &x) == nil && x.Run == r.started.Run {
				r.ended = true
			}
		}
	}
	return r, found
}

// textAfter is every run text the stream showed after the run that
// delivered ceID started, joined.
func textAfter(evs []client.Event, ceID string) string {
	var b strings.Builder
	seen := false
	for _, e := range evs {
		var s events.RunStarted
		if e.Type == events.TypeRunStarted && json.Unmarshal(e.Data, &s) == nil && slices.Contains(s.Events, ceID) {
			seen = true
		}
		var x events.RunText
		if seen && e.Type == events.TypeRunText && json.Unmarshal(e.Data, &x) == nil {
			b.WriteString(x.Text)
		}
	}
	return b.String()
}

// until waits up to d for ok to hold over the events seen so far.
func (f *stream) until(t *testing.T, d time.Duration, what string, ok func([]client.Event) bool) []client.Event {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		evs, err, more := slices.Clone(f.events), f.err, f.more
		f.mu.Unlock()
		if ok(evs) {
			return evs
		}
		if err != nil {
			t.Fatalf("waiting for %s: the stream ended: %v", what, err)
		}
		select {
		case <-more:
		case <-deadline.C:
			var b strings.Builder
			for _, e := range evs {
				fmt.Fprintf(&b, "  %s %s\n", e.Type, e.Data)
			}
			t.Fatalf("no %s within %s; the stream showed:\n%s", what, d, b.String())
		}
	}
}

// finished waits for the run that delivers ceID to end and returns it.
func (f *stream) finished(t *testing.T, ceID string) run {
	t.Helper()
	var r run
	f.until(t, runWait, "run delivering "+ceID+" to end", func(evs []client.Event) bool {
		var ok bool
		r, ok = runOf(evs, ceID)
		return ok && r.ended
	})
	return r
}

func TestCompose_deployment_in_podman_answers_survives_a_runner_and_confines_jobs(t *testing.T) {
	requirePodman(t)
	s := startStack(t)
	c, err := client.New(client.Config{BaseURL: s.http, Token: s.token})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Enough sessions that both runners' partitions hold some.
	sessions := []string{"s1", "s2", "s3", "s4", "s5", "s6"}
	streams := map[string]*stream{}
	for _, sess := range sessions {
		streams[sess] = s.follow(t, c, sess) // for all the subtests
	}
	runnerOf := map[string]string{}

	t.Run("input through the dispatcher runs and streams its text", func(t *testing.T) {
		ids := map[string]string{}
		for _, sess := range sessions {
			acc, err := c.Input(ctx, sess, "build it please")
			if err != nil {
				t.Fatalf("input to %s: %v", sess, err)
			}
			ids[sess] = acc.ID
		}
		for _, sess := range sessions {
			r := streams[sess].finished(t, ids[sess])
			if !strings.Contains(r.text, "start the build in the background") {
				t.Errorf("%s: run %s streamed %q, not the demo script's first answer", sess, r.started.Run, r.text)
			}
			runnerOf[sess] = r.started.Runner
			// The script's background build runs on the jobs worker in its
			// container; its exit notice starts the run that quotes it.
			streams[sess].until(t, runWait, sess+"'s report of the background build", func(evs []client.Event) bool {
				return strings.Contains(textAfter(evs, ids[sess]), `last output line was "build ok"`)
			})
		}
		t.Logf("sessions by runner: %v", runnerOf)
	})
	if t.Failed() {
		return
	}

	t.Run("a killed runner's sessions go on on the other runner", func(t *testing.T) {
		victim := runnerOf[sessions[0]]
		survivor := map[string]string{"runner-1": "runner-2", "runner-2": "runner-1"}[victim]
		if survivor == "" {
			t.Fatalf("%s ran on %q, not one of the stack's runners", sessions[0], victim)
		}
		// SIGKILL and gone: no graceful hand-over, and no restart that
		// could take the sessions back.
		if out, err := podman("rm", "-f", "-t", "0", s.container(victim)); err != nil {
			t.Fatalf("kill %s: %v\n%s", victim, err, out)
		}
		moved := 0
		for _, sess := range sessions {
			acc, err := c.Input(ctx, sess, "once more")
			if err != nil {
				t.Fatalf("input to %s after %s died: %v", sess, victim, err)
			}
			r := streams[sess].finished(t, acc.ID)
			if r.started.Runner != survivor {
				t.Errorf("%s: run %s after %s died ran on %q, want %s", sess, r.started.Run, victim, r.started.Runner, survivor)
			}
			if r.text == "" {
				t.Errorf("%s: run %s on %s streamed no text", sess, r.started.Run, survivor)
			}
			if runnerOf[sess] == victim {
				moved++
			}
		}
		if moved == 0 {
			t.Fatalf("no session was on %s: nothing moved", victim)
		}
		t.Logf("%d sessions moved from %s to %s", moved, victim, survivor)
	})

	t.Run("the jobs worker in its container confines jobs", func(t *testing.T) {
		users, err := certs.ReadUsersEnv(filepath.Join(s.secrets, certs.UsersEnv))
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		// The runner's view of the bus: it is the one that asks workers to
		// run commands.
		nc, err := bus.Connect(cctx, bus.ConnConfig{
			URLs: []string{s.nats}, Name: "containertest", User: "runner", Password: users[certs.EnvVar("runner")],
			TLSCAFile: filepath.Join(s.secrets, certs.CAFile), InboxPrefix: bus.ServiceInbox("runner"),
		})
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()

		msg, err := nc.Request("$SRV.INFO.jetway-jobs", nil, 10*time.Second)
		if err != nil {
			t.Fatalf("ask the jobs worker how it confines: %v", err)
		}
		var info struct {
			Metadata map[string]string `json:"metadata"`
		}
		if err := json.Unmarshal(msg.Data, &info); err != nil {
			t.Fatalf("jobs service info %s: %v", msg.Data, err)
		}
		if got := info.Metadata[jobs.MetadataConfinement]; !strings.HasPrefix(got, "landlock-v") {
			t.Fatalf("the jobs worker in its container confines with %q, want landlock-v<ABI>", got)
		}

		jc, err := jobsclient.New(jobsclient.Config{NC: nc})
		if err != nil {
			t.Fatal(err)
		}
		runIn := func(session, script string) string {
			t.Helper()
			res, err := jc.Run(cctx, jobsapi.StartRequest{
				SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session}, Command: script, TimeoutMS: 30_000,
			})
			if err != nil || !res.Ended {
				t.Fatalf("run in %s: %+v, %v", session, res, err)
			}
			return res.Output
		}
		secret := "victim-secret-" + randomHex(t, 8)
		if out := runIn("victim", "echo "+secret+" > secret.txt && cat secret.txt"); !strings.Contains(out, secret) {
			t.Fatalf("a job cannot read its own workspace: %q", out)
		}
		// The worker can read all of these; its job must not.
		out := runIn("attacker", `
cat ../victim/secret.txt || echo refused-other-session
cat /var/lib/jetway/jobs/acme/victim/secret.txt || echo refused-absolute-path
ls /var/lib/jetway/jobs || echo refused-list-root
for p in /proc/[0-9]*; do cat $p/environ; done 2>/dev/null; echo proc-walk-done
echo planted > ../victim/planted.txt || echo refused-write-other
`)
		for _, leaked := range []string{secret, users[certs.EnvVar("jobs")]} {
			if strings.Contains(out, leaked) {
				t.Errorf("a job read %q outside its workspace:\n%s", leaked, out)
			}
		}
		t.Logf("a job's attempts outside its workspace:\n%s", out)
		for _, w := range []string{"refused-other-session", "refused-absolute-path", "refused-list-root", "proc-walk-done", "refused-write-other"} {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
	})
}
