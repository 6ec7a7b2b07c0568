package kvmirror_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus/bustest"
	"jetway/pkg/bus/kvmirror"
)

func newBucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	return bustest.StartBucket(t, jetstream.KeyValueConfig{Bucket: "mirror_test", History: 5})
}

// recorder collects changes as OnChange reports them.
type recorder struct {
	mu      sync.Mutex
	changes []kvmirror.Change
	grew    chan struct{}
}

func newRecorder() *recorder { return &recorder{grew: make(chan struct{}, 1000)} }

func (r *recorder) note(c kvmirror.Change) {
	r.mu.Lock()
	r.changes = append(r.changes, c)
	r.mu.Unlock()
	r.grew <- struct{}{}
}

// waitFor waits until ok holds for the changes seen so far.
func (r *recorder) waitFor(t *testing.T, what string, ok func([]kvmirror.Change) bool) []kvmirror.Change {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		cs := append([]kvmirror.Change(nil), r.changes...)
		r.mu.Unlock()
		if ok(cs) {
			return cs
		}
		select {
		case <-r.grew:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; changes so far: %+v", what, cs)
		}
	}
}

func put(t *testing.T, kv jetstream.KeyValue, key, val string) {
	t.Helper()
	if _, err := kv.Put(context.Background(), key, []byte(val)); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func TestMirror_holds_the_existing_keys_when_ready(t *testing.T) {
	kv := newBucket(t)
	put(t, kv, "stop.a", "1")
	put(t, kv, "stop.b", "2")
	put(t, kv, "other", "x")
	_ = kv.Delete(context.Background(), "stop.b")

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rec := newRecorder()
	m := kvmirror.Start(ctx, kvmirror.Config{Name: "test", KV: kv, Filters: []string{"stop.>"}, OnChange: rec.note})
	waitCtx, done := context.WithTimeout(ctx, 10*time.Second)
	defer done()
	if err := m.WaitReady(waitCtx); err != nil {
		t.Fatal(err)
	}
	got := m.Entries()
	if len(got) != 1 || string(got["stop.a"].Value()) != "1" {
		t.Fatalf("entries when ready = %v, want only stop.a=1", got)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.changes) != 1 || rec.changes[0].Key != "stop.a" || !rec.changes[0].Initial {
		t.Fatalf("changes before ready = %+v, want one initial put of stop.a", rec.changes)
	}
}

func TestMirror_reports_updates_in_order(t *testing.T) {
	kv := newBucket(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rec := newRecorder()
	m := kvmirror.Start(ctx, kvmirror.Config{Name: "test", KV: kv, OnChange: rec.note})
	<-m.Ready()

	put(t, kv, "k", "1")
	put(t, kv, "k", "2")
	if err := kv.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	cs := rec.waitFor(t, "put, put, delete", func(cs []kvmirror.Change) bool { return len(cs) >= 3 })
	if string(cs[0].Entry.Value()) != "1" || string(cs[1].Entry.Value()) != "2" || !cs[2].Deleted {
		t.Fatalf("changes = %+v, want put 1, put 2, delete", cs)
	}
	if cs[2].Entry.Operation() != jetstream.KeyValueDelete || cs[0].Initial {
		t.Fatalf("the delete carries op %v, first change initial=%v", cs[2].Entry.Operation(), cs[0].Initial)
	}
	if _, ok := m.Get("k"); ok {
		t.Fatal("a deleted key is still in the mirror")
	}
}

// endingKV hands out real watchers but lets the test end the current one,
// as a lost subscription would, and hold the next until the test is ready.
type endingKV struct {
	jetstream.KeyValue
	mu      sync.Mutex
	current jetstream.KeyWatcher
	gate    chan struct{}
	started chan struct{}
}

func (k *endingKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	k.mu.Lock()
	gate := k.gate
	k.mu.Unlock()
	if gate != nil {
		<-gate
	}
	w, err := k.KeyValue.WatchAll(ctx, opts...)
	k.mu.Lock()
	k.current = w
	k.mu.Unlock()
	k.started <- struct{}{}
	return w, err
}

func TestMirror_a_watch_that_ends_is_restarted_and_misses_nothing(t *testing.T) {
	real := newBucket(t)
	kv := &endingKV{KeyValue: real, started: make(chan struct{}, 10)}
	put(t, real, "kept", "1")
	put(t, real, "changed", "1")
	put(t, real, "dropped", "1")

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rec := newRecorder()
	m := kvmirror.Start(ctx, kvmirror.Config{Name: "test", KV: kv, OnChange: rec.note, Backoff: time.Millisecond})
	<-m.Ready()
	<-kv.started

	// End the watch and change the bucket before the next one starts.
	gate := make(chan struct{})
	kv.mu.Lock()
	kv.gate = gate
	w := kv.current
	kv.mu.Unlock()
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	put(t, real, "changed", "2")
	put(t, real, "added", "1")
	if err := real.Delete(context.Background(), "dropped"); err != nil {
		t.Fatal(err)
	}
	close(gate)

	cs := rec.waitFor(t, "the changes made while the watch was down", func(cs []kvmirror.Change) bool {
		seen := map[string]bool{}
		for _, c := range cs[3:] {
			seen[c.Key] = true
		}
		return seen["changed"] && seen["added"] && seen["dropped"]
	})
	for _, c := range cs[3:] {
		switch c.Key {
		case "kept":
			t.Fatalf("an unchanged key was reported again after the restart: %+v", c)
		case "changed":
			if string(c.Entry.Value()) != "2" || c.Deleted {
				t.Fatalf("changed = %+v, want put 2", c)
			}
		case "dropped":
			if !c.Deleted {
				t.Fatalf("dropped = %+v, want a delete", c)
			}
		}
	}
	if e, ok := m.Get("changed"); !ok || string(e.Value()) != "2" {
		t.Fatalf("mirror holds changed=%v after the restart", e)
	}
	if !m.Live() {
		t.Fatal("the mirror says no watch is live after it restarted")
	}
}

func TestMirror_with_keep_holds_only_the_kept_entries_and_reports_one_leaving(t *testing.T) {
	real := newBucket(t)
	kv := &endingKV{KeyValue: real, started: make(chan struct{}, 10)}
	put(t, real, "a", "running")
	put(t, real, "b", "idle")
	put(t, real, "c", "running")

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rec := newRecorder()
	running := func(e jetstream.KeyValueEntry) bool { return string(e.Value()) == "running" }
	m := kvmirror.Start(ctx, kvmirror.Config{Name: "test", KV: kv, Keep: running, OnChange: rec.note, Backoff: time.Millisecond})
	<-m.Ready()
	<-kv.started
	if got := m.Entries(); len(got) != 2 || got["b"] != nil {
		t.Fatalf("entries when ready = %v, want a and c only", got)
	}

	put(t, real, "a", "idle")
	cs := rec.waitFor(t, "a leaving", func(cs []kvmirror.Change) bool { return len(cs) >= 3 })
	if c := cs[2]; c.Key != "a" || c.Deleted || string(c.Entry.Value()) != "idle" {
		t.Fatalf("a leaving = %+v, want its put of idle", c)
	}
	if _, ok := m.Get("a"); ok {
		t.Fatal("a is held after its value stopped being kept")
	}

	// c stops being kept while no watch runs: the restart reports it.
	gate := make(chan struct{})
	kv.mu.Lock()
	kv.gate = gate
	w := kv.current
	kv.mu.Unlock()
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	put(t, real, "c", "idle")
	close(gate)
	cs = rec.waitFor(t, "c leaving after the restart", func(cs []kvmirror.Change) bool { return len(cs) >= 4 })
	if c := cs[3]; c.Key != "c" || c.Deleted || string(c.Entry.Value()) != "idle" {
		t.Fatalf("c leaving = %+v, want its put of idle", c)
	}
	if got := m.Entries(); len(got) != 0 {
		t.Fatalf("entries after both left = %v, want none", got)
	}
}
