package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/internal/testutil"
	"jetway/pkg/agent"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/events"
	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
)

// A tool result reaches run output whole: its call's name, and a summary
// that reads name(args) → result, from the loop's event alone.
func TestA_tool_result_on_run_output_names_its_call_and_arguments(t *testing.T) {
	e := newEnv(t)
	_, p := fakeModel(t,
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: "echo", Input: `{"text":"hi"}`}}},
		llmtest.Reply{Text: "done"},
	)
	echo := tool.Func{Name: "echo", Description: "echoes", Fn: func(context.Context, tool.Call) (tool.Result, error) {
		return tool.Result{Content: "said hi"}, nil
	}}
	subj, err := events.OutSubject("t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan *nats.Msg, 64)
	sub, err := e.nc.ChanSubscribe(subj, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{echo} })
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "say hi"})

	deadline := time.After(20 * time.Second)
	for {
		select {
		case m := <-out:
			if m.Header.Get("ce-type") != events.TypeToolResult {
				continue
			}
			var res events.ToolResult
			if err := json.Unmarshal(m.Data, &res); err != nil {
				t.Fatalf("tool_result %s: %v", m.Data, err)
			}
			if res.ID != "tu1" || res.Name != "echo" || res.Summary != `echo({"text":"hi"}) → said hi` {
				t.Fatalf("tool_result = %+v, want echo's id, name and echo({\"text\":\"hi\"}) → said hi", res)
			}
			return
		case <-deadline:
			t.Fatal("no tool_result on run output within 20s")
		}
	}
}

// words is n five-byte words, which llmtest streams one per chunk when
// asked for n chunks: chunk i is words(n)[5i:5i+5].
func words(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "w%03d ", i)
	}
	return b.String()
}

// outEvent is one run output event as a subscriber to jetway.out saw it.
type outEvent struct {
	typ  string
	text string // run.text's
}

// subscribeOut collects the run output of session t1/s1, in order.
func subscribeOut(t *testing.T, e *env) func() []outEvent {
	t.Helper()
	subj, err := events.OutSubject("t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []outEvent
	sub, err := e.nc.Subscribe(subj, func(m *nats.Msg) {
		ev := outEvent{typ: m.Header.Get("ce-type")}
		if ev.typ == events.TypeRunText {
			var x events.RunText
			if err := json.Unmarshal(m.Data, &x); err != nil {
				t.Errorf("run.text %s: %v", m.Data, err)
			}
			ev.text = x.Text
		}
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() []outEvent {
		mu.Lock()
		defer mu.Unlock()
		return append([]outEvent(nil), got...)
	}
}

// A model that streams its answer in many chunks reaches jetway.out in
// fewer run.text events, the first chunk alone and at once, the whole text
// before the tool call that follows it and the run's end after everything.
func TestStreamed_text_goes_out_coalesced_first_chunk_alone_and_in_order(t *testing.T) {
	e := newEnv(t)
	const chunks = 60
	text := words(chunks)
	_, p := fakeModel(t,
		llmtest.Reply{Text: text, Chunks: chunks, ToolCalls: []llmtest.ToolCall{{ID: "tu1", Name: "echo", Input: `{"text":"hi"}`}}},
		llmtest.Reply{Text: "done", Chunks: 1},
	)
	echo := tool.Func{Name: "echo", Description: "echoes", Fn: func(context.Context, tool.Call) (tool.Result, error) {
		return tool.Result{Content: "said hi"}, nil
	}}
	seen := subscribeOut(t, e)
	e.startRunner("r1", p, func(SessionRef) []tool.Tool { return []tool.Tool{echo} })
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "say hi"})
	testutil.Eventually(t, 20*time.Second, "run.ended on the session's output", func() bool {
		evs := seen()
		return len(evs) > 0 && evs[len(evs)-1].typ == events.TypeRunEnded
	})

	var before, after strings.Builder
	texts, toolAt := 0, -1
	evs := seen()
	for i, ev := range evs {
		switch ev.typ {
		case events.TypeToolUse:
			toolAt = i
		case events.TypeRunText:
			if toolAt < 0 {
				if texts == 0 && ev.text != text[:5] {
					t.Fatalf("first run.text = %q, want the first chunk %q alone", ev.text, text[:5])
				}
				texts++
				before.WriteString(ev.text)
			} else {
				after.WriteString(ev.text)
			}
		case events.TypeRunEnded:
			if i != len(evs)-1 {
				t.Fatalf("run.ended at %d of %d events: %+v", i, len(evs), evs)
			}
		}
	}
	if toolAt < 0 {
		t.Fatalf("no tool_use on the output: %+v", evs)
	}
	if before.String() != text {
		t.Fatalf("text before the tool_use = %q, want %q", before.String(), text)
	}
	if after.String() != "done" {
		t.Fatalf("text after the tool_use = %q, want %q", after.String(), "done")
	}
	if texts < 2 || texts >= chunks {
		t.Fatalf("%d run.text events for %d streamed chunks, want the first alone and the rest coalesced (2 to %d)", texts, chunks, chunks-1)
	}
}

// The first text of a turn is published while the model is still
// streaming: here the stream holds after its first chunk, and the chunk is
// on jetway.out all the same, alone. (That it goes out at once, not at the
// window's end, TestRunOutput_coalesces_text_between_other_events shows.)
func TestThe_first_text_of_a_turn_goes_out_before_the_rest_is_streamed(t *testing.T) {
	e := newEnv(t)
	text := words(10)
	// message_start, ping, content_block_start, the first text_delta: then
	// the stream holds until the client leaves.
	model, p := fakeModel(t, llmtest.Reply{Text: text, Chunks: 10, StallAfter: 4})
	seen := subscribeOut(t, e)
	e.startRunner("r1", p, nil)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "hi"})
	testutil.Eventually(t, 20*time.Second, "the first chunk on the session's output", func() bool {
		for _, ev := range seen() {
			if ev.typ == events.TypeRunText {
				return true
			}
		}
		return false
	})
	if n := model.InFlight(); n != 1 {
		t.Fatalf("%d model calls in flight, want the held stream's 1", n)
	}
	for _, ev := range seen() {
		if ev.typ == events.TypeRunText && ev.text != text[:5] {
			t.Fatalf("run.text %q while the stream holds after %q", ev.text, text[:5])
		}
	}
}

// runOutput, driven by hand: what goes out for each loop event, with a
// window that never ends within the test, so only the events and the size
// bound flush.
func TestRunOutput_coalesces_text_between_other_events(t *testing.T) {
	var got []string
	o := newRunOutput("r-1", time.Hour, func(p events.Payload) {
		switch x := p.(type) {
		case events.RunText:
			got = append(got, "text:"+x.Text)
		default:
			got = append(got, p.EventType())
		}
	})
	txt := func(s string) agent.Event { return agent.Event{Kind: agent.KindText, Text: s} }
	use := agent.Event{Kind: agent.KindToolUse, ToolUse: &llm.ContentBlock{Type: llm.BlockToolUse, ID: "tu1", Name: "echo"}}
	for _, ev := range []agent.Event{
		txt("a"), txt("b"), {Kind: agent.KindThinking, Text: "hm"}, txt("c"), use,
		txt("d"), txt("e"), {Kind: agent.KindUsage, Usage: &llm.Usage{}},
		txt("f"), txt("g"),
	} {
		o.event(ev)
	}
	o.close()
	o.event(txt("late")) // after close: nothing
	want := []string{"text:a", "text:bc", events.TypeToolUse, "text:d", "text:e", "text:f", "text:g"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("published %q, want %q", got, want)
	}

	got = nil
	o = newRunOutput("r-1", time.Hour, func(p events.Payload) { got = append(got, p.(events.RunText).Text) })
	big := strings.Repeat("x", textBound/2)
	for _, s := range []string{"first", big, big, "y"} {
		o.event(txt(s))
	}
	if len(got) != 2 || got[1] != big+big {
		t.Fatalf("after %d bytes gathered, published %d events; want the first and the bound's worth at once", 2*len(big), len(got))
	}
	o.close()
	if len(got) != 3 || got[2] != "y" {
		t.Fatalf("close published %q, want the rest, %q", got[2:], "y")
	}
}

// The window's end publishes what it gathered, with no other event to
// flush it.
func TestRunOutput_publishes_gathered_text_at_the_end_of_its_window(t *testing.T) {
	var mu sync.Mutex
	var got []string
	o := newRunOutput("r-1", time.Millisecond, func(p events.Payload) {
		mu.Lock()
		got = append(got, p.(events.RunText).Text)
		mu.Unlock()
	})
	defer o.close()
	for _, s := range []string{"a", "b", "c"} {
		o.event(agent.Event{Kind: agent.KindText, Text: s})
	}
	testutil.Eventually(t, 10*time.Second, "the gathered text to go out", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if got[0] != "a" || got[1] != "bc" {
		t.Fatalf("published %q, want [a bc]", got)
	}
}

// A refused recovery is told once it is stored, not once it is sent: its
// publish is tried again until JETWAY_OUT stores it (a NATS node stopping
// had answered the one publish "no response from stream", and a later
// person's input overwrote the record's reason: the refusal was nowhere),
// and the same refusal published again is stored once.
func TestA_refusal_is_published_until_stored_and_stored_once(t *testing.T) {
	s := bustest.StartServer(t)
	nc, js := bustest.Connect(t, s.ClientURL())
	r := &Runner{js: js, log: zerolog.New(zerolog.NewTestWriter(t))}
	subj, err := events.OutSubject("acme", "s1")
	if err != nil {
		t.Fatal(err)
	}
	// No stream stores the session's output yet; every try is seen here.
	tries := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(subj, tries)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.publishRefusal(ctx, "acme", "s1", "jetway.refused/r-1/x1", "r-1", "run r-1 was interrupted and not recovered: no"); err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-tries:
	case <-ctx.Done():
		t.Fatal("the refusal was never published")
	}
	// Now a stream stores it: the next try must land.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT_TEST", Subjects: []string{"jetway.out.>"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("publishRefusal did not return")
	}
	st, err := js.Stream(ctx, "OUT_TEST")
	if err != nil {
		t.Fatal(err)
	}
	stored := func() uint64 {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	if n := stored(); n != 1 {
		t.Fatalf("after publishRefusal returned the stream holds %d refusals, want 1", n)
	}
	// Published again (a retry whose first answer was lost, another
	// runner's refusal of the same run): still one.
	if err := r.publishRefusal(ctx, "acme", "s1", "jetway.refused/r-1/x1", "r-1", "run r-1 was interrupted and not recovered: no"); err != nil {
		t.Fatal(err)
	}
	if n := stored(); n != 1 {
		t.Fatalf("the same refusal published twice: the stream holds %d, want 1", n)
	}
	m, err := st.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get(events.HeaderMsgID); got != "jetway.refused/r-1/x1" {
		t.Errorf("the refusal's dedupe id is %q, want jetway.refused/r-1/x1", got)
	}
	if typ := m.Header.Get("ce-type"); typ != (events.RunRefused{}).EventType() {
		t.Errorf("stored a %q, want the refusal", typ)
	}
}

// refusals are the run.refused events JETWAY_OUT holds for a session, by
// dedupe id, with their reasons.
func (e *env) refusals(tenant, session string) map[string][]string {
	e.t.Helper()
	subj, err := events.OutSubject(tenant, session)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := e.js.OrderedConsumer(ctx, bus.StreamOut, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]string{}
	for n := info.NumPending; n > 0; {
		batch, err := c.Fetch(int(n), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			e.t.Fatal(err)
		}
		for m := range batch.Messages() {
			n--
			if m.Headers().Get("ce-type") != (events.RunRefused{}).EventType() {
				continue
			}
			var r events.RunRefused
			if err := json.Unmarshal(m.Data(), &r); err != nil {
				e.t.Fatalf("a run.refused that does not decode: %v", err)
			}
			id := m.Headers().Get(events.HeaderMsgID)
			out[id] = append(out[id], r.Reason)
		}
		if err := batch.Error(); err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}

// A runner that dies between recording a refusal and telling it leaves
// the record untold; the partition's next holder tells it, with no event
// for the session to wake it, and writes the record told. Before, the
// refusal was only in the record, which a person's next line overwrites.
func TestA_refusal_recorded_and_never_told_is_told_by_the_partition_s_next_holder(t *testing.T) {
	e := newEnv(t)
	reason := "run r-ghost was interrupted (its runner restarted) and not recovered: policy is never"
	e.putRecord(SessionRecord{Tenant: "t1", Session: "s1", State: StateInterrupted, Run: "r-ghost", Runner: "ghost",
		Incarnation: "gone", Since: time.Now().UTC(), Reason: reason, Untold: "jetway.refused/r-ghost/g1", Runs: 1})
	_, p := fakeModel(t)
	e.startRunner("r1", p, nil)
	testutil.Eventually(t, 20*time.Second, "the session record written told", func() bool {
		return e.session("t1", "s1").Untold == ""
	})
	got := e.refusals("t1", "s1")
	if len(got) != 1 || len(got["jetway.refused/r-ghost/g1"]) != 1 || got["jetway.refused/r-ghost/g1"][0] != reason {
		t.Fatalf("JETWAY_OUT holds refusals %q, want the one recorded, once", got)
	}
	if rec := e.session("t1", "s1"); rec.State != StateInterrupted || rec.Reason != reason {
		t.Fatalf("the told record is %+v, want it interrupted with its reason", rec)
	}
}

// A person's line sent to a session whose refusal was recorded and never
// told waits while the refusal cannot be stored: a run would overwrite
// the record's reason, and the refusal would be nowhere. Once JETWAY_OUT
// stores again, the refusal is told first, then the person's run starts.
func TestA_person_s_line_over_an_untold_refusal_waits_until_it_is_told(t *testing.T) {
	e := newEnv(t)
	wait := refusalPublishWait
	refusalPublishWait = 300 * time.Millisecond
	t.Cleanup(func() { refusalPublishWait = wait })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := e.js.Stream(ctx, bus.StreamOut)
	if err != nil {
		t.Fatal(err)
	}
	outCfg := out.CachedInfo().Config
	if err := e.js.DeleteStream(ctx, bus.StreamOut); err != nil {
		t.Fatal(err)
	}
	// Every try to tell is seen here while no stream stores it.
	subj, err := events.OutSubject("t1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	tries := make(chan time.Time, 1024)
	sub, err := e.nc.Subscribe(subj, func(*nats.Msg) { tries <- time.Now() })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	reason := "run r-ghost was interrupted (its runner restarted) and not recovered: policy is never"
	e.putRecord(SessionRecord{Tenant: "t1", Session: "s1", State: StateInterrupted, Run: "r-ghost", Runner: "ghost",
		Incarnation: "gone", Since: time.Now().UTC(), Reason: reason, Untold: "jetway.refused/r-ghost/g1", Runs: 1, Inputs: []string{"count the files"}})
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "going on"})
	e.startRunner("r1", p, nil)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "go on please"})
	// The line reaches the runner, and the telling keeps failing for two
	// of its bounds after that: a run would have started by then.
	testutil.Eventually(t, 20*time.Second, "the line to be delivered to the runner", func() bool {
		info, err := e.workConsumer("t1", "s1").Info(ctx)
		return err == nil && info.Delivered.Stream > 0
	})
	var first time.Time
	testutil.Eventually(t, 20*time.Second, "the telling to fail for twice its bound", func() bool {
		for {
			select {
			case at := <-tries:
				if first.IsZero() {
					first = at
				}
			default:
				return !first.IsZero() && time.Since(first) > 2*refusalPublishWait
			}
		}
	})
	if n := model.RequestCount(); n != 0 {
		t.Fatalf("the person's run called the model %d times while the refusal could not be told", n)
	}
	if rec := e.session("t1", "s1"); rec.State != StateInterrupted || rec.Untold == "" || rec.Reason != reason {
		t.Fatalf("while the refusal could not be told the record became %+v", rec)
	}

	if _, err := e.js.CreateStream(ctx, outCfg); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the person's run to end", func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1 && e.session("t1", "s1").State == StateIdle
	})
	if got := e.refusals("t1", "s1")["jetway.refused/r-ghost/g1"]; len(got) != 1 || got[0] != reason {
		t.Fatalf("JETWAY_OUT holds refusals %q for the run, want the recorded reason once", got)
	}
}
