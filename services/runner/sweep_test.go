package runner

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// A runner that dies is seen gone when its lease runs out; the sweep that
// recovers its runs comes then, unasked, not at the survivor's next beat.
func TestA_sweep_comes_unasked_when_a_peer_s_lease_runs_out(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	asks := make(chan struct{}, 1)
	swept := make(chan struct{}, 8)
	// The peer's lease runs out shortly after the first sweep; after that
	// no peer is seen alive.
	var calls atomic.Int32
	next := func() time.Time {
		if calls.Add(1) == 1 {
			return time.Now().Add(50 * time.Millisecond)
		}
		return time.Time{}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sweepLoop(ctx, nil, asks, next, func() { swept <- struct{}{} })
	}()
	defer func() { cancel(); <-done }()

	asks <- struct{}{}
	for _, what := range []string{"the asked sweep", "a sweep at the peer's lease end, unasked"} {
		select {
		case <-swept:
		case <-ctx.Done():
			t.Fatalf("waited in vain for %s", what)
		}
	}
}
