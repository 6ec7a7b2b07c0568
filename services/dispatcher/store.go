package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/bus/kvmirror"
	jobsclient "jetway/services/jobs/client"
)

// store is the bus as every core reads it: the connection, buckets and
// streams opened once and cached, one-shot scans, the session record
// (record.go) and the jobs service's client (detail.go). Each core embeds
// the one store, so a bucket is opened once per dispatcher, not per core.
type store struct {
	nc *nats.Conn
	js jetstream.JetStream

	kvMu sync.Mutex
	kvs  map[string]jetstream.KeyValue
	// streams are the streams read directly (detail.go), under kvMu too;
	// layout is how the event path is divided, read once (detail.go).
	streams map[string]jetstream.Stream
	layout  bus.Layout

	// jobs is the jobs service's client, made at first use (detail.go).
	jobsOnce sync.Once
	jobs     *jobsclient.Client
	jobsErr  error
}

func newStore(nc *nats.Conn, js jetstream.JetStream) *store {
	return &store{nc: nc, js: js, kvs: map[string]jetstream.KeyValue{}, streams: map[string]jetstream.Stream{}}
}

func (d *store) controlBucket(ctx context.Context) (jetstream.KeyValue, error) {
	return d.requiredBucket(ctx, bus.BucketControl, "Control")
}

// requiredBucket is bucket for a caller that cannot do without it (a
// write, a switch): one that does not exist is a 503 saying to provision
// the bus, titled "<what> bucket missing".
func (d *store) requiredBucket(ctx context.Context, name, what string) (jetstream.KeyValue, error) {
	kv, err := d.bucket(ctx, name)
	if err != nil {
		return nil, err
	}
	if kv == nil {
		return nil, problemf(http.StatusServiceUnavailable, "unavailable", what+" bucket missing",
			"bucket %s does not exist; provision the bus first", name)
	}
	return kv, nil
}

// bucket opens a KV bucket once and caches it. A bucket that does not exist
// yet is (nil, nil): nothing has been recorded, which listings report as an
// empty list.
func (d *store) bucket(ctx context.Context, name string) (jetstream.KeyValue, error) {
	d.kvMu.Lock()
	defer d.kvMu.Unlock()
	if kv, ok := d.kvs[name]; ok {
		return kv, nil
	}
	kv, err := bus.BindBucket(ctx, d.js, name)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return nil, nil
	case err != nil:
		return nil, unavailable("open bucket "+name, err)
	}
	d.kvs[name] = kv
	return kv, nil
}

// scan returns the live entries of bucket matching filter, in one watch
// rather than a Get per key. A one-shot read for one request, not a mirror:
// the request needs an answer or an error now, not a restart with backoff.
func (d *store) scan(ctx context.Context, bucket, filter string) ([]jetstream.KeyValueEntry, error) {
	kv, err := d.bucket(ctx, bucket)
	if err != nil || kv == nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	entries, err := kvmirror.Snapshot(ctx, kv, filter)
	if err != nil {
		return nil, unavailable("list "+bucket, err)
	}
	return entries, nil
}

// readyCheck says whether the dispatcher can do its job: connected to NATS
// and JetStream answering.
func (d *store) readyCheck(ctx context.Context) error {
	if !d.nc.IsConnected() {
		return fmt.Errorf("nats: %s", d.nc.Status())
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := d.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	return nil
}
