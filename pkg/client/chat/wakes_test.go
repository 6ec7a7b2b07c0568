package chat

import (
	"context"
	"encoding/json"
	"testing"

	"jetway/pkg/client"
	"jetway/pkg/events"
)

// A job's headline comes from the notifier, which may read the job's
// event after the runner did: line mode must not wait for a run to take
// an event a run already took. It waited forever when the headline came
// second (the notifier reads the log, which copies the runner's shard).
func TestA_job_headline_after_the_run_that_took_its_event_owes_no_run(t *testing.T) {
	headline := func(id string) client.Event {
		data, _ := json.Marshal(events.HeadlineNote{Text: "job 1 (sleep) exited 0", About: events.TypeJobExited, Event: id})
		return client.Event{Type: events.TypeHeadline, Data: data}
	}
	owed := func(c *chat) (ids []any) {
		c.wakes.Range(func(k, _ any) bool { ids = append(ids, k); return true })
		return ids
	}
	ctx := context.Background()

	first := &chat{}
	first.track(ctx, headline("job-1"))
	if got := owed(first); len(got) != 1 {
		t.Fatalf("a headline before its run: owed %v, want the one job event", got)
	}
	first.taken([]string{"job-1"})
	if got := owed(first); len(got) != 0 {
		t.Fatalf("the run took it: still owed %v", got)
	}

	second := &chat{}
	second.taken([]string{"job-1"})
	second.track(ctx, headline("job-1"))
	if got := owed(second); len(got) != 0 {
		t.Fatalf("a headline after the run that took its event: owed %v, want nothing", got)
	}
}
