package e2e

import (
	"bytes"
	"slices"
	"testing"

	"jetway/pkg/client"
	"jetway/pkg/events"
)

// testResume drops a stream after the first run has begun, lets two more
// runs happen while disconnected, and resumes with Last-Event-ID: what was
// read before plus what the resumed stream gives must be exactly what a
// stream that never dropped saw — nothing missing, nothing twice.
func testResume(t *testing.T, d *devStack) {
	const session = "e2e-resume"
	c := d.client(t)
	whole := follow(t, c, session, client.StreamOptions{})
	first := follow(t, c, session, client.StreamOptions{})

	one := d.input(t, session, "one")
	first.until(t, runTimeout, "the first run's text begins", func(evs []client.Event) bool {
		return slices.ContainsFunc(evs, func(e client.Event) bool { return e.Type == events.TypeRunText })
	})
	first.close()
	before := first.snapshot()
	last := before[len(before)-1].ID

	// Each input waits for the run before it to end, so each starts a run
	// of its own (input that arrives mid-run joins that run as a notice).
	whole.runFor(t, one)
	whole.runFor(t, d.input(t, session, "two"))
	whole.runFor(t, d.input(t, session, "three"))
	want := whole.snapshot()

	resumed := follow(t, c, session, client.StreamOptions{LastEventID: last})
	after := resumed.until(t, runTimeout, "the resumed stream catches up", func(evs []client.Event) bool {
		return len(before)+len(evs) >= len(want)
	})
	got := append(slices.Clone(before), after...)
	seen := map[string]bool{}
	for _, e := range got {
		if seen[e.ID] {
			t.Errorf("event %s seen twice", e.ID)
		}
		seen[e.ID] = true
	}
	for i, w := range want {
		if g := got[i]; g.ID != w.ID || g.Type != w.Type || !bytes.Equal(g.Data, w.Data) {
			t.Fatalf("event %d: got %s %s %s, want %s %s %s\nbefore the drop:\n%sresumed:\n%sunbroken stream:\n%s",
				i, g.ID, g.Type, g.Data, w.ID, w.Type, w.Data, showEvents(before), showEvents(after), showEvents(want))
		}
	}
}
