package runner

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"jetway/pkg/bus"
)

// The balance rule reads live runners and partition holders from the
// watched copy of the runners bucket; this holds it to what the bucket
// says: a put counts, a delete does not, a heartbeat past staleAfter does
// not, and the answers are the ones a fresh listing gives.
func TestThe_peer_view_follows_the_runners_bucket(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := bus.OpenBucket(ctx, e.js, bus.BucketRunners)
	if err != nil {
		t.Fatal(err)
	}
	const stale = 2 * time.Second
	watched := peers{kv: kv, staleAfter: stale, view: &peerView{}}
	listed := peers{kv: kv, staleAfter: stale} // no view: lists the bucket
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); watched.watchPeers(wctx, zerolog.Nop()) }()
	t.Cleanup(func() { stop(); <-done })

	agree := func(what string, live int, holders map[int]string) {
		t.Helper()
		waitFor(t, what, 10*time.Second, func() bool {
			gotLive, err := watched.live(ctx)
			if err != nil || gotLive != live {
				return false
			}
			if _, ok := watched.view.fresh("", stale); !ok {
				return false // the answer must come from the view
			}
			return maps.Equal(watched.holders(ctx), holders)
		})
		listedLive, _ := listed.live(ctx)
		if listedLive != live || !maps.Equal(listed.holders(ctx), holders) {
			t.Fatalf("%s: the bucket listed says %d live, holders %v; the view says %d, %v", what, listedLive, listed.holders(ctx), live, holders)
		}
	}

	if err := watched.put(ctx, "ra", beat{Incarnation: "i1", Partitions: []int{0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := watched.put(ctx, "rb", beat{Incarnation: "i2", Partitions: []int{2}}); err != nil {
		t.Fatal(err)
	}
	agree("two heartbeats", 2, map[int]string{0: "ra", 1: "ra", 2: "rb"})

	if err := watched.put(ctx, "rb", beat{Incarnation: "i2", Partitions: []int{2, 3}}); err != nil {
		t.Fatal(err)
	}
	agree("rb took partition 3", 2, map[int]string{0: "ra", 1: "ra", 2: "rb", 3: "rb"})

	if err := watched.remove(ctx, "ra"); err != nil {
		t.Fatal(err)
	}
	agree("ra left", 1, map[int]string{2: "rb", 3: "rb"})

	// rb goes silent: its last heartbeat ages past staleAfter and stops
	// counting, with no marker in the bucket to say so.
	waitFor(t, "rb's heartbeat to go stale", 10*time.Second, func() bool {
		beats, ok := watched.view.fresh("", stale)
		return ok && len(beats) == 0
	})
	if got := watched.holders(ctx); len(got) != 0 {
		t.Fatalf("a stale heartbeat still holds partitions %v", slices.Sorted(maps.Keys(got)))
	}
	if n, _ := watched.live(ctx); n != 1 {
		t.Fatalf("live = %d with no fresh heartbeat, want 1 (the caller)", n)
	}

	// A runner trusts the copy only while its own heartbeat in it is
	// fresh: that is what shows the watcher still delivers.
	if _, ok := watched.view.fresh("rb", stale); ok {
		t.Fatal("the copy was trusted by rb with rb's own heartbeat stale in it")
	}
	if err := watched.put(ctx, "rb", beat{Incarnation: "i2", Partitions: []int{1}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rb's fresh heartbeat in the copy", 10*time.Second, func() bool {
		beats, ok := watched.view.fresh("rb", stale)
		return ok && slices.Equal(beats["rb"].Partitions, []int{1})
	})
}
