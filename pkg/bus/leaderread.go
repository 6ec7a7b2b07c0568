package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// LeaderReadBuckets are the buckets whose Get must see a write made a
// moment before, by anyone: an agent profile put through the API and
// named by the next input, a sign-in code spent as soon as it is made, a
// layover cancelled as soon as it is booked, a Ground Stop switch read
// back right after it was flipped, the jobs worker another runner just
// bound a session to. nats.go makes every bucket allow direct gets, which any
// replica answers, and a replica may not yet have applied a write its
// leader acknowledged: on a cluster it says "not found", or gives the
// value before. These buckets' reads are few (a profile per run, a
// switch per request that shows one, a binding per session a runner
// first serves), so they go to the stream's leader, which has applied every write it
// acknowledged. The session records, read on every run, keep direct
// gets: each write to them is a compare-and-swap, which a stale read
// only makes fail and retry.
var LeaderReadBuckets = []string{BucketAgents, BucketControl, BucketWorkers}

// BindBucket binds the key-value bucket name as js.KeyValue does; for a
// bucket of LeaderReadBuckets, its Get and GetRevision ask the bucket
// stream's leader.
// Every service binds its buckets through here, so which reads see the
// latest write is decided in one place.
func BindBucket(ctx context.Context, js jetstream.JetStream, name string) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, name)
	if err != nil || !slices.Contains(LeaderReadBuckets, name) {
		return kv, err
	}
	// The older JetStream API asks for a message by subject without a
	// direct get unless told to (the newer one uses a direct get whenever
	// the stream allows it): that is the leader's answer.
	legacy, err := js.Conn().JetStream()
	if err != nil {
		return nil, fmt.Errorf("bus: bucket %s: %w", name, err)
	}
	return &leaderReads{KeyValue: kv, legacy: legacy, stream: "KV_" + name, prefix: "$KV." + name + "."}, nil
}

// leaderReads is a bucket whose Get reads the stream's leader.
type leaderReads struct {
	jetstream.KeyValue
	legacy nats.JetStreamContext
	stream string
	prefix string
}

// Get reads key's latest value from the bucket stream's leader, with
// jetstream.KeyValue's errors: ErrKeyNotFound for a key never put,
// deleted or purged.
func (b *leaderReads) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	return b.read(ctx, key, func(ctx context.Context) (*nats.RawStreamMsg, error) {
		return b.legacy.GetLastMsg(b.stream, b.prefix+key, nats.Context(ctx))
	})
}

// GetRevision reads key as it was at revision from the leader, as Get
// does: a version recorded a moment before is there too.
func (b *leaderReads) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	return b.read(ctx, key, func(ctx context.Context) (*nats.RawStreamMsg, error) {
		m, err := b.legacy.GetMsg(b.stream, revision, nats.Context(ctx))
		if err == nil && m.Subject != b.prefix+key {
			return nil, nats.ErrMsgNotFound // another key's revision
		}
		return m, err
	})
}

// read validates key and turns get's message into an entry. A context
// without a deadline is bounded by nats.go (five seconds).
func (b *leaderReads) read(ctx context.Context, key string, get func(context.Context) (*nats.RawStreamMsg, error)) (jetstream.KeyValueEntry, error) {
	if key == "" || strings.ContainsAny(key, "*> \t") || strings.HasPrefix(key, ".") || strings.HasSuffix(key, ".") {
		return nil, jetstream.ErrInvalidKey
	}
	m, err := get(ctx)
	switch {
	case errors.Is(err, nats.ErrMsgNotFound):
		return nil, jetstream.ErrKeyNotFound
	case err != nil:
		return nil, fmt.Errorf("bus: read %s from the leader of %s: %w", key, b.stream, err)
	}
	if operationOf(m.Header) != jetstream.KeyValuePut {
		return nil, jetstream.ErrKeyNotFound
	}
	return leaderEntry{bucket: b.Bucket(), key: key, value: m.Data, revision: m.Sequence, created: m.Time}, nil
}

// operationOf reads what a bucket's message records, as nats.go's own
// Get does: a delete or purge marker by its KV-Operation header, or by
// the marker the server writes when a key's TTL removes it.
func operationOf(h nats.Header) jetstream.KeyValueOp {
	switch h.Get("KV-Operation") {
	case "DEL":
		return jetstream.KeyValueDelete
	case "PURGE":
		return jetstream.KeyValuePurge
	}
	switch h.Get(jetstream.MarkerReasonHeader) {
	case "MaxAge", "Purge":
		return jetstream.KeyValuePurge
	case "Remove":
		return jetstream.KeyValueDelete
	}
	return jetstream.KeyValuePut
}

// leaderEntry is a value read from the leader.
type leaderEntry struct {
	bucket, key string
	value       []byte
	revision    uint64
	created     time.Time
}

func (e leaderEntry) Bucket() string                  { return e.bucket }
func (e leaderEntry) Key() string                     { return e.key }
func (e leaderEntry) Value() []byte                   { return e.value }
func (e leaderEntry) Revision() uint64                { return e.revision }
func (e leaderEntry) Created() time.Time              { return e.created }
func (e leaderEntry) Delta() uint64                   { return 0 }
func (e leaderEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }
