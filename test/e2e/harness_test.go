package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/client"
	"jetway/pkg/events"
)

// Bounds on the waits of this suite. They are generous because the suite
// runs on a loaded two-core machine; no test asserts how long anything took.
const (
	startTimeout = 60 * time.Second // a `jetway dev` until it answers
	stopTimeout  = 20 * time.Second // a process after SIGTERM
	runTimeout   = 30 * time.Second // an event until the run it causes has ended
)

// jetwayBinary is cmd/jetway built from this checkout, stamped with a
// version as `make build` does: the build every package's tests share.
func jetwayBinary(t *testing.T) string { return testutil.JetwayBinary(t) }

// cleanEnv is this process's environment without anything that would pick
// a real model or point jetway elsewhere, plus extra (KEY=value).
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "ANTHROPIC_") || strings.HasPrefix(k, "OPENAI_") ||
			strings.HasPrefix(k, "JETWAY_") || k == "NATS_URL" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// feed is a growing record — a process's lines, a stream's events, what a
// terminal shows — that tests wait on with a deadline.
type feed[T any] struct {
	mu      sync.Mutex
	items   []T
	changed chan struct{} // closed and replaced on every change
	ended   error         // why no more items will come, once none will
}

func newFeed[T any]() *feed[T] { return &feed[T]{changed: make(chan struct{})} }

func (f *feed[T]) add(items ...T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items = append(f.items, items...)
	close(f.changed)
	f.changed = make(chan struct{})
}

// end records that no more items will come, and why.
func (f *feed[T]) end(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		err = io.EOF
	}
	f.ended = err
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *feed[T]) snapshot() []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.items)
}

// wait returns the items as soon as ok holds for them. It fails the test
// when d passes first or the feed ends without ok holding; show renders the
// items for the failure message.
func (f *feed[T]) wait(t *testing.T, d time.Duration, what string, ok func([]T) bool, show func([]T) string) []T {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		items, changed, ended := slices.Clone(f.items), f.changed, f.ended
		f.mu.Unlock()
		if ok(items) {
			return items
		}
		if ended != nil {
			t.Fatalf("%s: never happened (ended: %v); got:\n%s", what, ended, show(items))
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%s: not after %s; got:\n%s", what, d, show(items))
		}
	}
}

// devOptions say how to start a `jetway dev`.
type devOptions struct {
	// Script is a model script for JETWAY_SCRIPT; empty runs the built-in
	// demo, as `make run` does without a key.
	Script string
	// Env is added to the process environment (KEY=value).
	Env []string
	// Files are written into the data dir (mode 0600) before dev starts,
	// e.g. webhooks.json.
	Files map[string]string
}

// devStack is a running `jetway dev` and what a client needs to reach it.
type devStack struct {
	URL, NATSURL string
	Data         string // the --data dir, holding tokens.json
	Dir          string // the data dir's parent: chat started here finds the tokens by default
	User         string // tenant default's token from tokens.json

	cmd   *exec.Cmd
	lines *feed[string] // stdout
	log   string        // stderr: the services' logs
	done  chan struct{} // closed when the process has exited
}

// startDev starts `jetway dev` on free ports with a fresh data dir
// (<tmp>/.jetway, as `make run` uses ./.jetway), waits until its API
// answers with the tokens it wrote, and stops it with SIGTERM at cleanup.
func startDev(t *testing.T, o devOptions) *devStack {
	t.Helper()
	dir := t.TempDir()
	d := &devStack{
		Dir: dir, Data: filepath.Join(dir, ".jetway"), log: filepath.Join(dir, "dev.log"),
		lines: newFeed[string](), done: make(chan struct{}),
	}
	env := o.Env
	if o.Script != "" {
		path := filepath.Join(dir, "script.json")
		if err := os.WriteFile(path, []byte(o.Script), 0o644); err != nil {
			t.Fatal(err)
		}
		env = append(env, "JETWAY_SCRIPT="+path)
	}
	if err := os.MkdirAll(d.Data, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range o.Files {
		if err := os.WriteFile(filepath.Join(d.Data, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	logf, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(jetwayBinary(t), "dev", "--data", d.Data, "--nats", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--partitions", "2", "--log-format", "json",
		// The tests' webhook receivers listen on loopback, which the
		// notifier refuses unless the host is allowed by name.
		"--webhook-allow-host", "127.0.0.1")
	d.cmd.Env = cleanEnv(env...)
	d.cmd.Stderr = logf
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start jetway dev: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			d.lines.add(sc.Text())
		}
		err := d.cmd.Wait()
		logf.Close()
		d.lines.end(fmt.Errorf("jetway dev exited: %v", err))
		close(d.done)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("jetway dev stdout:\n%s\nservice log (end):\n%s", strings.Join(d.lines.snapshot(), "\n"), d.logTail(30))
		}
	})
	t.Cleanup(func() { d.stop(t) })

	d.URL, _, _ = strings.Cut(d.line(t, "http: "), " ")
	d.NATSURL = d.line(t, "NATS URL: ")
	d.line(t, "ready;")
	testutil.EventuallyNil(t, startTimeout, "the dispatcher answers with the tokens in tokens.json", func() error {
		f, err := auth.ReadFile(filepath.Join(d.Data, auth.DevTokensFile))
		if err != nil {
			return err
		}
		for _, g := range f.Tokens {
			if g.Tenant == auth.DefaultTenant && !g.IsAdmin() && d.User == "" {
				d.User = g.Token
			}
		}
		if d.User == "" {
			return fmt.Errorf("tokens.json has no token for tenant %s", auth.DefaultTenant)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = d.client(t).Sessions(ctx)
		return err
	})
	return d
}

// line waits for a stdout line starting with prefix and returns the rest.
func (d *devStack) line(t *testing.T, prefix string) string {
	t.Helper()
	var rest string
	d.lines.wait(t, startTimeout, "jetway dev prints "+strconv.Quote(prefix), func(ls []string) bool {
		for _, l := range ls {
			if r, ok := strings.CutPrefix(l, prefix); ok {
				rest = r
				return true
			}
		}
		return false
	}, func(ls []string) string { return strings.Join(ls, "\n") })
	return rest
}

// stop sends SIGTERM and waits for a clean exit, killing it if it hangs.
func (d *devStack) stop(t *testing.T) {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(stopTimeout):
		t.Errorf("jetway dev still running %s after SIGTERM; killing it", stopTimeout)
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

func (d *devStack) logTail(n int) string {
	b, err := os.ReadFile(d.log)
	if err != nil {
		return err.Error()
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// do sends one HTTP request to the dispatcher with token (none when empty)
// and returns the response and its body.
func (d *devStack) do(t *testing.T, method, path, token string, body []byte, header ...string) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, b
}

// input sends text into session over HTTP and returns the event's CE id.
func (d *devStack) input(t *testing.T, session, text string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"text": text})
	resp, b := d.do(t, http.MethodPost, "/v1/sessions/"+session+"/input", d.User, body)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("input into %s: %d %s", session, resp.StatusCode, b)
	}
	var acc client.Accepted
	if err := json.Unmarshal(b, &acc); err != nil || acc.ID == "" {
		t.Fatalf("input into %s: answer %s: %v", session, b, err)
	}
	return acc.ID
}

// client is a pkg/client Client for tenant default.
func (d *devStack) client(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{BaseURL: d.URL, Token: d.User})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// jetStream connects to the dev stack's NATS server, as another system on
// the bus would.
func (d *devStack) jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	token, err := os.ReadFile(filepath.Join(d.Data, "nats.token"))
	if err != nil {
		t.Fatalf("the dev bus's token: %v", err)
	}
	nc, err := bus.Connect(ctx, bus.ConnConfig{URLs: []string{d.NATSURL}, User: "jetway", Password: strings.TrimSpace(string(token)), Name: t.Name()})
	if err != nil {
		t.Fatalf("connect to %s: %v", d.NATSURL, err)
	}
	t.Cleanup(nc.Close)
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// publishJobExited puts a job's exit on jetway.jobevents.default.<session>,
// as a jobs worker does, and returns its CE id.
func publishJobExited(t *testing.T, js jetstream.JetStream, session string, job events.JobExited) string {
	t.Helper()
	e, err := events.New(auth.DefaultTenant, session, "jetway/jobs-worker/e2e", job)
	if err != nil {
		t.Fatal(err)
	}
	subject, err := events.JobEventsSubject(auth.DefaultTenant, session)
	if err != nil {
		t.Fatal(err)
	}
	publishEvent(t, js, subject, e)
	return e.ID()
}

// publishEvent puts e on subject the way jetway's own publishers do
// (binary content mode, pkg/events) and returns the message it sent.
func publishEvent(t *testing.T, js jetstream.JetStream, subject string, e event.Event) *nats.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := events.Encode(ctx, subject, e)
	if err != nil {
		t.Fatalf("encode %s: %v", e.ID(), err)
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("publish %s on %s: %v", e.ID(), subject, err)
	}
	return m
}

// sse follows a session's stream over HTTP into a feed until cleanup.
type sse struct {
	*feed[client.Event]
	stream *client.Stream
	cancel context.CancelFunc
	done   chan struct{}
}

func follow(t *testing.T, c *client.Client, session string, o client.StreamOptions) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.Stream(ctx, session, o)
	if err != nil {
		cancel()
		t.Fatalf("open the stream of %s: %v", session, err)
	}
	s := &sse{feed: newFeed[client.Event](), stream: st, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			e, err := st.Next()
			if err != nil {
				s.end(err)
				return
			}
			s.add(e)
		}
	}()
	t.Cleanup(s.close)
	return s
}

// close disconnects, as a client that goes away does.
func (s *sse) close() {
	s.cancel()
	s.stream.Close()
	<-s.done
}

// until waits up to d for ok to hold for the events seen so far.
func (s *sse) until(t *testing.T, d time.Duration, what string, ok func([]client.Event) bool) []client.Event {
	t.Helper()
	return s.wait(t, d, what, ok, showEvents)
}

func showEvents(evs []client.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  %s %s %s\n", e.ID, e.Type, e.Data)
	}
	return b.String()
}

// runOf finds the run that delivered the event with CE id ceID.
func runOf(evs []client.Event, ceID string) (events.RunStarted, bool) {
	for _, e := range evs {
		if e.Type != events.TypeRunStarted {
			continue
		}
		var r events.RunStarted
		if json.Unmarshal(e.Data, &r) == nil && slices.Contains(r.Events, ceID) {
			return r, true
		}
	}
	return events.RunStarted{}, false
}

// ended reports whether run has ended, and how.
func ended(evs []client.Event, run string) (events.RunEnded, bool) {
	for _, e := range evs {
		if e.Type != events.TypeRunEnded {
			continue
		}
		var r events.RunEnded
		if json.Unmarshal(e.Data, &r) == nil && r.Run == run {
			return r, true
		}
	}
	return events.RunEnded{}, false
}

// text is run's streamed text: its deltas, joined.
func text(evs []client.Event, run string) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type != events.TypeRunText {
			continue
		}
		var r events.RunText
		if json.Unmarshal(e.Data, &r) == nil && r.Run == run {
			b.WriteString(r.Text)
		}
	}
	return b.String()
}

// headlines are the notifier's one-liners on the stream.
func headlines(evs []client.Event) []string {
	var hs []string
	for _, e := range evs {
		if e.Type != events.TypeHeadline {
			continue
		}
		var h events.HeadlineNote
		if json.Unmarshal(e.Data, &h) == nil {
			hs = append(hs, h.Text)
		}
	}
	return hs
}

// runFor waits until the event ceID has started a run and that run has
// ended, and returns the run's start, end and text. The session must be
// idle when the event arrives: one that comes mid-run joins that run as a
// notice instead (run.started lists only what the first turn delivered).
func (s *sse) runFor(t *testing.T, ceID string) (events.RunStarted, events.RunEnded, string) {
	t.Helper()
	var start events.RunStarted
	var end events.RunEnded
	evs := s.until(t, runTimeout, "a run that delivers "+ceID+" starts and ends", func(evs []client.Event) bool {
		var ok bool
		if start, ok = runOf(evs, ceID); !ok {
			return false
		}
		end, ok = ended(evs, start.Run)
		return ok
	})
	return start, end, text(evs, start.Run)
}
