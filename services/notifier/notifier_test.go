package notifier

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/events"
)

const waitFor = 10 * time.Second

// env is one embedded JetStream server with jetway's streams provisioned.
type env struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func newEnv(t *testing.T) env {
	t.Helper()
	s := bustest.StartServerWith(t, 2)
	nc, js := bustest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: 2}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	return env{nc: nc, js: js}
}

func testConfig(nc *nats.Conn, hooks Webhooks) Config {
	return Config{
		Conn:        nc,
		Webhooks:    hooks,
		AckWait:     2 * time.Second,
		Retry:       Retry{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond, Attempts: 3},
		HTTPTimeout: 2 * time.Second,
		// The receivers here are httptest servers on loopback, which the
		// notifier refuses unless the operator allows the host.
		WebhookAllowHosts: []string{"127.0.0.1"},
	}
}

// start runs a notifier until the returned stop is called (or the test ends)
// and waits until it is ready.
func start(t *testing.T, cfg Config) (*Notifier, func()) {
	t.Helper()
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(waitFor):
				t.Error("notifier did not stop")
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-n.Ready():
	case err := <-done:
		t.Fatalf("Run ended before ready: %v", err)
	case <-time.After(waitFor):
		t.Fatal("notifier not ready")
	}
	return n, stop
}

func publish(t *testing.T, js jetstream.JetStream, subject string, tenant, session string, p events.Payload) string {
	t.Helper()
	e, err := events.New(tenant, session, "test/source", p)
	if err != nil {
		t.Fatalf("new event: %v", err)
	}
	publishEvent(t, js, subject, e, "")
	return e.ID()
}

func publishEvent(t *testing.T, js jetstream.JetStream, subject string, e event.Event, msgID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	m, err := events.Encode(ctx, subject, e)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	if msgID != "" {
		m.Header.Set(events.HeaderMsgID, msgID)
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("publish on %s: %v", subject, err)
	}
}

func jobEventsSubject(t *testing.T, tenant, session string) string {
	s, err := events.JobEventsSubject(tenant, session)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func outSubject(t *testing.T, tenant, session string) string {
	s, err := events.OutSubject(tenant, session)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// headlines waits until the notify subject of tenant/session holds want
// headlines and returns them in order; it fails on a timeout.
func headlines(t *testing.T, js jetstream.JetStream, tenant, session string, want int) []events.HeadlineNote {
	t.Helper()
	subj, _ := events.NotifySubject(tenant, session)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for {
		cons, err := js.OrderedConsumer(ctx, bus.StreamOut, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
		if err != nil {
			t.Fatalf("ordered consumer: %v", err)
		}
		var out []events.HeadlineNote
		for {
			m, err := cons.Next(jetstream.FetchMaxWait(100 * time.Millisecond))
			if err != nil {
				break
			}
			e, err := events.ReadEvent(m.Headers(), m.Data())
			if err != nil {
				t.Fatalf("read headline event: %v", err)
			}
			if e.Type() != events.TypeHeadline || e.Subject() != tenant+"/"+session {
				t.Errorf("headline event type %q subject %q", e.Type(), e.Subject())
			}
			var hn events.HeadlineNote
			if err := json.Unmarshal(e.Data(), &hn); err != nil {
				t.Fatalf("headline data: %v", err)
			}
			out = append(out, hn)
		}
		if len(out) >= want {
			return out
		}
		if ctx.Err() != nil {
			t.Fatalf("have %d headlines on %s, want %d: %+v", len(out), subj, want, out)
		}
	}
}

func TestJob_exited_event_becomes_its_headline_on_the_notify_subject(t *testing.T) {
	e := newEnv(t)
	start(t, testConfig(e.nc, nil))
	id := publish(t, e.js, jobEventsSubject(t, "default", "s1"), "default", "s1", events.JobExited{
		ID: 3, Program: "gh", ExitStatus: 0, RunningForMS: (21*60 + 5) * 1000, Tail: "all checks passed\n", Status: events.StatusExited,
	})
	got := headlines(t, e.js, "default", "s1", 1)
	want := events.HeadlineNote{Text: "job 3 (gh) exited 0 after 21m", About: events.TypeJobExited, Event: id}
	if got[0] != want {
		t.Fatalf("headline = %+v, want %+v", got[0], want)
	}
}

func TestOverdue_job_reads_still_running(t *testing.T) {
	e := newEnv(t)
	start(t, testConfig(e.nc, nil))
	publish(t, e.js, jobEventsSubject(t, "default", "s1"), "default", "s1", events.JobOverdue{ID: 7, Program: "make", RunningForMS: 600000})
	if got := headlines(t, e.js, "default", "s1", 1)[0].Text; got != "job 7 (make) still running after 10m" {
		t.Fatalf("headline = %q", got)
	}
}

func TestA_sub_agent_s_end_and_a_task_report_have_their_own_headlines(t *testing.T) {
	e := newEnv(t)
	start(t, testConfig(e.nc, nil))
	agents, err := events.AgentEventsSubject("default", "p1")
	if err != nil {
		t.Fatal(err)
	}
	// The child's work is no headline; its end is, on the parent's.
	publish(t, e.js, agents, "default", "p1", events.AgentInput{Text: "review it", Parent: "p0"})
	publish(t, e.js, agents, "default", "p1", events.AgentFinished{Child: "p1-a2", Agent: "reviewer", Number: 2, Run: "r-1", Reason: "completed", RunningForMS: 180000})
	publish(t, e.js, jobEventsSubject(t, "default", "p1"), "default", "p1", events.JobNotice{ID: 4, Program: "watch", Text: "ci is green", RunningForMS: 1000})
	var texts []string
	for _, h := range headlines(t, e.js, "default", "p1", 2) {
		texts = append(texts, h.Text)
	}
	if got := strings.Join(texts, "\n"); got != "agent 2 (reviewer) finished after 3m\njob 4 (watch) reports: ci is green" &&
		got != "job 4 (watch) reports: ci is green\nagent 2 (reviewer) finished after 3m" {
		t.Fatalf("headlines:\n%s", got)
	}
}

func TestRun_lifecycle_and_refusals_are_one_liners_and_text_is_not_a_headline(t *testing.T) {
	e := newEnv(t)
	start(t, testConfig(e.nc, nil))
	out := outSubject(t, "default", "s1")
	publish(t, e.js, out, "default", "s1", events.RunStarted{Run: "r-1a2b", Cause: "dispatch", Model: "script demo.json"})
	publish(t, e.js, out, "default", "s1", events.RunText{Run: "r-1a2b", Text: "Hello"})
	publish(t, e.js, out, "default", "s1", events.ToolUse{Run: "r-1a2b", ID: "t1", Name: "shell"})
	publish(t, e.js, out, "default", "s1", events.ToolResult{Run: "r-1a2b", ID: "t1", Name: "shell", Summary: "ok"})
	publish(t, e.js, out, "default", "s1", events.RunEnded{Run: "r-1a2b", Reason: "completed", Turns: 3, ElapsedMS: 12000})
	publish(t, e.js, out, "default", "s1", events.RunRefused{Type: "io.jetway.job.exited", Reason: "forged on jetway.events"})

	got := headlines(t, e.js, "default", "s1", 3)
	var texts []string
	for _, h := range got {
		texts = append(texts, h.Text)
	}
	want := []string{
		events.RunStartedHeadline(events.RunStarted{Run: "r-1a2b", Cause: "dispatch", Model: "script demo.json"}),
		"run r-1a2b completed after 3 turns in 12s",
		"refused io.jetway.job.exited: forged on jetway.events",
	}
	if strings.Join(texts, "\n") != strings.Join(want, "\n") {
		t.Fatalf("headlines:\n%s\nwant:\n%s", strings.Join(texts, "\n"), strings.Join(want, "\n"))
	}
	if len(got) != 3 {
		t.Errorf("%d headlines, want 3 (text and tool events are not headlines)", len(got))
	}
}

// receiver is a webhook endpoint that checks every signature and answers
// with status(n) for its n-th request (1-based).
type receiver struct {
	t      *testing.T
	secret string
	status func(n int) int

	mu    sync.Mutex
	calls int
	ok    map[string]int // CE id → successful deliveries
	bad   int            // requests with a wrong signature
	got   chan string    // CE ids of successful deliveries
	tried chan struct{}  // one per request, dropped when full
}

func newReceiver(t *testing.T, secret string, status func(n int) int) (*receiver, string) {
	r := &receiver{t: t, secret: secret, status: status, ok: map[string]int{}, got: make(chan string, 100), tried: make(chan struct{}, 100)}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.calls++
	n := r.calls
	select {
	case r.tried <- struct{}{}:
	default:
	}
	if VerifyV1(r.secret, req.Header.Get(TimestampHeader), req.Header.Get(SignatureV1Header), body, time.Now(), 0) != nil {
		r.bad++
		r.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	r.mu.Unlock()
	st := r.status(n)
	if st/100 == 2 {
		var ce struct {
			ID   string              `json:"id"`
			Type string              `json:"type"`
			Data events.HeadlineNote `json:"data"`
		}
		if err := json.Unmarshal(body, &ce); err != nil || ce.Type != events.TypeHeadline || ce.Data.Text == "" {
			r.t.Errorf("webhook body is not a headline CloudEvent: %v %s", err, body)
		}
		r.mu.Lock()
		r.ok[ce.ID]++
		r.mu.Unlock()
		r.got <- ce.ID
	}
	w.WriteHeader(st)
}

func (r *receiver) wait(t *testing.T) string {
	t.Helper()
	select {
	case id := <-r.got:
		return id
	case <-time.After(waitFor):
		t.Fatal("webhook not delivered")
		return ""
	}
}

func (r *receiver) snapshot() (calls, bad int, ok map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := map[string]int{}
	for k, v := range r.ok {
		c[k] = v
	}
	return r.calls, r.bad, c
}

func TestWebhook_is_retried_until_it_succeeds_and_signed_each_time(t *testing.T) {
	e := newEnv(t)
	rcv, url := newReceiver(t, "s3cret", func(n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	start(t, testConfig(e.nc, Webhooks{"default": {{URL: url, Secret: "s3cret"}}}))
	publish(t, e.js, jobEventsSubject(t, "default", "s1"), "default", "s1", events.JobExited{ID: 3, Program: "gh", RunningForMS: 1000})
	rcv.wait(t)
	calls, bad, ok := rcv.snapshot()
	if calls != 3 || bad != 0 || len(ok) != 1 {
		t.Fatalf("calls %d (want 3: two failures, one success), bad signatures %d, delivered %v", calls, bad, ok)
	}
}

func TestWebhook_types_filter_picks_the_headlines_a_hook_gets(t *testing.T) {
	e := newEnv(t)
	rcv, url := newReceiver(t, "k", func(int) int { return http.StatusOK })
	start(t, testConfig(e.nc, Webhooks{"default": {{URL: url, Secret: "k", Types: []string{"io.jetway.run.*"}}}}))
	publish(t, e.js, jobEventsSubject(t, "default", "s1"), "default", "s1", events.JobExited{ID: 1, Program: "ls", RunningForMS: 1})
	publish(t, e.js, outSubject(t, "default", "s1"), "default", "s1", events.RunEnded{Run: "r1", Reason: "completed", Turns: 1})
	headlines(t, e.js, "default", "s1", 2) // both made headlines…
	rcv.wait(t)
	calls, _, _ := rcv.snapshot()
	if calls != 1 { // …but only the run one was posted
		t.Fatalf("webhook calls = %d, want 1", calls)
	}
}

func TestWebhook_that_always_fails_becomes_a_listed_dead_letter(t *testing.T) {
	e := newEnv(t)
	rcv, url := newReceiver(t, "k", func(int) int { return http.StatusInternalServerError })
	n, _ := start(t, testConfig(e.nc, Webhooks{"default": {{URL: url, Secret: "k"}}}))
	id := publish(t, e.js, jobEventsSubject(t, "default", "s1"), "default", "s1", events.JobExited{ID: 3, Program: "gh", ExitStatus: 1, RunningForMS: 1000})

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var dls []DeadLetter
	for len(dls) == 0 {
		var err error
		if dls, err = n.DeadLetters(ctx, "default"); err != nil {
			t.Fatalf("DeadLetters: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("no dead letter")
		}
	}
	dl := dls[0]
	if len(dls) != 1 || dl.URL != url || dl.Attempts != 3 || dl.Headline != "job 3 (gh) exited 1 after 1s" ||
		!strings.Contains(dl.LastError, "500") || dl.Session != "s1" {
		t.Fatalf("dead letters = %+v", dls)
	}
	if calls, _, _ := rcv.snapshot(); calls != 3 {
		t.Errorf("webhook calls = %d, want 3", calls)
	}
	var body struct {
		Data events.HeadlineNote `json:"data"`
	}
	if err := json.Unmarshal(dl.Body, &body); err != nil || body.Data.Event != id {
		t.Errorf("dead letter body = %s (%v)", dl.Body, err)
	}

	// The same list over NATS, for `nats req` and other services.
	msg, err := e.nc.Request(SubjectDeadLetters, []byte(`{"tenant":"default"}`), waitFor)
	if err != nil {
		t.Fatalf("request %s: %v", SubjectDeadLetters, err)
	}
	var list DeadLetterList
	if err := json.Unmarshal(msg.Data, &list); err != nil || len(list.DeadLetters) != 1 || list.DeadLetters[0].ID != dl.ID {
		t.Fatalf("micro answer %s (%v)", msg.Data, err)
	}
	// Other tenants see none of them.
	if other, err := n.DeadLetters(ctx, "acme"); err != nil || len(other) != 0 {
		t.Errorf("acme dead letters = %v, %v", other, err)
	}
}

func TestDeadLettersHandler_answers_the_callers_tenant_only(t *testing.T) {
	e := newEnv(t)
	n, _ := start(t, testConfig(e.nc, nil))
	h := n.DeadLettersHandler(func(r *http.Request) (string, error) {
		if r.Header.Get("Authorization") != "Bearer good" {
			return "", fmt.Errorf("the bearer token is not valid")
		}
		return "default", nil
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("Authorization", "Bearer good")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != `{"dead_letters":[]}` {
		t.Fatalf("good token: %d %s", resp.StatusCode, b)
	}
	resp, err = http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", resp.StatusCode)
	}
}

func TestRedelivered_event_makes_one_headline_and_one_webhook_post(t *testing.T) {
	e := newEnv(t)
	rcv, url := newReceiver(t, "k", func(int) int { return http.StatusOK })
	start(t, testConfig(e.nc, Webhooks{"default": {{URL: url, Secret: "k"}}}))
	subj := jobEventsSubject(t, "default", "s1")
	ev, err := events.New("default", "s1", "test/jobs", events.JobExited{ID: 3, Program: "gh", RunningForMS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	// The same CloudEvent twice, stored twice (a different Nats-Msg-Id gets
	// past the stream's dedupe): the notifier sees it as a redelivery would
	// look.
	publishEvent(t, e.js, subj, ev, "")
	publishEvent(t, e.js, subj, ev, "again-"+ev.ID())
	marker := publish(t, e.js, subj, "default", "s1", events.JobExited{ID: 4, Program: "ls", RunningForMS: 1})

	hs := headlines(t, e.js, "default", "s1", 2)
	if hs[len(hs)-1].Event != marker {
		t.Fatalf("last headline is about %s, want the marker %s: %+v", hs[len(hs)-1].Event, marker, hs)
	}
	if len(hs) != 2 || hs[0].Event != ev.ID() {
		t.Fatalf("headlines = %+v, want one for %s and one for the marker", hs, ev.ID())
	}
	rcv.wait(t)
	rcv.wait(t)
	_, _, ok := rcv.snapshot()
	if len(ok) != 2 {
		t.Fatalf("webhook deliveries = %v, want one per distinct headline", ok)
	}
	for id, n := range ok {
		if n != 1 {
			t.Errorf("headline %s posted %d times", id, n)
		}
	}
}

func TestPending_webhook_survives_a_notifier_restart(t *testing.T) {
	e := newEnv(t)
	var up sync.Mutex
	healthy := false
	rcv, url := newReceiver(t, "k", func(int) int {
		up.Lock()
		defer up.Unlock()
		if healthy {
			return http.StatusOK
		}
		return http.StatusBadGateway
	})
	cfg := testConfig(e.nc, Webhooks{"default": {{URL: url, Secret: "k"}}})
	cfg.Retry = Retry{Base: 200 * time.Millisecond, Max: time.Second, Attempts: 50}
	_, stop := start(t, cfg)
	publish(t, e.js, jobEventsSubject(t, "default", "s1"), "default", "s1", events.JobExited{ID: 3, Program: "gh", RunningForMS: 1000})

	// Wait for a failed try, then stop the notifier with the delivery pending.
	select {
	case <-rcv.tried:
	case <-time.After(waitFor):
		t.Fatal("webhook never tried")
	}
	stop()
	up.Lock()
	healthy = true
	up.Unlock()

	start(t, cfg)
	rcv.wait(t)
	if _, _, ok := rcv.snapshot(); len(ok) != 1 {
		t.Fatalf("deliveries = %v", ok)
	}
}

func TestRetry_delay_doubles_up_to_its_max(t *testing.T) {
	r := Retry{Base: time.Second, Max: 5 * time.Second}
	var got []time.Duration
	for i := 1; i <= 5; i++ {
		got = append(got, r.Delay(i))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delays %v, want %v", got, want)
	}
}

func TestLoadWebhooks_refuses_a_file_others_can_read_and_bad_entries(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := `{"default":[{"url":"https://example.com/h","secret":"k","types":["io.jetway.job.*"]}]}`
	ws, err := LoadWebhooks(write("ok.json", good, 0o600))
	if err != nil || len(ws["default"]) != 1 || !ws["default"][0].Wants("io.jetway.job.exited") || ws["default"][0].Wants("io.jetway.run.ended") {
		t.Fatalf("good file: %+v, %v", ws, err)
	}
	if _, err := LoadWebhooks(write("open.json", good, 0o644)); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable file: %v", err)
	}
	for name, body := range map[string]string{
		"nosecret.json": `{"default":[{"url":"https://example.com/h"}]}`,
		"badurl.json":   `{"default":[{"url":"ftp://x","secret":"k"}]}`,
		"badten.json":   `{"a.b":[{"url":"https://example.com/h","secret":"k"}]}`,
		"unknown.json":  `{"default":[{"url":"https://example.com/h","secret":"k","typo":1}]}`,
	} {
		if _, err := LoadWebhooks(write(name, body, 0o600)); err == nil {
			t.Errorf("%s: accepted %s", name, body)
		}
	}
}

func TestSignature_is_the_hex_HMAC_of_the_body(t *testing.T) {
	// echo -n 'hello' | openssl dgst -sha256 -hmac key
	const want = "sha256=9307b3b915efb5171ff14d8cb55fbcc798c6c0ef1456d66ded1a6aa723a58b7b"
	if got := Sign("key", []byte("hello")); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	if !VerifySignature("key", []byte("hello"), want) || VerifySignature("other", []byte("hello"), want) {
		t.Fatal("VerifySignature disagrees with Sign")
	}
}

func TestGround_Stop_of_a_session_is_announced_on_and_lifted(t *testing.T) {
	e := newEnv(t)
	start(t, testConfig(e.nc, nil))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	kv, err := e.js.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := groundstop.Set(ctx, kv, "default", "s1", groundstop.Record{Reason: "incident 42", By: "default"}); err != nil {
		t.Fatal(err)
	}
	if err := groundstop.Clear(ctx, kv, "default", "s1"); err != nil {
		t.Fatal(err)
	}
	got := headlines(t, e.js, "default", "s1", 2)
	if got[0].Text != "Ground Stop on: incident 42 (set by default)" || got[1].Text != "Ground Stop lifted" ||
		got[0].About != events.TypeGroundStop {
		t.Fatalf("headlines = %+v", got)
	}
}

func TestGround_Stop_already_on_when_the_notifier_starts_is_not_announced_again(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	kv, err := e.js.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := groundstop.Set(ctx, kv, "default", "old", groundstop.Record{Reason: "before start", By: "default"}); err != nil {
		t.Fatal(err)
	}
	start(t, testConfig(e.nc, nil))
	// A tenant's switch names no one session: logged, no headline.
	if _, err := groundstop.Set(ctx, kv, "default", "", groundstop.Record{Reason: "whole tenant", By: "default"}); err != nil {
		t.Fatal(err)
	}
	if _, err := groundstop.Set(ctx, kv, "default", "new", groundstop.Record{Reason: "after start", By: "default"}); err != nil {
		t.Fatal(err)
	}
	if got := headlines(t, e.js, "default", "new", 1); got[0].Text != "Ground Stop on: after start (set by default)" {
		t.Fatalf("headlines of the switch set after start = %+v", got)
	}
	// Changes are told in order: had the old switch been announced, its
	// headline would be stored before the new one's.
	if got := headlines(t, e.js, "default", "old", 0); len(got) != 0 {
		t.Fatalf("the switch already on at start was announced: %+v", got)
	}
}

func TestA_run_waiting_for_a_person_is_a_headline_naming_the_approval_to_decide(t *testing.T) {
	e := newEnv(t)
	start(t, testConfig(e.nc, nil))
	out := outSubject(t, "default", "s1")
	publish(t, e.js, out, "default", "s1", events.ApprovalRequested{Approval: "ap-1", Run: "r-1", Kind: "tool", Tool: "shell",
		Input: json.RawMessage(`{"command":"make deploy"}`), ExpiresAt: time.Now().Add(time.Hour)})
	got := headlines(t, e.js, "default", "s1", 1)
	if got[0].Approval != "ap-1" || got[0].About != events.TypeApprovalRequested ||
		got[0].Text != `waits for a person's approval: shell {"command":"make deploy"} (approval ap-1)` {
		t.Fatalf("headline = %+v", got[0])
	}
}
