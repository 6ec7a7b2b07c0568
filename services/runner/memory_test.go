package runner

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
)

// TestIdle_sessions_cost_no_memory_once_evicted handles one event in each of
// many sessions, lets them go idle, and checks the runner holds no actor for
// any of them afterwards: memory follows live work, not the session count.
// JETWAY_IDLE_SESSIONS sets the count (default 300, kept small because every
// session is a whole run under the race detector; `jetway bench` measures
// bytes per idle session at 10,000).
func TestIdle_sessions_cost_no_memory_once_evicted(t *testing.T) {
	n := 300
	if v, err := strconv.Atoi(os.Getenv("JETWAY_IDLE_SESSIONS")); err == nil && v > 0 {
		n = v
	}
	if testing.Short() {
		n = 100
	}
	e := newEnv(t)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "ok"})
	model.SetRecording(false)
	r := e.run(Config{ID: "r1", Provider: p, IdleEvict: 500 * time.Millisecond, KeepAlive: 250 * time.Millisecond})

	for i := range n {
		ev, err := events.New("t1", fmt.Sprintf("s%05d", i), "test", events.Input{Text: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		subj, _ := events.EventsSubject("t1", fmt.Sprintf("s%05d", i))
		msg, _ := events.Encode(context.Background(), subj, ev)
		if _, err := e.js.PublishMsg(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 5*time.Minute, "every session's run to end and the work stream to drain", func() bool {
		st, err := e.js.Stream(context.Background(), bus.WorkStream(0))
		if err != nil {
			return false
		}
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs == 0 && model.RequestCount() >= n
	})

	testutil.Eventually(t, 60*time.Second, "idle sessions to be evicted", func() bool { return r.sessions() == 0 })
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("%d sessions handled; %d actors held; heap in use %d KiB", n, r.sessions(), ms.HeapInuse/1024)
	if model.RequestCount() != n {
		t.Fatalf("model called %d times for %d sessions", model.RequestCount(), n)
	}
}

// An idle session keeps its cached state until eviction, but no goroutine:
// thousands of idle sessions must not mean thousands of goroutines and
// tickers.
func TestAn_idle_session_holds_no_goroutine(t *testing.T) {
	const n = 50
	e := newEnv(t)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "ok"})
	model.SetRecording(false)
	r := e.run(Config{ID: "r1", Provider: p, IdleEvict: time.Hour})

	for i := range n {
		session := fmt.Sprintf("g%03d", i)
		ev, err := events.New("t1", session, "test", events.Input{Text: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		subj, _ := events.EventsSubject("t1", session)
		msg, _ := events.Encode(context.Background(), subj, ev)
		if _, err := e.js.PublishMsg(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, time.Minute, "every session's run to end", func() bool { return model.RequestCount() >= n && r.sessions() == n })
	testutil.Eventually(t, 30*time.Second, "every idle session's goroutine to end", func() bool { return r.goroutines() == 0 })
	if got := r.sessions(); got != n {
		t.Fatalf("%d sessions cached after they went idle, want %d (eviction is an hour away)", got, n)
	}
	// A parked actor wakes for its next event.
	ev, err := events.New("t1", "g000", "test", events.Input{Text: "again"})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := events.EventsSubject("t1", "g000")
	msg, _ := events.Encode(context.Background(), subj, ev)
	if _, err := e.js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the parked session to handle its next event", func() bool { return model.RequestCount() >= n+1 })
}

// TestTen_thousand_idle_sessions_cost_at_most_16_KiB_each holds the goal the
// bench measures, as a test: 10,000 sessions each handle an event and go
// idle with everything cached (eviction an hour away, the worst case), and
// the live heap grows by at most 16 KiB per session. The heap includes the
// embedded server's per-subject state for each session's transcript,
// record and work subjects, so the bound is on more than the runner.
// JETWAY_IDLE_SESSIONS sets the count; -short uses 1000.
func TestTen_thousand_idle_sessions_cost_at_most_16_KiB_each(t *testing.T) {
	const perSession = 16 << 10
	n := 10000
	if testing.Short() {
		n = 1000
	}
	if v, err := strconv.Atoi(os.Getenv("JETWAY_IDLE_SESSIONS")); err == nil && v > 0 {
		n = v
	}
	e := newEnv(t)
	model, p := fakeModel(t)
	model.SetFallback(llmtest.Reply{Text: "ok"})
	model.SetRecording(false)
	r := e.run(Config{ID: "r1", Provider: p, IdleEvict: time.Hour})

	publish := func(session string) {
		t.Helper()
		ev, err := events.New("t1", session, "test", events.Input{Text: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		subj, _ := events.EventsSubject("t1", session)
		msg, _ := events.Encode(context.Background(), subj, ev)
		if _, err := e.js.PublishMsgAsync(msg); err != nil {
			t.Fatal(err)
		}
	}
	settled := func(sessions int) func() bool {
		return func() bool {
			return model.RequestCount() >= sessions && r.sessions() == sessions && r.goroutines() == 0
		}
	}
	// One session first, so the heap is weighed from a warm runner.
	publish("warm")
	testutil.Eventually(t, time.Minute, "the warm-up session's run to end", settled(1))
	heap0 := liveHeap()

	// In batches, so the test measures idle sessions, not a backlog.
	const batch = 500
	for from := 0; from < n; from += batch {
		to := min(from+batch, n)
		for i := from; i < to; i++ {
			publish(fmt.Sprintf("s%05d", i))
		}
		select {
		case <-e.js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			t.Fatalf("publishes of sessions %d–%d not acknowledged within a minute", from, to)
		}
		testutil.Eventually(t, 5*time.Minute, fmt.Sprintf("sessions %d–%d to run and go idle", from, to), settled(1+to))
	}
	heap1 := liveHeap()
	per := (float64(heap1) - float64(heap0)) / float64(n)
	t.Logf("%d idle sessions cached: live heap %d → %d KiB, %.1f KiB per session", n, heap0>>10, heap1>>10, per/1024)
	if per > perSession {
		t.Fatalf("%.1f KiB of live heap per idle session with %d of them, want at most %d KiB", per/1024, n, perSession>>10)
	}
}

// liveHeap is the heap still in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
