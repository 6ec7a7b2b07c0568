package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// reshard makes room for a changed layout before the shards are made: a
// shard beyond K is deleted, and a work consumer left on a shard that no
// longer holds its partition. Events move between shards only as they are
// published, so P and K change only with the shards drained; reshard
// refuses, changing nothing, while a shard still holds an event.
func reshard(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig) error {
	was, err := ReadLayout(ctx, js)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // no shards yet
	}
	if err != nil {
		return err
	}
	if was.Partitions == cfg.Partitions && was.Shards == cfg.Shards {
		return nil
	}
	shards, err := existingShards(ctx, js)
	if err != nil {
		return err
	}
	for _, st := range shards {
		info, err := st.Info(ctx)
		if err != nil {
			return fmt.Errorf("read shard: %w", err)
		}
		if n := info.State.Msgs; n > 0 {
			return fmt.Errorf("%d partitions over %d shards asked for, the shards have %d over %d, and %s still holds %d events: change them only with the shards drained (no event waiting, no run live)",
				cfg.Partitions, cfg.Shards, was.Partitions, was.Shards, info.Config.Name, n)
		}
	}
	if was.Partitions != cfg.Partitions {
		if err := dropSessionsByPartition(ctx, js); err != nil {
			return err
		}
		cfg.progress("%s dropped: it is copied again under %d partitions", StreamSessionsByPartition, cfg.Partitions)
	}
	for _, st := range shards {
		name := st.CachedInfo().Config.Name
		k, _ := strconv.Atoi(strings.TrimPrefix(name, StreamWorkPrefix))
		if k >= cfg.Shards {
			if err := js.DeleteStream(ctx, name); err != nil {
				return fmt.Errorf("delete shard %s: %w", name, err)
			}
			cfg.progress("shard %s deleted: %d shards now", name, cfg.Shards)
			continue
		}
		for c := range st.ConsumerNames(ctx).Name() {
			p, err := strconv.Atoi(strings.TrimPrefix(c, WorkConsumerPrefix))
			if !strings.HasPrefix(c, WorkConsumerPrefix) || err != nil {
				continue // not a work consumer (the log's source)
			}
			if p < cfg.Partitions && ShardOf(p, cfg.Shards) == k {
				continue
			}
			if err := st.DeleteConsumer(ctx, c); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return fmt.Errorf("delete work consumer %s of %s: %w", c, name, err)
			}
			cfg.progress("work consumer %s left %s: its partition is elsewhere now", c, name)
		}
	}
	return nil
}

// existingShards are the shard streams there are, whatever K.
func existingShards(ctx context.Context, js jetstream.JetStream) ([]jetstream.Stream, error) {
	var out []jetstream.Stream
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		if _, err := strconv.Atoi(strings.TrimPrefix(name, StreamWorkPrefix)); err != nil || !strings.HasPrefix(name, StreamWorkPrefix) {
			continue
		}
		st, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("read shard %s: %w", name, err)
		}
		out = append(out, st)
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("list the shards: %w", err)
	}
	return out, nil
}

// dropSessionsByPartition deletes the copy of the session records and its
// source consumer, whose keys hold the old P; provisioning makes both
// again, and the copy starts from the first record.
func dropSessionsByPartition(ctx context.Context, js jetstream.JetStream) error {
	if err := js.DeleteStream(ctx, StreamSessionsByPartition); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete %s: %w", StreamSessionsByPartition, err)
	}
	err := js.DeleteConsumer(ctx, StreamSessions, sessionsByPartitionConsumer)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete %s's source consumer on %s: %w", StreamSessionsByPartition, StreamSessions, err)
	}
	return nil
}
