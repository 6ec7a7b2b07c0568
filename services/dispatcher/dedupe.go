package dispatcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// The duplicate answer (202 {"duplicate": true}) tells a client that
// retried after a lost response that its event is already stored. It used
// to come from JETWAY_EVENTS's stream-wide Nats-Msg-Id window, which made an
// id one tenant chose a duplicate of another tenant's event (two tenants
// both sending "ci-42": the second was never stored), and let anyone
// occupy an id before its owner. JETWAY_EVENTS has no dedupe window now;
// the dispatcher keeps its own record, scoped: a key per tenant, session
// and id in BucketEventIDs, made with Create (which fails if the key is
// there) and living for the duplicate window. Only the dispatcher writes
// that bucket, so nobody else can occupy a key.
//
// Only a caller-chosen id is recorded: an id the dispatcher makes itself is
// new by construction, so the usual input (no id) costs no extra round
// trip. A caller-chosen id costs one KV create, 30–50 µs here
// (BenchmarkPublish, docs/SECURITY.md).

// releaseTimeout bounds undoing a claim; it runs even if the request's
// context has ended.
const releaseTimeout = 5 * time.Second

// eventIDKey is the bucket key of a caller-chosen id: the id is hashed, so
// any printable id makes a valid key and its length does not matter.
func eventIDKey(tenant, session, id string) string {
	sum := sha256.Sum256([]byte(id))
	return tenant + "." + session + "." + hex.EncodeToString(sum[:16])
}

// claimID records a caller-chosen id for tenant and session. dup is true
// when the same tenant's same session already had it within the window;
// release undoes a claim whose publish then failed, so a retry is not
// answered as a duplicate of an event that was never stored. A deployment
// provisioned before the bucket existed gets no duplicate answers (the
// runner still hands an id to the model only once per session).
func (d *eventsCore) claimID(ctx context.Context, tenant, session, id string) (dup bool, release func(), err error) {
	kv, err := d.bucket(ctx, bus.BucketEventIDs)
	if err != nil {
		return false, nil, err
	}
	if kv == nil {
		d.noIDBucket.Do(func() {
			d.log.Warn().Str("bucket", bus.BucketEventIDs).Msg("bucket missing: provision the bus again for duplicate answers")
		})
		return false, func() {}, nil
	}
	key := eventIDKey(tenant, session, id)
	rev, err := kv.Create(ctx, key, []byte(id))
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		return true, nil, nil
	case err != nil:
		return false, nil, unavailable("record event id", err)
	}
	return false, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		_ = kv.Delete(ctx, key, jetstream.LastRevision(rev))
	}, nil
}
