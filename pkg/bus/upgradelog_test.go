package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// A log provisioned in the old form (each shard read through a source
// with the partition transform, so a filtered consumer) moves to the
// unfiltered form while events flow, holding each event exactly once
// under its four-token subject (on three nodes: at least once, see
// movesTheLogOnce). A naive switch copies again what the old sources had
// copied but not yet confirmed: hundreds of events twice.
func TestProvision_moves_a_filtered_log_to_unfiltered_sources_without_copying_an_event_twice(t *testing.T) {
	const P = 16
	s := bustest.StartServerWith(t, P)
	_, js := bustest.Connect(t, s.ClientURL())
	movesTheLogOnce(t, js, 1, 20_000)
}

func TestProvision_moves_a_filtered_log_on_a_cluster_losing_no_event(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	if raceDetector {
		t.Skip("nats-server's own data race fires here under the detector (see race_test.go); `make test` runs this test again without it")
	}
	c := bustest.StartClusterWith(t, 3, bustest.ClusterConfig{Partitions: 16})
	_, js := bustest.Connect(t, c.URLs()...)
	movesTheLogOnce(t, js, 3, 2_000)
}

// movesTheLogOnce provisions K=2 shards, turns the log into the old form
// and provisions again with events flowing: each events before the
// upgrade, during it, and after.
func movesTheLogOnce(t *testing.T, js jetstream.JetStream, replicas int, each int64) {
	const K = 2
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Shards: K, Replicas: replicas}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	toOldForm(t, js, K)

	// Events flow before, during and after the upgrade; no runner acks
	// them, so the shards keep every one (interest retention).
	var published atomic.Int64
	stop, stopped := make(chan struct{}), make(chan error, 1)
	halt := sync.OnceFunc(func() { close(stop) })
	defer halt() // a failed wait below stops the publisher too
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				select {
				case <-js.PublishAsyncComplete():
					stopped <- nil
				case <-time.After(30 * time.Second):
					stopped <- errors.New("async publishes not answered in 30 s")
				}
				return
			default:
			}
			if _, err := js.PublishAsync(fmt.Sprintf("jetway.events.acme.s%d", i%50), []byte("x")); err != nil {
				if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
					select {
					case <-js.PublishAsyncComplete():
						continue
					case <-time.After(30 * time.Second):
						stopped <- errors.New("async publishes stalled for 30 s")
						return
					}
				}
				stopped <- err
				return
			}
			published.Add(1)
		}
	}()
	waitPublished := func(n int64) {
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("%d events published", n), func() bool { return published.Load() >= n })
	}
	waitPublished(each)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Replicas: replicas, Progress: func(l string) { t.Log(l) }}); err != nil {
		t.Fatalf("provision (the upgrade): %v", err)
	}
	waitPublished(published.Load() + each)
	halt()
	if err := <-stopped; err != nil {
		t.Fatalf("publisher: %v", err)
	}

	total := shardsHold(t, js, K)
	if total != uint64(published.Load()) {
		t.Fatalf("the shards hold %d events, %d were published", total, published.Load())
	}
	bustest.WaitLogged(t, js)
	logStream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	// Caught up: every source consumer has delivered everything.
	testutil.EventuallyNil(t, 30*time.Second, "the log's sources caught up", func() error {
		for k := range K {
			c, err := js.PushConsumer(ctx, bus.WorkStream(k), bus.EventsSourceConsumer)
			if err != nil {
				return err
			}
			if c.CachedInfo().NumPending > 0 {
				return fmt.Errorf("%s: %d not yet delivered", bus.WorkStream(k), c.CachedInfo().NumPending)
			}
		}
		return nil
	})
	info, err := logStream.Info(ctx, jetstream.WithSubjectFilter("jetway.events.acme.*"))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case info.State.Msgs < total:
		t.Fatalf("the log holds %d events under jetway.events.acme.*, the shards %d: the move lost some", info.State.Msgs, total)
	case info.State.Msgs > total && replicas == 1:
		t.Fatalf("the log holds %d events under jetway.events.acme.*, the shards %d: %d copied twice", info.State.Msgs, total, info.State.Msgs-total)
	case info.State.Msgs > total:
		// On three nodes a leader elected under load can take up to a
		// flow-control window again after the sources changed
		// (docs/ARCHITECTURE.md, known limits);
		// said, not failed: this test's business is the move.
		t.Logf("the log holds %d events, the shards %d: %d copied twice around a leader change", info.State.Msgs, total, info.State.Msgs-total)
	}
	if n := len(info.State.Subjects); n != 50 {
		t.Errorf("the log holds %d subjects under jetway.events.acme.*, want the 50 sessions'", n)
	}

	cfg := info.Config
	if cfg.SubjectTransform == nil || *cfg.SubjectTransform != *bus.LogTransform() {
		t.Errorf("the log's transform is %+v, want %+v", cfg.SubjectTransform, bus.LogTransform())
	}
	for _, src := range cfg.Sources {
		if len(src.SubjectTransforms) > 0 {
			t.Errorf("source %s still has transforms %v", src.Name, src.SubjectTransforms)
		}
	}
	for k := range K {
		c, err := js.PushConsumer(ctx, bus.WorkStream(k), bus.EventsSourceConsumer)
		if err != nil {
			t.Fatal(err)
		}
		if cc := c.CachedInfo().Config; cc.FilterSubject != "" || len(cc.FilterSubjects) > 0 {
			t.Errorf("%s's source consumer is still filtered: %q %v", bus.WorkStream(k), cc.FilterSubject, cc.FilterSubjects)
		}
	}
	// Provisioning again has nothing to move: the log gains nothing (the
	// copies made twice above, if any, are still all it has beyond the
	// shards).
	held := info.State.Msgs
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Replicas: replicas}); err != nil {
		t.Fatalf("provision again: %v", err)
	}
	if info, err := logStream.Info(ctx, jetstream.WithSubjectFilter("jetway.events.acme.*")); err != nil || info.State.Msgs != held {
		t.Fatalf("after provisioning again the log holds %v (%v), want the %d it held before", info.State.Msgs, err, held)
	}
}

// toOldForm turns a freshly provisioned log (nothing sourced yet) into
// the form older versions made: the partition transform on each source,
// each source consumer filtered to it, no transform on the log.
func toOldForm(t *testing.T, js jetstream.JetStream, shards int) {
	t.Helper()
	ctx := testContext(t)
	tr := bus.LogTransform()
	for k := range shards {
		c, err := js.PushConsumer(ctx, bus.WorkStream(k), bus.EventsSourceConsumer)
		if err != nil {
			t.Fatal(err)
		}
		cc := c.CachedInfo().Config
		cc.FilterSubject = tr.Source
		if _, err := js.UpdatePushConsumer(ctx, bus.WorkStream(k), cc); err != nil {
			t.Fatalf("filter %s's source consumer: %v", bus.WorkStream(k), err)
		}
	}
	st, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.SubjectTransform = nil
	for _, src := range sc.Sources {
		src.SubjectTransforms = []jetstream.SubjectTransformConfig{*tr}
	}
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatalf("the log in the old form: %v", err)
	}
}

// A provisioning stopped after the log let go of a shard (its consumer
// paused, still filtered) is finished by the next one: the log goes on
// from the last event it copied, none twice, none missing.
func TestProvision_finishes_a_log_move_stopped_half_way(t *testing.T) {
	const K = 2
	s := bustest.StartServerWith(t, 16)
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Shards: K}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	toOldForm(t, js, K)
	publish := func(from, n int) {
		for i := from; i < from+n; i++ {
			if _, err := js.PublishAsync(fmt.Sprintf("jetway.events.acme.s%d", i%50), []byte("x")); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatal("publishes not answered")
		}
	}
	publish(0, 3000)
	bustest.WaitLogged(t, js)

	// Steps 1 to 3 of the move for shard 0, then a stop.
	shard := bus.WorkStream(0)
	if _, err := js.PauseConsumer(ctx, shard, bus.EventsSourceConsumer, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	logStream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, 20*time.Second, "the log copied what the paused consumer delivered", func() error {
		c, err := js.PushConsumer(ctx, shard, bus.EventsSourceConsumer)
		if err != nil {
			return err
		}
		info, err := logStream.Info(ctx)
		if err != nil {
			return err
		}
		for _, si := range info.Sources {
			if si.Name == shard && si.Seq >= c.CachedInfo().Delivered.Stream && c.CachedInfo().Delivered.Stream > 0 {
				return nil
			}
		}
		return fmt.Errorf("not yet: delivered %d", c.CachedInfo().Delivered.Stream)
	})
	sc := logStream.CachedInfo().Config
	sc.SubjectTransform = bus.LogTransform()
	sc.Sources = slices.DeleteFunc(sc.Sources, func(s *jetstream.StreamSource) bool { return s.Name == shard })
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatalf("stop sourcing %s: %v", shard, err)
	}
	publish(3000, 3000)

	if err := bus.Provision(ctx, js, bus.ProvisionConfig{}); err != nil {
		t.Fatalf("provision again: %v", err)
	}
	total := shardsHold(t, js, K)
	if total != 6000 {
		t.Fatalf("the shards hold %d events, want the 6000 published", total)
	}
	bustest.WaitLogged(t, js)
	testutil.EventuallyNil(t, 20*time.Second, "the log's sources caught up", func() error {
		for k := range K {
			c, err := js.PushConsumer(ctx, bus.WorkStream(k), bus.EventsSourceConsumer)
			if err != nil {
				return err
			}
			ci := c.CachedInfo()
			if ci.Paused || ci.Config.FilterSubject != "" || ci.NumPending > 0 {
				return fmt.Errorf("%s's source consumer: paused %v, filter %q, %d not delivered", bus.WorkStream(k), ci.Paused, ci.Config.FilterSubject, ci.NumPending)
			}
		}
		return nil
	})
	info, err := logStream.Info(ctx, jetstream.WithSubjectFilter("jetway.events.acme.*"))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != total {
		t.Fatalf("the log holds %d events under jetway.events.acme.*, the shards %d", info.State.Msgs, total)
	}
	for _, src := range info.Config.Sources {
		if len(src.SubjectTransforms) > 0 {
			t.Errorf("source %s still has transforms", src.Name)
		}
	}
}

// shardsHold is how many events the K shards hold.
func shardsHold(t *testing.T, js jetstream.JetStream, shards int) uint64 {
	t.Helper()
	var total uint64
	for k := range shards {
		st, err := js.Stream(testContext(t), bus.WorkStream(k))
		if err != nil {
			t.Fatal(err)
		}
		total += st.CachedInfo().State.Msgs
	}
	return total
}

// raceDetector says the tests run under the race detector (race_test.go).
var raceDetector bool
