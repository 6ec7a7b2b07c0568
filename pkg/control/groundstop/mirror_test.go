package groundstop_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"jetway/internal/testutil"
	"jetway/pkg/control/groundstop"
)

// changes collects what a Mirror reports.
type changes struct {
	mu  sync.Mutex
	all []groundstop.Change
}

func (c *changes) note(ch groundstop.Change) {
	c.mu.Lock()
	c.all = append(c.all, ch)
	c.mu.Unlock()
}

func (c *changes) waitLen(t *testing.T, n int) []groundstop.Change {
	t.Helper()
	var got []groundstop.Change
	testutil.EventuallyNil(t, 10*time.Second, fmt.Sprintf("%d changes", n), func() error {
		c.mu.Lock()
		got = append([]groundstop.Change(nil), c.all...)
		c.mu.Unlock()
		if len(got) < n {
			return fmt.Errorf("got %+v", got)
		}
		return nil
	})
	return got
}

func TestMirror_holds_the_switches_on_at_start_when_ready_and_answers_by_scope(t *testing.T) {
	kv := bucket(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := groundstop.Set(ctx, kv, "acme", "", groundstop.Record{Reason: "acme bill", By: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "groundstop.globex.s1", "stop by hand"); err != nil {
		t.Fatal(err)
	}
	var seen changes
	m := groundstop.StartMirror(ctx, kv, zerolog.Nop(), seen.note)
	waitCtx, done := context.WithTimeout(ctx, 10*time.Second)
	defer done()
	if err := m.WaitReady(waitCtx); err != nil {
		t.Fatal(err)
	}
	if rec, on := m.Active("acme", "any"); !on || rec.Reason != "acme bill" {
		t.Fatalf("acme/any: %+v on=%v, want the tenant's switch", rec, on)
	}
	if rec, on := m.Active("globex", "s1"); !on || rec.Reason != "stop by hand" {
		t.Fatalf("globex/s1: %+v on=%v, want the hand-written switch to stop", rec, on)
	}
	if _, on := m.Active("globex", "s2"); on {
		t.Fatal("globex/s2 stopped by another session's switch")
	}
	for _, c := range seen.waitLen(t, 2) {
		if !c.Initial || !c.On {
			t.Fatalf("a switch on at start reported as %+v, want initial and on", c)
		}
	}

	if _, err := groundstop.Set(ctx, kv, "", "", groundstop.Record{Reason: "all", By: "operator"}); err != nil {
		t.Fatal(err)
	}
	c := seen.waitLen(t, 3)[2]
	if c.Initial || !c.On || c.Tenant != "" || !c.Covers("globex", "s2") {
		t.Fatalf("global switch reported as %+v", c)
	}
	if rec, on := m.Active("globex", "s2"); !on || rec.Reason != "all" {
		t.Fatalf("after the global switch: globex/s2 %+v on=%v", rec, on)
	}
	if err := groundstop.Clear(ctx, kv, "acme", ""); err != nil {
		t.Fatal(err)
	}
	c = seen.waitLen(t, 4)[3]
	if c.On || c.Tenant != "acme" || c.Session != "" || !c.Covers("acme", "x") || c.Covers("globex", "x") {
		t.Fatalf("tenant switch lifted reported as %+v", c)
	}
}
