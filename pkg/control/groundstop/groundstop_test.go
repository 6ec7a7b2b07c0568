package groundstop_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus/bustest"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/events"
)

func bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	return bustest.StartBucket(t, jetstream.KeyValueConfig{Bucket: "control", History: 5})
}

func TestKey_global_and_per_session(t *testing.T) {
	if k, err := groundstop.Key("", ""); err != nil || k != "groundstop" {
		t.Fatalf("global key %q, %v", k, err)
	}
	if k, err := groundstop.Key("acme", "s1"); err != nil || k != "groundstop.acme.s1" {
		t.Fatalf("session key %q, %v", k, err)
	}
	if _, err := groundstop.Key("acme", "a.b"); !errors.Is(err, events.ErrInvalidToken) {
		t.Fatalf("bad session: %v, want ErrInvalidToken", err)
	}
	if _, err := groundstop.Key("", "s1"); !errors.Is(err, events.ErrInvalidToken) {
		t.Fatalf("session without tenant: %v, want ErrInvalidToken", err)
	}
}

func TestActive_sees_the_global_switch_for_every_session(t *testing.T) {
	kv := bucket(t)
	ctx := context.Background()
	if _, on, err := groundstop.Active(ctx, kv, "acme", "s1"); err != nil || on {
		t.Fatalf("fresh bucket: on=%v err=%v", on, err)
	}
	if _, err := groundstop.Set(ctx, kv, "", "", groundstop.Record{Reason: "bill", By: "ops"}); err != nil {
		t.Fatal(err)
	}
	rec, on, err := groundstop.Active(ctx, kv, "acme", "s1")
	if err != nil || !on || rec.Reason != "bill" || rec.At.IsZero() {
		t.Fatalf("after global set: %+v on=%v err=%v", rec, on, err)
	}
	if err := groundstop.Clear(ctx, kv, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, on, _ := groundstop.Active(ctx, kv, "acme", "s1"); on {
		t.Fatal("still on after Clear")
	}
	if err := groundstop.Clear(ctx, kv, "", ""); err != nil {
		t.Fatalf("clearing an off switch: %v", err)
	}
}

func TestActive_per_session_switch_stops_only_that_session(t *testing.T) {
	kv := bucket(t)
	ctx := context.Background()
	if _, err := groundstop.Set(ctx, kv, "acme", "s1", groundstop.Record{By: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, on, _ := groundstop.Active(ctx, kv, "acme", "s1"); !on {
		t.Fatal("acme/s1 not stopped")
	}
	for _, other := range [][2]string{{"acme", "s2"}, {"globex", "s1"}} {
		if _, on, _ := groundstop.Active(ctx, kv, other[0], other[1]); on {
			t.Fatalf("%s/%s stopped too", other[0], other[1])
		}
	}
}

func TestGet_treats_a_hand_written_value_as_on(t *testing.T) {
	kv := bucket(t)
	ctx := context.Background()
	if _, err := kv.PutString(ctx, groundstop.KeyGlobal, "stop everything"); err != nil {
		t.Fatal(err)
	}
	rec, on, err := groundstop.Get(ctx, kv, "", "")
	if err != nil || !on || rec.Reason != "stop everything" {
		t.Fatalf("%+v on=%v err=%v", rec, on, err)
	}
}

func TestActive_tenant_switch_stops_every_session_of_that_tenant_only(t *testing.T) {
	kv := bucket(t)
	ctx := context.Background()
	if k, err := groundstop.Key("acme", ""); err != nil || k != "groundstop.acme" {
		t.Fatalf("tenant key %q, %v", k, err)
	}
	if _, err := groundstop.Set(ctx, kv, "acme", "", groundstop.Record{Reason: "acme bill", By: "acme"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "s2"} {
		if rec, on, err := groundstop.Active(ctx, kv, "acme", s); err != nil || !on || rec.Reason != "acme bill" {
			t.Fatalf("acme/%s: %+v on=%v err=%v", s, rec, on, err)
		}
	}
	if _, on, err := groundstop.Active(ctx, kv, "globex", "s1"); err != nil || on {
		t.Fatalf("globex/s1 stopped by acme's switch: on=%v err=%v", on, err)
	}
}

func TestSessions_lists_only_the_tenants_own_switches(t *testing.T) {
	kv := bucket(t)
	ctx := context.Background()
	for _, sw := range [][3]string{{"acme", "s2", "acme two"}, {"acme", "s1", "acme one"}, {"globex", "s1", "globex secret"}, {"acmex", "s1", "prefix twin"}} {
		if _, err := groundstop.Set(ctx, kv, sw[0], sw[1], groundstop.Record{Reason: sw[2], By: sw[0]}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := groundstop.Set(ctx, kv, "acme", "", groundstop.Record{Reason: "whole tenant"}); err != nil {
		t.Fatal(err)
	}
	if err := groundstop.Clear(ctx, kv, "acme", "s2"); err != nil {
		t.Fatal(err)
	}
	got, err := groundstop.Sessions(ctx, kv, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Session != "s1" || got[0].Record.Reason != "acme one" {
		t.Fatalf("acme's switches = %+v, want only s1 (acme one)", got)
	}
}
