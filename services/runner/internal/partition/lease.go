package partition

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"
)

// lease is this member's own view of its membership: how long the others
// will still count it alive. Each heartbeat the bucket stores renews it,
// counted on this process's monotonic clock from the moment the beat was
// sent — never later than the server's stamp the others count from — for
// Lease−Margin. When it runs out the member stops its runs (OnLeaseLost)
// before the others may count it gone, and ends its incarnation: the runs
// it held are then another incarnation's, recovered like a restart's.
//
// The timing argument is in docs/ARCHITECTURE.md (Fencing, "Leases").
type lease struct {
	ttl time.Duration // what the member holds per beat: Lease − Margin

	mu  sync.Mutex
	inc string
	// until is when the lease runs out (a monotonic reading); zero before
	// the first beat and after a lapse.
	until time.Time
	// epoch counts lapses: a beat sent in an earlier epoch renews nothing,
	// even when its answer comes after the lapse.
	epoch uint64
	// lapsing: OnLeaseLost is under way; no beat goes out until the runs
	// have stopped and the new incarnation is chosen.
	lapsing bool
	renewed chan struct{} // a renewal moved until (wakes the watcher)
	fault   error         // a test's fault: every beat fails with it
}

func newLease(inc string, ttl time.Duration) *lease {
	return &lease{inc: inc, ttl: ttl, renewed: make(chan struct{}, 1)}
}

// errLapsing refuses a beat while the member's runs are being stopped.
var errLapsing = errors.New("lease lapsed: stopping this member's runs before it announces a new incarnation")

// sending is called as a beat is sent: what incarnation it carries and the
// epoch and time it renews from.
func (l *lease) sending() (inc string, epoch uint64, at time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fault != nil {
		return "", 0, time.Time{}, l.fault
	}
	if l.lapsing || l.ranOut() {
		return "", 0, time.Time{}, errLapsing
	}
	return l.inc, l.epoch, time.Now(), nil
}

// ranOut reports whether a lease was held and its time is up. A lease
// that ran out is never renewed, only lapsed: a process resumed after a
// freeze may run its beat before its watcher, and a renewal then would
// keep runs going that the others may already have taken over. Call with
// l.mu held.
func (l *lease) ranOut() bool {
	return !l.until.IsZero() && !time.Now().Before(l.until)
}

// renew extends the lease after a beat sent at at, in epoch, was stored.
func (l *lease) renew(epoch uint64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if epoch != l.epoch || l.lapsing || l.ranOut() {
		return // an answer after the lease ran out renews nothing
	}
	if u := at.Add(l.ttl); u.After(l.until) {
		l.until = u
	}
	select {
	case l.renewed <- struct{}{}:
	default:
	}
}

// held reports whether the lease is held now. It reads the monotonic clock
// itself, not a timer: a process resumed after a freeze sees at once that
// its lease ran out, before its watcher has had a chance to run.
func (l *lease) held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.lapsing && time.Now().Before(l.until)
}

func (l *lease) incarnation() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inc
}

// left is how long the lease still runs (≤ 0: out, or never held).
func (l *lease) left() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.until.IsZero() {
		return 0, false
	}
	return time.Until(l.until), true
}

// lapse starts a lapse if the lease ran out: it returns the incarnation
// that ends.
func (l *lease) lapse() (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.until.IsZero() || l.lapsing || time.Now().Before(l.until) {
		return "", false
	}
	l.lapsing, l.until = true, time.Time{}
	l.epoch++
	return l.inc, true
}

// reincarnate ends a lapse: beats go out again, under a new incarnation.
func (l *lease) reincarnate() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inc = l.inc + "." + newSuffix()
	l.lapsing = false
	return l.inc
}

func newSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// watchLease waits for the lease to run out and handles each lapse.
func (g *Group) watchLease(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		wait := time.Hour
		if d, ok := g.lease.left(); ok {
			wait = max(d, 0)
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-g.lease.renewed:
			continue
		case <-t.C:
		}
		old, ok := g.lease.lapse()
		if !ok {
			continue
		}
		g.log.Warn().Str("incarnation", old).Dur("lease", g.cfg.StaleAfter).Dur("margin", g.cfg.Margin).
			Msg("lease lapsed: no heartbeat renewed it; stopping this runner's runs before any other runner may take them over")
		if g.cfg.OnLeaseLost != nil {
			g.cfg.OnLeaseLost(old)
		}
		inc := g.lease.reincarnate()
		g.log.Warn().Str("incarnation", inc).Msg("runs stopped; beating again as a new incarnation")
	}
}

// LeaseHeld reports whether this member's lease is held now: a run may
// start and call out only while it is.
func (g *Group) LeaseHeld() bool { return g.lease.held() }

// Incarnation is the member's current incarnation: the one it started
// with, a new one after each lapse of its lease.
func (g *Group) Incarnation() string { return g.lease.incarnation() }

// FailBeats makes every heartbeat fail with err (nil: they go out again),
// as a blackholed connection would: a test's fault.
func (g *Group) FailBeats(err error) {
	g.lease.mu.Lock()
	defer g.lease.mu.Unlock()
	g.lease.fault = err
}
