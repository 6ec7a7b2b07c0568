package sessionrec_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/control/sessionrec"
)

func bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	return bustest.StartBucket(t, jetstream.KeyValueConfig{Bucket: "sessions", History: 5})
}

func TestA_missing_record_reads_as_idle_at_revision_zero(t *testing.T) {
	kv := bucket(t)
	rec, rev, err := sessionrec.Get(context.Background(), kv, "acme", "s1")
	if err != nil || rev != 0 || rec.State != sessionrec.StateIdle || rec.Tenant != "acme" || rec.Session != "s1" {
		t.Fatalf("missing record = %+v rev %d err %v", rec, rev, err)
	}
}

func TestPut_refuses_a_stale_revision_as_a_lost_session(t *testing.T) {
	kv := bucket(t)
	ctx := context.Background()
	rec := sessionrec.Record{Tenant: "acme", Session: "s1", State: sessionrec.StateRunning, Run: "r1"}
	rev, err := sessionrec.Put(ctx, kv, rec, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionrec.Put(ctx, kv, rec, 0); !errors.Is(err, sessionrec.ErrLost) {
		t.Fatalf("second create: %v, want ErrLost", err)
	}
	rec.State = sessionrec.StateIdle
	if _, err := sessionrec.Put(ctx, kv, rec, rev); err != nil {
		t.Fatalf("update at the read revision: %v", err)
	}
	if _, err := sessionrec.Put(ctx, kv, rec, rev); !errors.Is(err, sessionrec.ErrLost) {
		t.Fatalf("update at a stale revision: %v, want ErrLost", err)
	}
	got, _, err := sessionrec.Get(ctx, kv, "acme", "s1")
	if err != nil || got.State != sessionrec.StateIdle || got.Run != "r1" {
		t.Fatalf("stored %+v, %v", got, err)
	}
}

func TestA_field_this_version_does_not_know_survives_a_read_and_a_write(t *testing.T) {
	stored := `{"tenant":"acme","session":"s1","state":"idle","runs":2,"agent":"reviewer","future":{"kept":[1,2.50,"x"]}}`
	rec, err := sessionrec.Decode([]byte(stored))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Runs != 2 || rec.State != sessionrec.StateIdle {
		t.Fatalf("known fields = %+v", rec)
	}
	rec.Runs = 3
	b, err := sessionrec.Encode(rec.Clone())
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"runs": `3`, "agent": `"reviewer"`, "future": `{"kept":[1,2.50,"x"]}`} {
		if string(fields[k]) != want {
			t.Errorf("%s = %s, want %s", k, fields[k], want)
		}
	}
}

func TestA_stored_value_that_is_not_a_record_is_unreadable(t *testing.T) {
	for _, v := range []string{`[1,2]`, `not json`, `{"state":3}`} {
		if _, err := sessionrec.Decode([]byte(v)); !errors.Is(err, sessionrec.ErrUnreadable) {
			t.Errorf("Decode(%s) = %v, want ErrUnreadable", v, err)
		}
	}
}

// On a three-node cluster a stale compare-and-swap is refused by the
// stream's leader with "wrong last sequence" (10071), not ErrKeyExists; a
// refusal read as another failure would leave a runner believing its run
// live, with the record "running" for a run nobody drives (issue 35). Both
// a stale update and a second create must read as a lost session.
func TestPut_recognises_a_lost_compare_and_swap_on_a_three_node_cluster(t *testing.T) {
	cl := bustest.StartCluster(t, 3)
	_, js := bustest.Connect(t, cl.URLs()...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A cluster just formed may not count every peer as online yet.
	var kv jetstream.KeyValue
	testutil.EventuallyNil(t, 20*time.Second, "the bucket placed on three nodes", func() (err error) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "sessions", History: 5, Replicas: 3})
		return err
	})
	// Created is not led yet: a write before the election goes unanswered.
	testutil.EventuallyNil(t, 20*time.Second, "the bucket's stream led", func() error {
		st, err := js.Stream(ctx, "KV_sessions")
		if err != nil {
			return err
		}
		if ci := st.CachedInfo().Cluster; ci == nil || ci.Leader == "" {
			return errors.New("no leader yet")
		}
		return nil
	})
	rec := sessionrec.Record{Tenant: "acme", Session: "s1", State: sessionrec.StateRunning, Run: "r1"}
	// An election right after the first one can leave a write unanswered
	// ("no response from stream"): the create is tried again, and a retry
	// whose first try landed finds the record already there, its own.
	var rev uint64
	testutil.EventuallyNil(t, 20*time.Second, "the first record written", func() (err error) {
		rev, err = sessionrec.Put(ctx, kv, rec, 0)
		if errors.Is(err, sessionrec.ErrLost) {
			var got sessionrec.Record
			if got, rev, err = sessionrec.Get(ctx, kv, rec.Tenant, rec.Session); err == nil && got.Run != rec.Run {
				t.Fatalf("the first create lost to a record nobody else wrote: %+v", got)
			}
		}
		return err
	})
	rec.Run = "r2"
	if _, err := sessionrec.Put(ctx, kv, rec, rev); err != nil {
		t.Fatal(err)
	}
	rec.Run = "r3"
	_, err := sessionrec.Put(ctx, kv, rec, rev)
	if !errors.Is(err, sessionrec.ErrLost) {
		t.Fatalf("stale update on the cluster: %v, want ErrLost", err)
	}
	if _, err := sessionrec.Put(ctx, kv, rec, 0); !errors.Is(err, sessionrec.ErrLost) {
		t.Fatalf("second create on the cluster: %v, want ErrLost", err)
	}
}
