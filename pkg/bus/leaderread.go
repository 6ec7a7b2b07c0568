package bus

import (
	"cmp"
	"context"
	"encoding/json"
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
// bound a session to. nats.go makes every bucket allow direct gets, which
// any replica answers, and a replica may not yet have applied a write its
// leader acknowledged: on a cluster it says "not found", or gives the
// value before. These buckets' reads are few (a profile per run, a
// switch per request that shows one, a binding per session a runner
// first serves), so they go to the stream's leader, which has applied
// every write it acknowledged. The session records, read on every run,
// keep direct gets: each write to them is a compare-and-swap, which a
// stale read only makes fail and retry.
var LeaderReadBuckets = []string{BucketAgents, BucketControl, BucketWorkers}

// BindBucket binds the key-value bucket name as js.KeyValue does; for a
// bucket of LeaderReadBuckets, its Get and GetRevision ask the bucket
// stream's leader. Every service binds its buckets through here, so which
// reads see the latest write is decided in one place.
func BindBucket(ctx context.Context, js jetstream.JetStream, name string) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, name)
	if err != nil || !slices.Contains(LeaderReadBuckets, name) {
		return kv, err
	}
	return &leaderReads{KeyValue: kv, js: js, stream: "KV_" + name, prefix: "$KV." + name + "."}, nil
}

// MsgRequest asks a stream for one message: the one at Seq; the last of
// subject LastFor; or the first of subject NextFor at or after Seq.
type MsgRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
}

// StoredMsg is one message as a stream's leader returns it.
type StoredMsg struct {
	Subject  string
	Sequence uint64
	Header   nats.Header
	Data     []byte
	Time     time.Time
}

// LeaderGet asks stream's leader for one message (STREAM.MSG.GET).
// nats.go's own message gets turn into direct gets, which any replica
// answers, whenever the stream allows them; a read that must see every
// acknowledged write (a fence, a record just written) asks here. A
// message that is not there is jetstream.ErrMsgNotFound; a ctx without a
// deadline is bounded by js's default timeout.
func LeaderGet(ctx context.Context, js jetstream.JetStream, stream string, req MsgRequest) (StoredMsg, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return StoredMsg{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(js.Options().DefaultTimeout, 5*time.Second))
		defer cancel()
	}
	reply, err := js.Conn().RequestWithContext(ctx, APIPrefix(js)+"STREAM.MSG.GET."+stream, data)
	if err != nil {
		return StoredMsg{}, fmt.Errorf("message get from %s: %w", stream, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error,omitempty"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs,omitempty"`
			Data     []byte    `json:"data,omitempty"`
			Time     time.Time `json:"time"`
		} `json:"message,omitempty"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return StoredMsg{}, fmt.Errorf("message get from %s: %w", stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return StoredMsg{}, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return StoredMsg{}, fmt.Errorf("message get from %s: %w", stream, resp.Error)
	case resp.Message == nil:
		return StoredMsg{}, jetstream.ErrInvalidJetStreamResponse
	}
	m := StoredMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Sequence, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return StoredMsg{}, fmt.Errorf("message get from %s: headers of %d: %w", stream, m.Sequence, err)
		}
	}
	return m, nil
}

// APIPrefix is the subject prefix js sends its API requests with, ending
// in a dot, for the requests made by hand: the nats.go jetstream package
// keeps its own unexported, so it is made again from the options the same
// way (a domain wins).
func APIPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix == "":
		return jetstream.DefaultAPIPrefix
	case strings.HasSuffix(o.APIPrefix, "."):
		return o.APIPrefix
	default:
		return o.APIPrefix + "."
	}
}

// leaderReads is a bucket whose Get and GetRevision read the stream's
// leader.
type leaderReads struct {
	jetstream.KeyValue
	js     jetstream.JetStream
	stream string
	prefix string
}

// Get reads key's latest value from the bucket stream's leader, with
// jetstream.KeyValue's errors: ErrKeyNotFound for a key never put,
// deleted or purged.
func (b *leaderReads) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	return b.read(ctx, key, MsgRequest{LastFor: b.prefix + key})
}

// GetRevision reads key as it was at revision from the leader, as Get
// does: a version recorded a moment before is there too.
func (b *leaderReads) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	return b.read(ctx, key, MsgRequest{Seq: revision})
}

// read validates key, asks the leader and turns its message into an entry.
func (b *leaderReads) read(ctx context.Context, key string, req MsgRequest) (jetstream.KeyValueEntry, error) {
	if key == "" || strings.ContainsAny(key, "*> \t") || strings.HasPrefix(key, ".") || strings.HasSuffix(key, ".") {
		return nil, jetstream.ErrInvalidKey
	}
	m, err := LeaderGet(ctx, b.js, b.stream, req)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, jetstream.ErrKeyNotFound
	case err != nil:
		return nil, fmt.Errorf("bus: read %s: %w", key, err)
	case m.Subject != b.prefix+key, operationOf(m.Header) != jetstream.KeyValuePut:
		return nil, jetstream.ErrKeyNotFound // another key's revision, or a delete or purge marker
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
