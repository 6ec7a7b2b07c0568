package kvmirror_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus/kvmirror"
)

func TestSnapshot_reads_the_live_entries_that_match_once(t *testing.T) {
	kv := newBucket(t)
	for i := range 5 {
		put(t, kv, fmt.Sprintf("a.k%d", i), "v")
	}
	put(t, kv, "b.other", "v")
	if err := kv.Delete(context.Background(), "a.k0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := kvmirror.Snapshot(ctx, kv, "a.>")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range got {
		keys = append(keys, e.Key())
	}
	if want := []string{"a.k1", "a.k2", "a.k3", "a.k4"}; !slices.Equal(keys, want) {
		t.Errorf("snapshot keys %v, want %v (the deleted one and the other prefix left out)", keys, want)
	}
	all, err := kvmirror.Snapshot(ctx, kv)
	if err != nil || len(all) != 5 {
		t.Errorf("snapshot of every key: %d entries, %v; want 5", len(all), err)
	}
}

// cutWatcher passes on a real watch's first entry, then ends, as a watch
// whose subscription is lost mid-way does.
type cutWatcher struct {
	jetstream.KeyWatcher
	ch chan jetstream.KeyValueEntry
}

func (w *cutWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.ch }

type cuttingKV struct{ jetstream.KeyValue }

func (k cuttingKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchAll(ctx, opts...)
	if err != nil {
		return nil, err
	}
	cw := &cutWatcher{KeyWatcher: w, ch: make(chan jetstream.KeyValueEntry, 1)}
	cw.ch <- <-w.Updates()
	close(cw.ch)
	return cw, nil
}

func TestSnapshot_of_a_watch_that_ends_early_is_an_error_not_a_shorter_list(t *testing.T) {
	kv := newBucket(t)
	for i := range 3 {
		put(t, kv, fmt.Sprintf("k%d", i), "v")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := kvmirror.Snapshot(ctx, cuttingKV{kv})
	if !errors.Is(err, kvmirror.ErrWatchClosed) || got != nil {
		t.Errorf("snapshot of a cut watch = %d entries, %v; want none and ErrWatchClosed", len(got), err)
	}
}
