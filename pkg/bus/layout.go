package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// The sharded event path.
//
// A session's partition is decided once, when its event is published: a
// subject mapping in the JETWAY account (the server's partition() transform,
// FNV-1a over tenant and session) turns jetway.events.<tenant>.<session>
// into jetway.events.<p>.<tenant>.<session>, and does the same for job and
// sub-agent events. It acts after a tenant account's import too, so what a
// tenant publishes is partitioned like what the dispatcher publishes.
//
// Partition p lives in shard p mod K: the work stream JETWAY_WORK_<k>
// captures the events of its partitions directly, with no stream in
// between, and each partition has one pinned durable consumer on its
// shard. K shards have K leaders, which a cluster spreads over its nodes,
// so adding nodes adds capacity to the event path. P is the unit runners
// divide among themselves; K is the unit the servers divide.
//
// The mapping is server configuration, so P is too: the server is where
// it is decided, and provisioning reads it back from the server (see
// ServerPartitions) rather than being told it.

// DefaultShards is K when a ProvisionConfig does not say.
const DefaultShards = 1

// StreamWorkPrefix starts the name of every shard: JETWAY_WORK_<k>.
const StreamWorkPrefix = "JETWAY_WORK_"

// MetadataShards is the shard streams' metadata key recording K.
const MetadataShards = "jetway.shards"

// WorkStream is the name of shard k.
func WorkStream(k int) string { return StreamWorkPrefix + strconv.Itoa(k) }

// ShardOf is the shard holding partition p of K.
func ShardOf(p, shards int) int {
	if shards <= 1 {
		return 0
	}
	return p % shards
}

// WorkStreamOf is the shard stream holding partition p of K.
func WorkStreamOf(p, shards int) string { return WorkStream(ShardOf(p, shards)) }

// partitionedKinds are the subject kinds whose subjects the JETWAY
// account's mapping partitions: everything a runner consumes.
var partitionedKinds = []string{"events", "jobevents", "agentevents"}

// LayoutProbe is the subject the mapping answers with P
// (jetway.layout.partitions.<P>), so a service can read P from the server
// it is connected to. Nothing captures it; only the mapping gives it P,
// and it exists in the JETWAY account alone (the attack suites try it
// from a tenant's).
const LayoutProbe = "jetway.layout.partitions"

// Mapping is one subject mapping of the JETWAY account.
type Mapping struct{ From, To string }

// PartitionMappings are the JETWAY account's subject mappings for P
// partitions: each partitioned kind gets the partition as its third token,
// and the layout probe answers with P.
func PartitionMappings(partitions int) []Mapping {
	var ms []Mapping
	for _, kind := range partitionedKinds {
		ms = append(ms, Mapping{
			From: "jetway." + kind + ".*.*",
			To:   fmt.Sprintf("jetway.%s.{{partition(%d,1,2)}}.{{wildcard(1)}}.{{wildcard(2)}}", kind, partitions),
		})
	}
	return append(ms, Mapping{From: LayoutProbe, To: LayoutProbe + "." + strconv.Itoa(partitions)})
}

// MappingsConf is the mappings block of the JETWAY account for P
// partitions, as it appears in a nats-server configuration.
func MappingsConf(partitions int, indent string) string {
	var b strings.Builder
	b.WriteString(indent + "# Each session's events go to one of " + strconv.Itoa(partitions) + " partitions, decided here\n")
	b.WriteString(indent + "# (bus.MappingsConf; change only with the work streams drained).\n")
	b.WriteString(indent + "mappings: {\n")
	for _, m := range PartitionMappings(partitions) {
		fmt.Fprintf(&b, "%s  %q: %q\n", indent, m.From, m.To)
	}
	b.WriteString(indent + "}\n")
	return b.String()
}

// ErrNoPartitionMapping: the server does not partition jetway's subjects,
// so events would reach no work stream.
var ErrNoPartitionMapping = errors.New("the server has no jetway partition mapping: its JETWAY account needs the mappings block of bus.MappingsConf (docs/OPERATIONS.md \"Partitions and shards\")")

// ServerPartitions asks the server nc is connected to for P, through the
// layout probe its mapping answers.
func ServerPartitions(ctx context.Context, nc *nats.Conn) (int, error) {
	sub, err := nc.SubscribeSync(LayoutProbe + ".*")
	if err != nil {
		return 0, fmt.Errorf("bus: read partitions from the server: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Publish(LayoutProbe, nil); err != nil {
		return 0, fmt.Errorf("bus: read partitions from the server: %w", err)
	}
	wait := 2 * time.Second
	if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
		wait = time.Until(d)
	}
	m, err := sub.NextMsg(wait)
	if errors.Is(err, nats.ErrTimeout) {
		return 0, fmt.Errorf("bus: %w", ErrNoPartitionMapping)
	}
	if err != nil {
		return 0, fmt.Errorf("bus: read partitions from the server: %w", err)
	}
	p, err := strconv.Atoi(strings.TrimPrefix(m.Subject, LayoutProbe+"."))
	if err != nil || p <= 0 {
		return 0, fmt.Errorf("bus: the server's partition mapping answers %q: not a partition count", m.Subject)
	}
	return p, nil
}
