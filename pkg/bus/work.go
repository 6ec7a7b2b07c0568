package bus

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

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

// PartitionOf returns the partition a JETWAY_WORK subject
// (<p>.jetway.events.<tenant>.<session>) belongs to.
func PartitionOf(subject string) (int, error) {
	head, _, ok := strings.Cut(subject, ".")
	if !ok {
		return 0, fmt.Errorf("bus: %q is not a work subject", subject)
	}
	p, err := strconv.Atoi(head)
	if err != nil || p < 0 {
		return 0, fmt.Errorf("bus: %q is not a work subject: no partition number first", subject)
	}
	return p, nil
}

// PartitionFor computes the partition the server's transform assigns to a
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
		FilterSubject:  strconv.Itoa(p) + ".>",
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

// EnsureWorkConsumers creates or updates the P work consumers on
// JETWAY_WORK. When cfg.Partitions is zero, P is read back from the stream,
// so a runner need not be told it.
func EnsureWorkConsumers(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig) error {
	if cfg.Partitions <= 0 {
		p, err := Partitions(ctx, js)
		if err != nil {
			return fmt.Errorf("bus: work consumers: %w", err)
		}
		cfg.Partitions = p
	}
	cfg = cfg.withDefaults()
	for p := range cfg.Partitions {
		cc := WorkConsumerConfig(p, cfg)
		err := whilePlacing(ctx, func(ctx context.Context) error {
			_, err := js.CreateOrUpdateConsumer(ctx, StreamWork, cc)
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
