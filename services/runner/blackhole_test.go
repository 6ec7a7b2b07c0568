package runner

import (
	"strings"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
)

// A runner whose link to NATS is blackholed — sockets open, nothing
// forwarded — keeps its model call (HTTP, not NATS) going only until its
// lease runs out: it cancels the call before the other runner may recover
// the session, so the session is never at the model twice at once.
func TestA_runner_cut_off_from_NATS_cancels_its_model_call_before_the_session_is_recovered(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t, llmtest.Reply{Text: "never finished", StallAfter: 2}, llmtest.Reply{Text: "recovered"})
	link := testutil.StartBlackhole(t, strings.TrimPrefix(e.url, "nats://"))
	nc, _ := bustest.Connect(t, link.URL())
	r1 := e.run(Config{ID: "r1", NC: nc, Provider: p, IdleEvict: time.Minute})
	t.Cleanup(link.Mend) // before r1 stops: it leaves through the link
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "hi"})
	testutil.Eventually(t, 20*time.Second, "r1's run to be at the model", func() bool { return model.InFlight() == 1 })
	e.startRunner("r2", p, nil)

	link.Cut()
	testutil.Eventually(t, 30*time.Second, "r2 to recover the session and its run to end", func() bool {
		rec := e.session("t1", "s1")
		return rec.Runner == "r2" && rec.Cause == "recovered" && rec.State == StateIdle
	})
	if peak := model.PeakInFlight(); peak != 1 {
		t.Fatalf("%d calls of the session at the model at once, want 1: r1's call outlived its lease", peak)
	}
	if r1.group.LeaseHeld() {
		t.Fatal("r1 holds a lease though it is cut off")
	}
	if n := model.RequestCount(); n != 2 {
		t.Fatalf("model called %d times, want 2", n)
	}
}
