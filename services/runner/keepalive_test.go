package runner

import (
	"context"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
)

// An event held as a notice through a model call longer than the work
// consumers' AckWait (2 s in these tests) is told "in progress" in time,
// though only events near their AckWait are told: the server never
// redelivers it, and the model reads it once.
func TestAn_event_held_past_its_AckWait_is_kept_in_hand_and_never_redelivered(t *testing.T) {
	e := newEnv(t)
	model, p := fakeModel(t, llmtest.Reply{Text: "slow", Latency: 5 * time.Second}, llmtest.Reply{Text: "read it"})
	e.startRunner("r1", p, nil)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "start"})
	testutil.Eventually(t, 20*time.Second, "the run's first model call", func() bool { return model.RequestCount() == 1 })
	notice := e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "meanwhile"})
	testutil.Eventually(t, 30*time.Second, "the notice delivered and the run ended", func() bool {
		recs := e.records("t1", "s1")
		return deliveries(recs)[notice] == 1 && countKind(recs, RecordRunEnded) == 1
	})
	info, err := e.workConsumer("t1", "s1").Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered != 0 {
		t.Errorf("%d events redelivered by the server: an event in hand was not kept so", info.NumRedelivered)
	}
	if n := model.RequestCount(); n != 2 {
		t.Errorf("model called %d times, want 2 (the notice read once)", n)
	}
}
