package bus_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// sessionPairs are the (tenant, session) pairs the tests here write.
var sessionPairs = [][2]string{{"acme", "s1"}, {"acme", "s2"}, {"acme", "build-7"}, {"globex", "s1"}, {"globex", "triage"}, {"initech", "x"}}

// waitCopied waits until the copy holds every pair's record, with the
// value last written, under its partition of P.
func waitCopied(t *testing.T, ctx context.Context, js jetstream.JetStream, partitions int, value func(tenant, session string) string) {
	t.Helper()
	byPart, err := bus.OpenBucket(ctx, js, bus.BucketSessionsByPartition)
	if err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, 20*time.Second, "every record copied under its partition", func() error {
		for _, ts := range sessionPairs {
			key := bus.SessionsByPartitionKey(bus.PartitionFor(ts[0], ts[1], partitions), ts[0], ts[1])
			e, err := byPart.Get(ctx, key)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if got, want := string(e.Value()), value(ts[0], ts[1]); got != want {
				return fmt.Errorf("%s holds %q, want %q", key, got, want)
			}
		}
		return nil
	})
}

func TestSessions_by_partition_holds_each_record_under_its_partition_and_takes_no_write(t *testing.T) {
	const P = 8
	_, _, js := bustest.StartProvisioned(t, bus.ProvisionConfig{Partitions: P})
	ctx := testContext(t)
	sessions, err := bus.OpenBucket(ctx, js, bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		for _, ts := range sessionPairs {
			if _, err := sessions.Put(ctx, ts[0]+"."+ts[1], fmt.Appendf(nil, "%s/%s round %d", ts[0], ts[1], round)); err != nil {
				t.Fatal(err)
			}
		}
		waitCopied(t, ctx, js, P, func(tenant, session string) string { return fmt.Sprintf("%s/%s round %d", tenant, session, round) })
	}

	// A watch of one partition's keys sees that partition's records, and
	// only those: what a runner holding it hears.
	byPart, err := bus.OpenBucket(ctx, js, bus.BucketSessionsByPartition)
	if err != nil {
		t.Fatal(err)
	}
	p := bus.PartitionFor("acme", "s1", P)
	var want []string
	for _, ts := range sessionPairs {
		if bus.PartitionFor(ts[0], ts[1], P) == p {
			want = append(want, bus.SessionsByPartitionKey(p, ts[0], ts[1]))
		}
	}
	w, err := byPart.WatchFiltered(ctx, []string{bus.SessionsByPartitionFilter(p)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var got []string
	for e := range w.Updates() {
		if e == nil {
			break
		}
		got = append(got, e.Key())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("partition %d's watch saw %v, want %v", p, got, want)
	}

	// Nothing but the copy writes it: the stream takes no subject, so a
	// forged record has nowhere to land, and it allows no delete.
	info, err := js.Stream(ctx, bus.StreamSessionsByPartition)
	if err != nil {
		t.Fatal(err)
	}
	if c := info.CachedInfo().Config; len(c.Subjects) != 0 || !c.DenyDelete || c.MaxMsgsPerSubject != 1 {
		t.Errorf("%s: subjects %v, deny delete %v, values per key %d; want no subjects, deletes denied, one value", c.Name, c.Subjects, c.DenyDelete, c.MaxMsgsPerSubject)
	}
	forged := "$KV." + bus.BucketSessionsByPartition + "." + bus.SessionsByPartitionKey(p, "acme", "s1")
	if _, err := js.Publish(ctx, forged, []byte("forged")); err == nil {
		t.Errorf("a publish to %s was stored", forged)
	}
	if _, err := byPart.Put(ctx, bus.SessionsByPartitionKey(p, "acme", "s1"), []byte("forged")); err == nil {
		t.Errorf("a put into %s was stored", bus.BucketSessionsByPartition)
	}
}

func TestSessions_by_partition_is_copied_again_when_P_changes(t *testing.T) {
	dir := t.TempDir()
	start := func(partitions int) (*server.Server, jetstream.JetStream) {
		s, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: dir, ServerName: "test", Partitions: partitions})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bus.StopEmbedded(s) })
		_, js := bustest.Connect(t, s.ClientURL())
		return s, js
	}
	ctx := testContext(t)
	value := func(tenant, session string) string { return tenant + "/" + session }

	s4, js := start(4)
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	sessions, err := bus.OpenBucket(ctx, js, bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range sessionPairs {
		if _, err := sessions.Put(ctx, ts[0]+"."+ts[1], []byte(value(ts[0], ts[1]))); err != nil {
			t.Fatal(err)
		}
	}
	waitCopied(t, ctx, js, 4, value)
	bus.StopEmbedded(s4)

	_, js = start(8)
	var lines []string
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Progress: func(l string) { lines = append(lines, l) }}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(lines, func(l string) bool {
		return strings.Contains(l, bus.StreamSessionsByPartition) && strings.Contains(l, "8 partitions")
	}) {
		t.Errorf("provisioning 8 partitions did not say the copy is made again: %q", lines)
	}
	waitCopied(t, ctx, js, 8, value)
	st, err := js.Stream(ctx, bus.StreamSessionsByPartition)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != uint64(len(sessionPairs)) {
		t.Errorf("the copy holds %d records after P changed, want %d (none left under the old partitions)", n, len(sessionPairs))
	}
}
