package kvmirror

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrWatchClosed is a snapshot's watch that ended before it had delivered
// every entry: what was read is not the bucket, so it is not returned.
var ErrWatchClosed = errors.New("the watch closed before the last entry")

// Snapshot reads the live entries of kv matching filters (every key with
// none) once, in a single watch rather than a Get per key. It is the
// one-shot sibling of a Mirror, for a request that needs an answer or an
// error now rather than a copy kept up to date: nothing is retried, and a
// watch that ends early is an error, never a shorter list. ctx bounds it.
func Snapshot(ctx context.Context, kv jetstream.KeyValue, filters ...string) ([]jetstream.KeyValueEntry, error) {
	var w jetstream.KeyWatcher
	var err error
	if len(filters) == 0 {
		w, err = kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	} else {
		w, err = kv.WatchFiltered(ctx, filters, jetstream.IgnoreDeletes())
	}
	if err != nil {
		return nil, fmt.Errorf("read bucket %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }() // a one-shot watch: nothing to do if its stop fails
	var out []jetstream.KeyValueEntry
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("read bucket %s: %w", kv.Bucket(), ErrWatchClosed)
			}
			if e == nil {
				return out, nil
			}
			out = append(out, e)
		case <-ctx.Done():
			return nil, fmt.Errorf("read bucket %s: %w", kv.Bucket(), ctx.Err())
		}
	}
}
