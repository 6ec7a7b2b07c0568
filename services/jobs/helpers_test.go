package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/events"
	"jetway/services/jobs"
	"jetway/services/jobs/client"
	"jetway/services/jobs/jobsapi"
)

// Environment of a worker run as a child process (the restart test kills
// it the hard way).
const (
	childURL  = "JOBS_TEST_CHILD_URL"
	childID   = "JOBS_TEST_CHILD_ID"
	childRoot = "JOBS_TEST_CHILD_ROOT"
	// childDiskCap asks the child for the default disk cap, as `jetway
	// jobs-worker` has it, instead of none.
	childDiskCap = "JOBS_TEST_CHILD_DISK_CAP"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == netprobeArg {
		os.Exit(netprobe(os.Args[2:]))
	}
	// The worker's own environment holds a credential, as a real one's
	// NATS_PASSWORD would: no job may see it (confine_test.go).
	os.Setenv("NATS_PASSWORD", workerSecret)
	if os.Getenv(childURL) != "" {
		os.Exit(runChildWorker())
	}
	os.Exit(m.Run())
}

// runChildWorker serves a worker until the process is killed.
func runChildWorker() int {
	ctx := context.Background()
	nc, err := bus.Connect(ctx, bus.ConnConfig{URLs: []string{os.Getenv(childURL)}})
	if err != nil {
		return 2
	}
	cfg := jobs.Config{NC: nc, WorkerID: os.Getenv(childID), Root: os.Getenv(childRoot), Grace: 200 * time.Millisecond}
	if os.Getenv(childDiskCap) != "" {
		cfg.WorkspaceSize, cfg.WorkspaceFiles = jobs.DefaultWorkspaceSize, jobs.DefaultWorkspaceFiles
	}
	w, err := jobs.New(cfg)
	if err != nil {
		return 2
	}
	if err := w.Run(ctx); err != nil {
		return 1
	}
	return 0
}

const tenant, session = "acme", "s1"

var bg = context.Background()

// env is a real JetStream server, provisioned, with a client on it.
type env struct {
	t    testing.TB
	url  string
	nc   *nats.Conn
	js   jetstream.JetStream
	root string
	cli  *client.Client
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := bustest.StartServerWith(t, 1)
	nc, js := bustest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: 1}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	cli, err := client.New(client.Config{NC: nc})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, url: srv.ClientURL(), nc: nc, js: js, root: t.TempDir(), cli: cli}
}

// startWorker runs a worker on the env's connection until the test ends.
func (e *env) startWorker(id string, mods ...func(*jobs.Config)) *jobs.Worker {
	e.t.Helper()
	cfg := jobs.Config{NC: e.nc, WorkerID: id, Root: e.root, Grace: 200 * time.Millisecond}
	for _, m := range mods {
		m(&cfg)
	}
	w, err := jobs.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	stop := e.run(w)
	e.t.Cleanup(stop)
	return w
}

// run serves w and returns the function that stops it and waits for Run.
func (e *env) run(w *jobs.Worker) func() {
	e.t.Helper()
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-w.Ready():
	case err := <-done:
		e.t.Fatalf("worker %s: Run returned before ready: %v", w.ID(), err)
	case <-time.After(20 * time.Second):
		e.t.Fatalf("worker %s not ready", w.ID())
	}
	var stopped bool
	return func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("worker %s: Run: %v", w.ID(), err)
			}
		case <-time.After(30 * time.Second):
			e.t.Errorf("worker %s did not stop", w.ID())
		}
	}
}

// eventSub receives the job events of one session.
type eventSub struct {
	t  testing.TB
	ch chan *nats.Msg
}

func (e *env) subscribe(tenant, session string) *eventSub {
	e.t.Helper()
	if _, err := events.JobEventsSubject(tenant, session); err != nil {
		e.t.Fatal(err)
	}
	// The server's mapping puts the partition in: any partition.
	ch := make(chan *nats.Msg, 256)
	sub, err := e.nc.ChanSubscribe("jetway.jobevents.*."+tenant+"."+session, ch)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return &eventSub{t: e.t, ch: ch}
}

// next returns the next event, decoded and checked against the contract.
func (s *eventSub) next() (events.HostEvent, *nats.Msg) {
	s.t.Helper()
	select {
	case m := <-s.ch:
		ev, err := events.DecodeMsg(m)
		if err != nil {
			s.t.Fatalf("event on %s does not decode: %v", m.Subject, err)
		}
		return ev, m
	case <-time.After(15 * time.Second):
		s.t.Fatal("no job event within 15s")
	}
	return events.HostEvent{}, nil
}

func headline(t *testing.T, ev events.HostEvent) string {
	t.Helper()
	h, ok := ev.Headline()
	if !ok {
		t.Fatalf("event %s has no headline", ev.Type)
	}
	return h
}

func req(command string) jobsapi.StartRequest {
	return jobsapi.StartRequest{SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session}, Command: command}
}

func (e *env) start(command string) jobsapi.Job {
	e.t.Helper()
	res, err := e.cli.Start(bg, req(command))
	if err != nil {
		e.t.Fatalf("start %q: %v", command, err)
	}
	return res.Job
}

var pidLine = regexp.MustCompile(`^pid (\d+)$`)

// outputPids waits until the job's output holds n "pid N" lines.
func (e *env) outputPids(id string, n int) []int {
	e.t.Helper()
	var pids []int
	testutil.Eventually(e.t, 15*time.Second, strconv.Itoa(n)+" pid lines", func() bool {
		out, err := e.cli.Output(bg, jobsapi.OutputRequest{JobRequest: jobsapi.JobRequest{
			SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session}, ID: id}})
		if err != nil {
			return false
		}
		pids = pids[:0]
		for _, l := range out.Lines {
			if m := pidLine.FindStringSubmatch(l); m != nil {
				p, _ := strconv.Atoi(m[1])
				pids = append(pids, p)
			}
		}
		return len(pids) >= n
	})
	return pids
}

// running reports whether pid is a live process (a zombie has ended).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

func checkGone(t *testing.T, pids []int) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, "every process of the tree to be gone", func() bool {
		for _, p := range pids {
			if running(p) {
				return false
			}
		}
		return true
	})
}

func wantCode(t *testing.T, err error, code int, sentinel error) *jobsapi.Error {
	t.Helper()
	var ae *jobsapi.Error
	if !errors.As(err, &ae) || ae.Code != code || !errors.Is(err, sentinel) {
		t.Fatalf("error = %v, want a %d", err, code)
	}
	return ae
}

// childWorker runs a worker in a child process of the test binary.
func (e *env) childWorker(id string) *exec.Cmd {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childURL+"="+e.url, childID+"="+id, childRoot+"="+e.root)
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	testutil.Eventually(e.t, 15*time.Second, "the child worker to answer", func() bool {
		ws, _ := e.cli.Workers(bg)
		for _, w := range ws {
			if w == id {
				return true
			}
		}
		return false
	})
	return cmd
}

// serviceInfo asks the jobs service for its micro info (as `nats micro
// info` does).
func serviceInfo(t *testing.T, e *env) micro.Info {
	t.Helper()
	subject, err := micro.ControlSubject(micro.InfoVerb, jobsapi.ServiceName, "")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := e.nc.Request(subject, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	return info
}
