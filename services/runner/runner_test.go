package runner

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/events"
	"jetway/pkg/llm"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/llmtest"
)

// env is one embedded JetStream server with jetway provisioned on it.
type env struct {
	t   *testing.T
	url string // the server's client URL
	nc  *nats.Conn
	js  jetstream.JetStream
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := bustest.StartServerWith(t, 4)
	nc, js := bustest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: 4, WorkAckWait: 2 * time.Second, WorkPinnedTTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, url: srv.ClientURL(), nc: nc, js: js}
}

// startRunner runs a runner until the test ends.
func (e *env) startRunner(id string, p llm.Provider, tools func(SessionRef) []tool.Tool) *Runner {
	e.t.Helper()
	return e.run(Config{ID: id, Provider: p, Tools: tools, IdleEvict: time.Minute})
}

// run runs a runner configured by cfg until the test ends, on the env's
// connection unless cfg names one, logging warnings to the test.
func (e *env) run(cfg Config) *Runner {
	e.t.Helper()
	if cfg.NC == nil {
		cfg.NC = e.nc
	}
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.WarnLevel)
	ctx, cancel := context.WithCancel(context.Background())
	r, err := New(ctx, cfg)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			e.t.Error("runner did not stop within 15s")
		}
	})
	return r
}

// publish sends a host event and returns its CE id.
func (e *env) publish(kind events.Kind, tenant, session string, p events.Payload) string {
	e.t.Helper()
	ev, err := events.New(tenant, session, "test", p)
	if err != nil {
		e.t.Fatal(err)
	}
	var subj string
	if kind == events.KindJobEvents {
		subj, err = events.JobEventsSubject(tenant, session)
	} else {
		subj, err = events.EventsSubject(tenant, session)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return e.send(subj, ev)
}

// send publishes ev on subj, encoded as publishers do, and returns its CE id.
func (e *env) send(subj string, ev event.Event) string {
	e.t.Helper()
	msg, err := events.Encode(context.Background(), subj, ev)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.js.PublishMsg(context.Background(), msg); err != nil {
		e.t.Fatal(err)
	}
	return ev.ID()
}

// records reads a session's transcript. A cluster that is electing a
// leader answers "no responders" for a moment: reads retry within a bound.
func (e *env) records(tenant, session string) []Record {
	e.t.Helper()
	var recs []Record
	testutil.EventuallyNil(e.t, 20*time.Second, "the transcript of "+tenant+"/"+session, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		_, recs, err = loadTranscript(ctx, e.js, tenant, session)
		return err
	})
	return recs
}

func countKind(recs []Record, kind string) int {
	n := 0
	for _, r := range recs {
		if r.Kind == kind {
			n++
		}
	}
	return n
}

// deliveries counts how many recorded turns delivered each CE id.
func deliveries(recs []Record) map[string]int {
	n := map[string]int{}
	for _, r := range recs {
		if r.Message != nil {
			for _, id := range r.Message.Delivers {
				n[id]++
			}
		}
	}
	return n
}

func (e *env) session(tenant, session string) SessionRecord {
	e.t.Helper()
	kv, err := e.js.KeyValue(context.Background(), bus.BucketSessions)
	if err != nil {
		e.t.Fatal(err)
	}
	var rec SessionRecord
	testutil.EventuallyNil(e.t, 20*time.Second, "the session record of "+tenant+"/"+session, func() error {
		var err error
		rec, _, err = records{kv: kv}.get(context.Background(), tenant, session)
		return err
	})
	return rec
}

// gate is a tool that blocks until the test opens it, so a test can act
// while a run is provably mid-tool.
type gate struct {
	entered chan struct{}
	open    chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{entered: make(chan struct{}), open: make(chan struct{})} }

// waitEntered waits until a run is inside the gate's tool.
func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the run never reached its tool call")
	}
}

func (g *gate) tool() tool.Tool {
	return tool.Func{Name: "wait_for_gate", Description: "waits", Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
		g.once.Do(func() { close(g.entered) })
		select {
		case <-g.open:
			return tool.Result{Content: "gate opened"}, nil
		case <-ctx.Done():
			return tool.Result{}, ctx.Err()
		}
	}}
}

// fakeModel is a local Anthropic Messages API server driven through the
// official SDK: the only fake in these tests, at the model boundary.
func fakeModel(t *testing.T, replies ...llmtest.Reply) (*llmtest.Anthropic, llm.Provider) {
	t.Helper()
	srv := llmtest.NewAnthropic(t, replies...)
	p, err := anthropic.New(anthropic.Config{APIKey: "test-key", BaseURL: srv.URL(), Model: "claude-test"})
	if err != nil {
		t.Fatal(err)
	}
	return srv, p
}

func TestAn_idle_session_starts_a_run_with_the_event_as_its_input(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t, llmtest.Reply{Text: "hello there"})
	e.startRunner("r1", p, nil)
	id := e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "hi"})

	testutil.Eventually(t, 20*time.Second, "the run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})

	recs := e.records("t1", "s1")
	if got := deliveries(recs)[id]; got != 1 {
		t.Fatalf("event %s delivered %d times, want once", id, got)
	}
	msgs := history(recs)
	if len(msgs) != 2 || msgs[0].Text() != "hi" || msgs[1].Text() != "hello there" {
		t.Fatalf("history = %+v", msgs)
	}
	// The run's start and its first turn are one record, one append.
	var kinds []string
	for _, r := range recs {
		kinds = append(kinds, r.Kind)
	}
	if want := []string{RecordRunStarted, RecordMessage, RecordRunEnded}; !slices.Equal(kinds, want) {
		t.Fatalf("records %v, want %v", kinds, want)
	}
	if first := recs[0].Message; first == nil || first.Text() != "hi" || !slices.Equal(first.Delivers, []string{id}) {
		t.Fatalf("run_started carries %+v, want the run's first turn delivering %s", first, id)
	}
	if model.RequestCount() != 1 {
		t.Fatalf("model called %d times, want 1", model.RequestCount())
	}
	testutil.Eventually(t, 10*time.Second, "the session record to go idle", func() bool {
		return e.session("t1", "s1").State == StateIdle
	})

	if rec := e.session("t1", "s1"); rec.Runs != 1 || rec.Reason != "completed" {
		t.Fatalf("record = %+v", rec)
	}
}

func TestA_busy_session_hands_the_event_to_the_model_before_its_next_call(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	model, p := fakeModel(t,
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: "wait_for_gate", Input: `{}`}}},
		llmtest.Reply{Text: "the build passed"},
	)
	r := e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{g.tool()} })
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "run the build in the background"})
	g.waitEntered(t)
	jobID := e.publish(events.KindJobEvents, "t1", "s1", events.JobExited{ID: 3, Program: "gh", ExitStatus: 0, RunningForMS: 21 * 60 * 1000, Tail: "all checks passed", Status: events.StatusExited})
	e.waitNotice(r, "t1", "s1", jobID)
	close(g.open)
	testutil.Eventually(t, 20*time.Second, "the run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})

	reqs := model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model called %d times, want 2", len(reqs))
	}
	next := string(reqs[1].Body)
	if !strings.Contains(next, "[background job notice] job 3 (gh) exited 0 after 21m.") {
		t.Fatalf("the notice is not in the model's very next request:\n%s", next)
	}
	if strings.Contains(string(reqs[0].Body), "background job notice") {
		t.Fatal("the notice reached the model before the job exited")
	}
	recs := e.records("t1", "s1")
	if got := deliveries(recs)[jobID]; got != 1 {
		t.Fatalf("job event delivered %d times, want once", got)
	}
	if countKind(recs, RecordRunStarted) != 1 {
		t.Fatalf("a busy session started another run: %d runs", countKind(recs, RecordRunStarted))
	}
}

func TestA_job_event_on_the_events_subject_is_refused_and_recorded(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t)
	e.startRunner("r1", p, nil)
	// Forge: a job type published where tenants publish.
	ev, err := events.New("t1", "s1", "mallory", events.JobExited{ID: 1, Program: "rm", Status: events.StatusExited})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := events.EventsSubject("t1", "s1")
	msg, _ := events.Encode(context.Background(), subj, ev)
	if _, err := e.js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the refusal to be recorded", func() bool {
		return countKind(e.records("t1", "s1"), RecordRefused) == 1
	})

	recs := e.records("t1", "s1")
	for _, r := range recs {
		if r.Kind == RecordRefused && (r.Event != ev.ID() || !strings.Contains(r.Reason, "jobevents")) {
			t.Fatalf("refusal = %+v", r)
		}
	}
	if model.RequestCount() != 0 || countKind(recs, RecordRunStarted) != 0 {
		t.Fatal("a forged job event reached the model")
	}
	// Acked (terminated): nothing left pending on the work stream.
	testutil.Eventually(t, 10*time.Second, "the work stream to drain", func() bool {
		st, err := e.js.Stream(context.Background(), bus.WorkStream(0))
		if err != nil {
			return false
		}
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	})

}

func TestA_redelivered_event_reaches_the_model_once(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t, llmtest.Reply{Text: "one"}, llmtest.Reply{Text: "two"})
	e.startRunner("r1", p, nil)
	ev, _ := events.New("t1", "s1", "test", events.Input{Text: "once only"})
	subj, _ := events.EventsSubject("t1", "s1")
	msg, _ := events.Encode(context.Background(), subj, ev)
	if _, err := e.js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the first run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})

	// The same CE id again, past the stream's dedupe (a new Nats-Msg-Id), as
	// a publisher retrying after the dedupe window would send it.
	msg2, _ := events.Encode(context.Background(), subj, ev)
	msg2.Header.Set(jetstream.MsgIDHeader, "retry-"+ev.ID())
	if _, err := e.js.PublishMsg(context.Background(), msg2); err != nil {
		t.Fatal(err)
	}
	marker := e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "after"})
	testutil.Eventually(t, 20*time.Second, "the marker's run to end", func() bool {
		return deliveries(e.records("t1", "s1"))[marker] == 1 && countKind(e.records("t1", "s1"), RecordRunEnded) == 2
	})

	if got := deliveries(e.records("t1", "s1"))[ev.ID()]; got != 1 {
		t.Fatalf("event delivered %d times, want once", got)
	}
	if model.RequestCount() != 2 {
		t.Fatalf("model called %d times, want 2", model.RequestCount())
	}
}

// An actor's copy of its session record speaks only for a claim the
// compare-and-swap checks. Here the actor's copy says idle (its own run
// ended), then a runner that has since died leaves a run of the session
// behind: the sweep must have it recovered, not skipped as "already idle".
func TestA_dead_runner_s_run_is_recovered_by_an_actor_whose_copy_says_idle(t *testing.T) {
	e := newEnv(t)
	_, p := fakeModel(t, llmtest.Reply{Text: "first"}, llmtest.Reply{Text: "recovered"})
	r := e.startRunner("r1", p, nil)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "hi"})
	testutil.Eventually(t, 20*time.Second, "the first run to end and the session to go idle", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1 && e.session("t1", "s1").State == StateIdle
	})

	if r.sessions() != 1 {
		t.Fatalf("%d actors cached, want the session's (its copy of the record is the point)", r.sessions())
	}

	// A runner that is gone (no heartbeat) left a run of s1 running.
	e.rewriteSession(t, "t1", "s1", func(rec *SessionRecord) {
		rec.State, rec.Run, rec.Runner, rec.Incarnation, rec.Cause = StateRunning, "r-ghost", "ghost", "gone", "dispatch"
	})
	testutil.Eventually(t, 30*time.Second, "the dead runner's run to be recovered", func() bool {
		got := e.session("t1", "s1")
		return got.Run != "r-ghost" && got.Cause == "recovered"
	})

}

// The loop grows a session's history in the runner's own array while a run
// lasts (nothing is copied at run start), and the runner takes it back when
// the run ends: after runs with tool turns and a notice, the history the
// runner holds for the next run is, message for message, the transcript's.
func TestThe_history_a_runner_holds_between_runs_is_the_transcript_s(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	_, p := fakeModel(t,
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: "wait_for_gate", Input: `{}`}}},
		llmtest.Reply{Text: "first done"},
		llmtest.Reply{Text: "second done"},
		llmtest.Reply{Text: "third done"},
	)
	r := e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{g.tool()} })
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "one"})
	g.waitEntered(t)
	jobID := e.publish(events.KindJobEvents, "t1", "s1", events.JobExited{ID: 3, Program: "gh", ExitStatus: 0, RunningForMS: 1000, Status: events.StatusExited})
	e.waitNotice(r, "t1", "s1", jobID)
	close(g.open)
	for i, text := range []string{"two", "three"} {
		testutil.Eventually(t, 20*time.Second, "the run to end", func() bool {
			return countKind(e.records("t1", "s1"), RecordRunEnded) == i+1
		})

		testutil.Eventually(t, 10*time.Second, "the session to go idle", func() bool { return e.session("t1", "s1").State == StateIdle })
		e.publish(events.KindEvents, "t1", "s1", events.Input{Text: text})
	}
	testutil.Eventually(t, 20*time.Second, "the third run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 3
	})

	want := history(e.records("t1", "s1"))
	a := r.actorFor("t1", "s1", 0)
	testutil.Eventually(t, 10*time.Second, "the runner to take the last run's history back", func() bool {
		return a.holds(func(a *actor) bool { return a.run == nil && len(a.hist) == len(want) })
	})

	var got []llm.Message
	if !a.holds(func(a *actor) bool { got = slices.Clone(a.hist); return true }) {
		t.Fatal("the actor did not answer")
	}
	if len(want) < 8 {
		t.Fatalf("the transcript holds %d messages, want the three runs' turns, tool results and the notice", len(want))
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].Role != want[i].Role || got[i].Text() != want[i].Text() || len(got[i].Content) != len(want[i].Content) {
			t.Fatalf("message %d held as %s %s %q, the transcript has %s %s %q", i, got[i].ID, got[i].Role, got[i].Text(), want[i].ID, want[i].Role, want[i].Text())
		}
	}
}

// holds asks the actor's goroutine whether cond holds of its state: the
// state is the goroutine's alone, so a test asks it as anything else does.
func (a *actor) holds(cond func(a *actor) bool) bool {
	ok := make(chan bool, 1)
	if !a.send(func(a *actor) { ok <- cond(a) }) {
		return false
	}
	select {
	case v := <-ok:
		return v
	case <-time.After(10 * time.Second):
		return false
	}
}

// loadTranscript reads a session's transcript as a runner does, on a
// stream handle of its own.
func loadTranscript(ctx context.Context, js jetstream.JetStream, tenant, session string) (*transcript, []Record, error) {
	ts, err := openTranscripts(ctx, js)
	if err != nil {
		return nil, nil, err
	}
	return ts.load(ctx, tenant, session)
}

// A run's start record says who or what its first turn's events came
// from, so a person reading the history never sees a job's notice or an
// outside event as their own words.
func TestA_run_start_records_who_its_first_turn_came_from(t *testing.T) {
	e := newEnv(t)
	_, p := fakeModel(t, llmtest.Reply{Text: "noted"}, llmtest.Reply{Text: "noted"})
	e.startRunner("r1", p, nil)
	e.publish(events.KindJobEvents, "t1", "s1", events.JobExited{ID: 1, Program: "sleep", ExitStatus: 0, Status: events.StatusExited})
	testutil.Eventually(t, 20*time.Second, "the job's run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "and now me"})
	testutil.Eventually(t, 20*time.Second, "the person's run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 2
	})
	starts := runStarts(e.records("t1", "s1"))
	if len(starts) != 2 {
		t.Fatalf("%d run starts, want 2", len(starts))
	}
	for i, want := range []string{events.FromJob, events.FromPerson} {
		if from := starts[i].From; len(from) != 1 || from[0] != want {
			t.Errorf("run %d's first turn is recorded from %v, want [%s]", i+1, from, want)
		}
	}
}

// A record can name a run of the live runner's own incarnation that the
// runner does not have (a hand-back whose write failed, or a path nobody
// listed). Every other runner sees its runner alive and waits; so the
// runner's own sweep hands the session to its actor, which recovers it.
func TestA_record_naming_a_run_its_own_live_runner_does_not_have_is_recovered(t *testing.T) {
	e := newEnv(t)
	_, p := fakeModel(t, llmtest.Reply{Text: "first"}, llmtest.Reply{Text: "recovered"})
	r := e.startRunner("r1", p, nil)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "hi"})
	testutil.Eventually(t, 20*time.Second, "the first run to end and the session to go idle", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1 && e.session("t1", "s1").State == StateIdle
	})

	e.rewriteSession(t, "t1", "s1", func(rec *SessionRecord) {
		rec.State, rec.Run, rec.Runner, rec.Incarnation, rec.Cause = StateRunning, "r-lost", r.cfg.ID, r.inc(), "dispatch"
	})
	testutil.Eventually(t, 30*time.Second, "the run its own runner does not have to be recovered", func() bool {
		got := e.session("t1", "s1")
		return got.Run != "r-lost" && got.Cause == "recovered"
	})
}

// rewriteSession changes a session's record as a test's fault would: read,
// changed by change, written back by compare-and-swap.
func (e *env) rewriteSession(t *testing.T, tenant, session string, change func(*SessionRecord)) {
	t.Helper()
	kv, err := e.js.KeyValue(context.Background(), bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	recs := records{kv: kv}
	rec, rev, err := recs.get(context.Background(), tenant, session)
	if err != nil {
		t.Fatal(err)
	}
	change(&rec)
	if _, err := recs.put(context.Background(), rec, rev); err != nil {
		t.Fatal(err)
	}
}

// A refusal another runner's append fenced out is not this runner's to
// make: the event stays un-acked and is refused (and recorded) by whoever
// holds the session's transcript, never acked unrecorded.
func TestA_refusal_fenced_out_is_recorded_by_the_session_s_owner_not_dropped(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t, llmtest.Reply{Text: "hello"})
	r := e.startRunner("r1", p, nil)
	first := e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "hi"})
	testutil.Eventually(t, 20*time.Second, "the first run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1 && e.session("t1", "s1").State == StateIdle
	})
	testutil.Eventually(t, 10*time.Second, "the actor to hold the transcript", func() bool {
		a := e.actor(r, "t1", "s1")
		return a != nil && a.holds(func(a *actor) bool { _, ok := a.seen[first]; return ok && a.tr != nil })
	})
	// Another runner writes the transcript: this one's fence is stale.
	e.appendRecord("t1", "s1", Record{Kind: RecordBoundary, Runner: "r2"})

	forged, err := events.New("t1", "s1", "mallory", events.JobExited{ID: 1, Program: "rm", Status: events.StatusExited})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := events.EventsSubject("t1", "s1")
	e.send(subj, forged)
	testutil.Eventually(t, 20*time.Second, "the refusal to be recorded", func() bool {
		return refusal(e.records("t1", "s1"), forged.ID()) != ""
	})
	if n := countKind(e.records("t1", "s1"), RecordRefused); n != 1 {
		t.Fatalf("%d refusals recorded, want 1", n)
	}
	if model.RequestCount() != 1 {
		t.Fatalf("model called %d times, want 1", model.RequestCount())
	}
}
