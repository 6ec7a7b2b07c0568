// Package groundstop reads and writes the Ground Stop switches in the
// control bucket: one global switch and one per session. The dispatcher
// flips them; runners hold runs by them, from a Mirror, before starting a
// run or making a model call; the notifier tells a session when its switch
// changes. It is part of the control plane the services share (pkg/control),
// so none of them imports another.
//
// A switch that is on is a key holding a JSON Record; off is the key deleted
// (a delete marker, so the bucket's history still shows who switched it off).
//
//	groundstop                       global: no session runs anywhere (operators only)
//	groundstop.<tenant>              every session of one tenant
//	groundstop.<tenant>.<session>    this session only
package groundstop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/events"
)

// KeyGlobal is the key of the global switch; per-session keys extend it.
const KeyGlobal = "groundstop"

// WatchPattern matches every Ground Stop key, for KeyValue.Watch.
const WatchPattern = KeyGlobal + ".>"

// Record is what an active switch holds.
type Record struct {
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by"` // the tenant (or "operator") whose token set it
	At     time.Time `json:"at"`
}

// Key is the control-bucket key of the switch for tenant/session, of the
// tenant's switch when session is empty, or of the global switch when both
// are. Tenant and session must follow the subject token rule, which also
// keeps them valid KV key tokens.
func Key(tenant, session string) (string, error) {
	if tenant == "" && session == "" {
		return KeyGlobal, nil
	}
	if err := events.ValidateToken("tenant", tenant); err != nil {
		return "", err
	}
	if session == "" {
		return KeyGlobal + "." + tenant, nil
	}
	if err := events.ValidateToken("session", session); err != nil {
		return "", err
	}
	return KeyGlobal + "." + tenant + "." + session, nil
}

// Set turns a switch on and returns the entry's revision.
func Set(ctx context.Context, kv jetstream.KeyValue, tenant, session string, rec Record) (uint64, error) {
	key, err := Key(tenant, session)
	if err != nil {
		return 0, err
	}
	if rec.At.IsZero() {
		rec.At = time.Now().UTC()
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("groundstop: encode %s: %w", key, err)
	}
	rev, err := kv.Put(ctx, key, b)
	if err != nil {
		return 0, fmt.Errorf("groundstop: set %s: %w", key, err)
	}
	return rev, nil
}

// Clear turns a switch off. Clearing a switch that is already off is not
// an error.
func Clear(ctx context.Context, kv jetstream.KeyValue, tenant, session string) error {
	key, err := Key(tenant, session)
	if err != nil {
		return err
	}
	if err := kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("groundstop: clear %s: %w", key, err)
	}
	return nil
}

// Get reads one switch: its record and true when it is on.
func Get(ctx context.Context, kv jetstream.KeyValue, tenant, session string) (Record, bool, error) {
	key, err := Key(tenant, session)
	if err != nil {
		return Record{}, false, err
	}
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return Record{}, false, nil
	case err != nil:
		return Record{}, false, fmt.Errorf("groundstop: read %s: %w", key, err)
	}
	return decode(e), true, nil
}

// Active reports whether tenant/session may not run: the global switch, the
// tenant's or the session's own is on. The record returned is the widest
// one that is on.
func Active(ctx context.Context, kv jetstream.KeyValue, tenant, session string) (Record, bool, error) {
	if rec, on, err := Get(ctx, kv, "", ""); err != nil || on {
		return rec, on, err
	}
	if rec, on, err := Get(ctx, kv, tenant, ""); err != nil || on {
		return rec, on, err
	}
	return Get(ctx, kv, tenant, session)
}

// Switch is one session switch that is on, as Sessions lists them.
type Switch struct {
	Session string
	Record  Record
}

// Sessions lists the tenant's session switches that are on, so a tenant can
// see its own stops without reading any other tenant's keys (the filter
// stays inside groundstop.<tenant>.*).
func Sessions(ctx context.Context, kv jetstream.KeyValue, tenant string) ([]Switch, error) {
	if err := events.ValidateToken("tenant", tenant); err != nil {
		return nil, err
	}
	prefix := KeyGlobal + "." + tenant + "."
	keys, err := kv.ListKeysFiltered(ctx, prefix+"*")
	if err != nil {
		return nil, fmt.Errorf("groundstop: list %s*: %w", prefix, err)
	}
	var out []Switch
	for key := range keys.Keys() {
		session := strings.TrimPrefix(key, prefix)
		rec, on, err := Get(ctx, kv, tenant, session)
		if err != nil {
			_ = keys.Stop()
			return nil, err
		}
		if on {
			out = append(out, Switch{Session: session, Record: rec})
		}
	}
	slices.SortFunc(out, func(a, b Switch) int { return strings.Compare(a.Session, b.Session) })
	return out, nil
}

// All lists every switch that is on, of every tenant, ordered by key: for
// an operator's or a single-machine view, where a switch that survived a
// restart must not go unseen.
func All(ctx context.Context, kv jetstream.KeyValue) ([]Change, error) {
	keys, err := kv.ListKeysFiltered(ctx, KeyGlobal, WatchPattern)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("groundstop: list switches: %w", err)
	}
	var out []Change
	for key := range keys.Keys() {
		tenant, session, ok := scope(key)
		if !ok {
			continue
		}
		rec, on, err := Get(ctx, kv, tenant, session)
		if err != nil {
			_ = keys.Stop()
			return nil, err
		}
		if on {
			out = append(out, Change{Key: key, Tenant: tenant, Session: session, On: true, Record: rec})
		}
	}
	slices.SortFunc(out, func(a, b Change) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
