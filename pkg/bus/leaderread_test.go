package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// A leader-read bucket's Get, from a client connected to a replica that is
// not the leader, sees every write the moment it is acknowledged (the
// profile put and then named, the code made and then spent), because it
// asks the leader: a direct get, which any replica answers, may come from
// one that has not applied the write yet. That lag shows only under load,
// so the test checks what is asked, not how often a replica lags.
func TestLeader_read_buckets_see_each_write_at_once_from_a_follower(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := bustest.StartCluster(t, 3)
	_, admin := bustest.Connect(t, c.URLs()...)
	ctx := testContext(t)
	for _, kc := range bus.BucketConfigs(bus.ProvisionConfig{Replicas: 3}) {
		createPlaced(t, admin, kc)
	}
	for _, name := range bus.LeaderReadBuckets {
		t.Run(name, func(t *testing.T) {
			stream := "KV_" + name
			var leader *bustest.Node
			testutil.Eventually(t, 10*time.Second, "a leader for "+stream, func() bool {
				leader = c.StreamLeader(stream)
				return leader != nil
			})
			follower := c.Nodes[0]
			if follower == leader {
				follower = c.Nodes[1]
			}
			_, js := bustest.Connect(t, follower.ClientURL())
			kv := bindPlaced(t, js, name)
			plain, err := js.KeyValue(ctx, name)
			if err != nil {
				t.Fatalf("bind %s as nats.go does: %v", name, err)
			}
			// A spy in the same account sees which API each read asks. It
			// is on the reads' node: a subscription on another node reaches
			// this one over a route some time after the spy's flush, and
			// reads asked before then went unseen (a CI run counted short).
			spy, _ := bustest.Connect(t, follower.ClientURL())
			var asked sync.Map
			for _, subj := range []string{"$JS.API.DIRECT.GET." + stream + ".>", "$JS.API.STREAM.MSG.GET." + stream} {
				sub, err := spy.Subscribe(subj, func(m *nats.Msg) {
					n, _ := asked.LoadOrStore(subj, new(atomic.Int64))
					n.(*atomic.Int64).Add(1)
				})
				if err != nil {
					t.Fatalf("spy on %s: %v", subj, err)
				}
				t.Cleanup(func() { _ = sub.Unsubscribe() })
			}
			if err := spy.Flush(); err != nil {
				t.Fatalf("spy: %v", err)
			}
			count := func(subj string) int64 {
				n, ok := asked.Load(subj)
				if !ok {
					return 0
				}
				return n.(*atomic.Int64).Load()
			}
			direct, leaderGets := "$JS.API.DIRECT.GET."+stream+".>", "$JS.API.STREAM.MSG.GET."+stream

			const writes = 200
			for i := range writes {
				key := fmt.Sprintf("readback.k%d", i)
				want := fmt.Sprintf("v%d", i)
				rev, err := kv.Put(ctx, key, []byte(want))
				if err != nil {
					t.Fatalf("put %s: %v", key, err)
				}
				e, err := kv.Get(ctx, key)
				if err != nil {
					t.Fatalf("get %s right after its put (revision %d): %v", key, rev, err)
				}
				if string(e.Value()) != want || e.Revision() != rev || e.Key() != key || e.Bucket() != name {
					t.Fatalf("get %s right after its put: %s=%q at %d in %s, want %q at %d", key, e.Key(), e.Value(), e.Revision(), e.Bucket(), want, rev)
				}
				e, err = kv.GetRevision(ctx, key, rev)
				if err != nil || string(e.Value()) != want || e.Revision() != rev {
					t.Fatalf("get %s at revision %d right after its put: %v, want %q", key, rev, err, want)
				}
				if i > 0 {
					if _, err := kv.GetRevision(ctx, fmt.Sprintf("readback.k%d", i-1), rev); !errors.Is(err, jetstream.ErrKeyNotFound) {
						t.Fatalf("readback.k%d at the revision of %s: %v, want %v", i-1, key, err, jetstream.ErrKeyNotFound)
					}
				}
			}
			reads := int64(3*writes - 1)
			testutil.Eventually(t, 10*time.Second, "the spy to see every read", func() bool {
				return count(leaderGets) >= reads
			})
			if n := count(direct); n != 0 {
				t.Fatalf("%d of %d reads were direct gets, which any replica answers", n, reads)
			}
			// The spy sees direct gets too: nats.go's own handle asks one.
			if _, err := plain.Get(ctx, "readback.k0"); err != nil {
				t.Fatalf("direct get: %v", err)
			}
			testutil.Eventually(t, 10*time.Second, "the spy to see a direct get", func() bool {
				return count(direct) == 1
			})

			// Deleted and purged keys, and keys never put, read as not found.
			if err := kv.Delete(ctx, "readback.k0"); err != nil {
				t.Fatalf("delete: %v", err)
			}
			if err := kv.Purge(ctx, "readback.k1"); err != nil {
				t.Fatalf("purge: %v", err)
			}
			for _, key := range []string{"readback.k0", "readback.k1", "readback.never"} {
				if _, err := kv.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
					t.Errorf("get %s: %v, want %v", key, err, jetstream.ErrKeyNotFound)
				}
			}
			if _, err := kv.Get(ctx, "bad key*"); !errors.Is(err, jetstream.ErrInvalidKey) {
				t.Errorf("get of an invalid key: %v, want %v", err, jetstream.ErrInvalidKey)
			}
		})
	}
}

// A leader-read Get without a deadline is still bounded: a stream with no
// leader (its cluster lost its quorum) answers with an error, not a hang,
// and not with "not found", which a caller would take for an answer.
func TestLeader_read_without_a_deadline_ends_when_nobody_answers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := bustest.StartCluster(t, 3)
	_, admin := bustest.Connect(t, c.URLs()...)
	stream := "KV_" + bus.BucketControl
	createPlaced(t, admin, jetstream.KeyValueConfig{Bucket: bus.BucketControl, Replicas: 3})
	var leader *bustest.Node
	testutil.Eventually(t, 10*time.Second, "a leader for "+stream, func() bool {
		leader = c.StreamLeader(stream)
		return leader != nil
	})
	// The client stays on a follower; the leader and the other follower
	// go, so the one left cannot be elected.
	var follower *bustest.Node
	for _, nd := range c.Nodes {
		if nd != leader && follower == nil {
			follower = nd
		}
	}
	_, js := bustest.Connect(t, follower.ClientURL())
	kv := bindPlaced(t, js, bus.BucketControl)
	for _, nd := range c.Nodes {
		if nd != follower {
			nd.Stop()
		}
	}
	if c.StreamLeader(stream) != nil {
		t.Fatalf("%s has a leader with two of three nodes stopped", stream)
	}
	done := make(chan error, 1)
	go func() {
		_, err := kv.Get(context.Background(), "k")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("get with no leader: %v, want an error that is not \"not found\"", err)
		}
		t.Logf("get with no leader: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("get without a deadline still waiting after 30 s with no leader")
	}
}

// createPlaced makes bucket kc on a cluster that has just formed, which
// may not count every peer as online yet ("no suitable peers"); each try
// has its own deadline.
func createPlaced(t *testing.T, js jetstream.JetStream, kc jetstream.KeyValueConfig) {
	t.Helper()
	testutil.EventuallyNil(t, 20*time.Second, "bucket "+kc.Bucket+" placed on the cluster", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := js.CreateOrUpdateKeyValue(ctx, kc)
		return err
	})
}

// bindPlaced binds bucket name through bus.BindBucket, trying again while
// the node js is connected to does not answer for the new bucket yet.
func bindPlaced(t *testing.T, js jetstream.JetStream, name string) jetstream.KeyValue {
	t.Helper()
	var kv jetstream.KeyValue
	testutil.EventuallyNil(t, 20*time.Second, "bucket "+name+" bound", func() (err error) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		kv, err = bus.BindBucket(ctx, js, name)
		return err
	})
	return kv
}
