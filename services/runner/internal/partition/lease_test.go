package partition

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"jetway/internal/testutil"
)

// A member whose heartbeats stop going out gives its lease up — calls
// OnLeaseLost — while the others still count it alive, so its runs stop
// before anyone may take them over. When its beats go out again it is a
// new incarnation: what the old one held reads as a restart's.
func TestA_member_whose_beats_fail_gives_its_lease_up_before_the_others_count_it_gone(t *testing.T) {
	e := newEnv(t, 2, 5*time.Second)
	b := e.startMember("b", nil, nil)
	var (
		mu      sync.Mutex
		lost    []string
		seenAs  []Liveness
		heldNow []bool
	)
	var a *member
	a = e.startMemberWith("a", nil, nil, func(c *Config) {
		c.OnLeaseLost = func(inc string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := b.g.Status(ctx, "a", inc)
			if err != nil {
				t.Errorf("read a's heartbeat: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			lost, seenAs, heldNow = append(lost, inc), append(seenAs, st), append(heldNow, a.g.LeaseHeld())
		}
	})
	testutil.Eventually(t, 5*time.Second, "a to hold its lease", a.g.LeaseHeld)

	a.g.FailBeats(errors.New("blackholed"))
	testutil.Eventually(t, 10*time.Second, "a to give its lease up", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(lost) == 1
	})
	mu.Lock()
	if lost[0] != "a-1" || seenAs[0] != Alive || heldNow[0] {
		t.Fatalf("lease lost as %q, b saw a as %v (want Alive: nobody may take over yet), lease held %v", lost[0], seenAs[0], heldNow[0])
	}
	mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	testutil.Eventually(t, 5*time.Second, "b to count a's old incarnation gone once its lease is out", func() bool {
		st, err := b.g.Status(ctx, "a", "a-1")
		return err == nil && st == Gone
	})

	a.g.FailBeats(nil)
	testutil.Eventually(t, 5*time.Second, "a to hold a lease again", a.g.LeaseHeld)
	if inc := a.g.Incarnation(); inc == "a-1" {
		t.Fatal("a beats again under its old incarnation: its old runs would look alive")
	}
	if st, err := b.g.Status(ctx, "a", "a-1"); err != nil || st != Restarted {
		t.Fatalf("b sees a's old incarnation as %v (%v), want Restarted", st, err)
	}
}

// A beat sent before a lapse renews nothing, even when the bucket's
// answer comes after it: the lease a lapse ended stays ended.
func TestA_beat_sent_before_a_lapse_renews_nothing(t *testing.T) {
	l := newLease("x", time.Hour)
	_, epoch, at, err := l.sending()
	if err != nil {
		t.Fatal(err)
	}
	l.renew(epoch, at.Add(-2*time.Hour)) // a lease already out
	if _, ok := l.lapse(); !ok {
		t.Fatal("an expired lease did not lapse")
	}
	l.renew(epoch, at)
	if l.held() {
		t.Fatal("a beat of the old epoch renewed the lease")
	}
	if _, _, _, err := l.sending(); !errors.Is(err, errLapsing) {
		t.Fatalf("a beat went out while the lapse was under way: %v", err)
	}
	l.reincarnate()
	_, epoch2, at2, err := l.sending()
	if err != nil || epoch2 == epoch {
		t.Fatalf("after the lapse: epoch %d (was %d), %v", epoch2, epoch, err)
	}
	l.renew(epoch2, at2)
	if !l.held() {
		t.Fatal("a beat of the new epoch did not renew the lease")
	}
}

// A lease that ran out is never renewed, only lapsed: not by a beat sent
// after it ran out (a process resumed from a freeze may beat before its
// watcher runs), nor by the late answer to one sent before.
func TestA_lease_that_ran_out_is_not_renewed_by_a_beat(t *testing.T) {
	l := newLease("x", time.Hour)
	_, epoch, at, err := l.sending()
	if err != nil {
		t.Fatal(err)
	}
	l.renew(epoch, at.Add(-2*time.Hour)) // held once, out now
	if _, _, _, err := l.sending(); !errors.Is(err, errLapsing) {
		t.Fatalf("a beat went out on a lease that ran out: %v", err)
	}
	l.renew(epoch, time.Now())
	if l.held() {
		t.Fatal("a late answer renewed a lease that ran out")
	}
	if old, ok := l.lapse(); !ok || old != "x" {
		t.Fatalf("lapse = %q, %v; want the ran-out lease of x to lapse", old, ok)
	}
}
