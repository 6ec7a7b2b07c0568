package bus

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// WorkGroup is the priority group every runner names when it pulls from a
// work consumer; pinning is per group.
const WorkGroup = "runners"

// WorkConsumerPrefix starts the name of every work consumer: work-<p>.
const WorkConsumerPrefix = "work-"

// WorkConsumerName is the durable consumer for partition p.
func WorkConsumerName(p int) string {
	return WorkConsumerPrefix + strconv.Itoa(p)
}

// PartitionFilter is the subject filter of partition p's events of every
// kind.
func PartitionFilter(p int) string {
	return "jetway.*." + strconv.Itoa(p) + ".*.*"
}

// SessionFilter is the subject filter of one session's events of every
// kind in its partition p.
func SessionFilter(p int, tenant, session string) string {
	return "jetway.*." + strconv.Itoa(p) + "." + tenant + "." + session
}

// PartitionFor computes the partition the server's mapping assigns to a
// session: FNV-1a over tenant then session, modulo partitions. It lets a
// runner or a test know where a session lands without publishing.
func PartitionFor(tenant, session string, partitions int) int {
	if partitions <= 0 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(tenant))
	h.Write([]byte(session))
	return int(h.Sum32() % uint32(partitions))
}

// WorkConsumerConfig is the configuration of the durable pull consumer for
// partition p. MaxAckPending is deliberately large: a busy session holds its
// notices un-acked, and a small limit would stall every other session of the
// partition.
func WorkConsumerConfig(p int, cfg ProvisionConfig) jetstream.ConsumerConfig {
	cfg = cfg.withDefaults()
	return jetstream.ConsumerConfig{
		Durable:        WorkConsumerName(p),
		Description:    fmt.Sprintf("jetway runners, work partition %d", p),
		FilterSubject:  PartitionFilter(p),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        cfg.WorkAckWait,
		MaxAckPending:  cfg.WorkMaxAckPending,
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PinnedTTL:      cfg.WorkPinnedTTL,
		PriorityGroups: []string{WorkGroup},
		Replicas:       cfg.Replicas,
	}
}

// EnsureWorkConsumers creates or updates the P work consumers, each on
// its shard. When cfg.Partitions is zero, P and K are read back from the
// shards, so a runner need not be told them.
func EnsureWorkConsumers(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig) error {
	if cfg.Partitions <= 0 {
		l, err := ReadLayout(ctx, js)
		if err != nil {
			return fmt.Errorf("bus: work consumers: %w", err)
		}
		cfg.Partitions, cfg.Shards = l.Partitions, l.Shards
	}
	cfg = cfg.withDefaults()
	for p := range cfg.Partitions {
		cc := WorkConsumerConfig(p, cfg)
		err := whilePlacing(ctx, func(ctx context.Context) error {
			_, err := js.CreateOrUpdateConsumer(ctx, WorkStreamOf(p, cfg.Shards), cc)
			return err
		})
		if err != nil {
			return fmt.Errorf("bus: work consumer %s: %w", cc.Durable, err)
		}
	}
	cfg.progress("%d work consumers ready (%s0..%s%d, group %q)", cfg.Partitions,
		WorkConsumerPrefix, WorkConsumerPrefix, cfg.Partitions-1, WorkGroup)
	return nil
}
