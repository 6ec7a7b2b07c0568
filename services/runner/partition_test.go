package runner

import (
	"context"
	"testing"
	"time"

	"jetway/pkg/bus"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
)

// pinOf reads the pin the server holds for work partition n ("" if none).
func (e *env) pinOf(n int) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := e.js.Consumer(ctx, bus.StreamWork, bus.WorkConsumerName(n))
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, g := range info.PriorityGroups {
		if g.Group == bus.WorkGroup {
			return g.PinnedClientID
		}
	}
	return ""
}

// A pin that lapses while its runner is alive moves the partition for
// nothing, and every move resets the consumer and redelivers held events.
func TestA_quiet_partition_keeps_its_pin_past_the_pinned_TTL(t *testing.T) {
	e := newEnv(t) // PinnedTTL 2s
	_, p := fakeModel(t, llmtest.Reply{Text: "ok"})
	e.startRunner("r1", p, nil)
	e.publish(events.KindEvents, "t1", "s1", events.Input{Text: "hi"})
	waitFor(t, "the run to end", 20*time.Second, func() bool {
		return countKind(e.records("t1", "s1"), RecordRunEnded) == 1
	})
	n := bus.PartitionFor("t1", "s1", 4)
	pin := e.pinOf(n)
	if pin == "" {
		t.Fatalf("partition %d has no pin after delivering an event", n)
	}
	// Watch the quiet partition for well over two pinned TTLs.
	until := time.Now().Add(5 * time.Second)
	for time.Now().Before(until) {
		if got := e.pinOf(n); got != pin {
			t.Fatalf("partition %d's pin moved from %q to %q while its runner was alive and the partition quiet", n, pin, got)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
