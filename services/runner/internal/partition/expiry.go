package partition

import (
	"context"
	"sync"
	"time"
)

// expirySlack is how long after a peer's lease runs out the member looks
// again: past it, the bucket says the peer is gone.
const expirySlack = 20 * time.Millisecond

// watchExpiries wakes the member when another member's lease runs out, as
// its last beat declared (NextExpiry): the pull loops waiting for their
// next look at what to pull look at once (wake), and OnPeerGone runs, for
// the runner's sweep to recover a dead member's runs. Without it both
// came up to a tick or a heartbeat after the lease's end. It looks again
// at least every heartbeat: a live member beats before its lease runs
// out and moves the moment on, so only a member that stopped beating
// wakes anyone.
func (g *Group) watchExpiries(ctx context.Context) {
	for {
		wait := g.cfg.Heartbeat
		at := g.NextExpiry()
		// Due within this wait: wake just after it. Otherwise the lease's
		// end is still ahead when the wait is over.
		due := !at.IsZero() && time.Until(at) <= wait
		if due {
			wait = max(time.Until(at)+expirySlack, 0)
		}
		if !sleep(ctx, wait) {
			return
		}
		if !due {
			continue
		}
		g.wake.broadcast()
		if g.cfg.OnPeerGone != nil {
			g.cfg.OnPeerGone(ctx)
		}
	}
}

// waker lets goroutines that nap be woken together.
type waker struct {
	mu sync.Mutex
	ch chan struct{}
}

// woken is closed at the next broadcast.
func (w *waker) woken() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

func (w *waker) broadcast() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
	}
	w.ch = make(chan struct{})
}

// nap waits d, or until the member is woken (watchExpiries), or ctx ends;
// false when ctx ended.
func (g *Group) nap(ctx context.Context, d time.Duration) bool {
	return sleepUntil(ctx, d, g.wake.woken())
}
