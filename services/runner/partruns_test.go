package runner

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
)

// A run's claim and end reach the runner that holds its partition and no
// other: with two runners sharing the partitions, each watches the live
// runs of its own partitions only, every partition is watched once, and
// nobody watches every session record.
func TestEach_runner_watches_the_live_runs_of_its_own_partitions_only(t *testing.T) {
	e := newEnv(t)
	_, p := fakeModel(t, llmtest.Reply{Text: "done"})
	r1, r2 := e.twoRunners(p, nil)
	rs := []*Runner{r1, r2}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	testutil.EventuallyNil(t, 30*time.Second, "each runner to hold two partitions and watch exactly those", func() error {
		held := map[string][]int{}
		holders, _ := rs[0].group.Owners(ctx)
		for p, id := range holders {
			held[id] = append(held[id], p)
		}
		for _, r := range rs {
			want := held[r.ID()]
			slices.Sort(want)
			if len(want) != 2 {
				return fmt.Errorf("%s holds %v (holders %v)", r.ID(), want, held)
			}
			got := r.running.following()
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("%s watches partitions %v, holds %v", r.ID(), got, want)
			}
		}
		return nil
	})
	// Runs in every partition, so both runners claim and end some.
	for i := range 8 {
		e.publish(events.KindEvents, "t1", fmt.Sprintf("s%d", i), events.Input{Text: "hi"})
	}
	testutil.Eventually(t, 30*time.Second, "the eight runs to end", func() bool {
		for i := range 8 {
			if countKind(e.records("t1", fmt.Sprintf("s%d", i)), RecordRunEnded) != 1 {
				return false
			}
		}
		return true
	})

	st, err := e.js.Stream(ctx, bus.StreamSessionsByPartition)
	if err != nil {
		t.Fatal(err)
	}
	// Settled: a partition may be watched twice for a beat while it moves.
	testutil.EventuallyNil(t, 20*time.Second, "each partition watched once", func() error {
		filters := map[string]int{}
		for ci := range st.ListConsumers(ctx).Info() {
			if !ci.PushBound {
				continue // a stopped watch the server has not removed yet: nothing receives from it
			}
			for _, f := range append([]string{ci.Config.FilterSubject}, ci.Config.FilterSubjects...) {
				if f != "" {
					filters[f]++
				}
			}
		}
		for part := range 4 {
			f := "$KV." + bus.BucketSessionsByPartition + "." + bus.SessionsByPartitionFilter(part)
			if filters[f] != 1 {
				return fmt.Errorf("partition %d is watched %d times, want once (by its holder); all watches: %v", part, filters[f], filters)
			}
		}
		if len(filters) != 4 {
			return fmt.Errorf("the watches of %s filter %v; want the 4 partitions, one each", bus.StreamSessionsByPartition, filters)
		}
		return nil
	})
	sessions, err := e.js.Stream(ctx, bus.StreamSessions)
	if err != nil {
		t.Fatal(err)
	}
	for ci := range sessions.ListConsumers(ctx).Info() {
		if ci.Config.DeliverSubject != "jetway.sourcing.sessions" {
			t.Errorf("a consumer %s on %s (filter %q %v): something watches every session record", ci.Name, bus.StreamSessions, ci.Config.FilterSubject, ci.Config.FilterSubjects)
		}
	}
}

// A partition is pinned to a runner at its first event, so in a quiet
// deployment no runner holds any; each still has one runner looking at
// its live runs (the one that waits for it as its owner), not every
// runner.
func TestA_partition_nobody_holds_yet_is_watched_by_its_owner_alone(t *testing.T) {
	e := newEnv(t)
	_, p := fakeModel(t, llmtest.Reply{Text: "done"})
	rs := []*Runner{e.startRunner("r1", p, nil), e.startRunner("r2", p, nil)}
	testutil.EventuallyNil(t, 30*time.Second, "each partition watched by one runner", func() error {
		by := map[int][]string{}
		for _, r := range rs {
			for _, part := range r.running.following() {
				by[part] = append(by[part], r.ID())
			}
		}
		for part := range 4 {
			if len(by[part]) != 1 {
				return fmt.Errorf("partition %d watched by %v; want one runner", part, by[part])
			}
		}
		for _, r := range rs {
			if n := len(r.running.following()); n != 2 {
				return fmt.Errorf("%s watches %d partitions; want its share, 2 of the 4", r.ID(), n)
			}
		}
		return nil
	})
	if h, _ := rs[0].group.Owners(context.Background()); len(h) != 0 {
		t.Fatalf("partitions held %v: the test is about a deployment where no event pinned any", h)
	}
}
