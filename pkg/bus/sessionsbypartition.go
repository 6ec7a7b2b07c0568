package bus

import (
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The session records again, under their partition.
//
// A runner must know the live runs of the partitions it holds: its sweep
// recovers those whose runner is gone, even when no event arrives for
// them. Watching jetway_sessions itself, every runner heard every run's
// claim and end, whoever's partition it was, so the bus's work per event
// grew with the number of runners. The server copies each record write
// into jetway_sessions_by_partition under <p>.<tenant>.<session>, the
// partition computed by the function that partitions the events; a
// runner watches the keys of the partitions it holds, and a record write
// reaches one runner, whatever their number.
//
// The copy is a stream with no subjects: only the server's sourcing
// writes it, through a durable source consumer like the shards' (a
// source on the server's ephemeral consumer paused for 20 s when the
// origin's leader went). Its subject transform holds P, so provisioning
// another P makes the copy again (reshard).

const (
	// sessionsByPartitionConsumer is the copy's consumer on jetway_sessions.
	sessionsByPartitionConsumer = "jetway-sessions-by-partition-source"
	sessionsByPartitionDeliver  = "jetway.sourcing.sessions"
)

// SessionsByPartitionKey is the key of a session's record in
// BucketSessionsByPartition.
func SessionsByPartitionKey(p int, tenant, session string) string {
	return strconv.Itoa(p) + "." + tenant + "." + session
}

// SessionsByPartitionFilter is the key filter of partition p's records in
// BucketSessionsByPartition.
func SessionsByPartitionFilter(p int) string { return strconv.Itoa(p) + ".>" }

// SessionsByPartitionTransform is the copy's subject transform for P
// partitions: $KV.jetway_sessions.<tenant>.<session> is stored as
// $KV.jetway_sessions_by_partition.<p>.<tenant>.<session>. partition()
// hashes the tenant and session tokens as PartitionFor does.
func SessionsByPartitionTransform(partitions int) *jetstream.SubjectTransformConfig {
	return &jetstream.SubjectTransformConfig{
		Source:      "$KV." + BucketSessions + ".*.*",
		Destination: fmt.Sprintf("$KV.%s.{{partition(%d,1,2)}}.{{wildcard(1)}}.{{wildcard(2)}}", BucketSessionsByPartition, partitions),
	}
}

// sessionsByPartitionConfig is the copy's stream: a key-value bucket's
// configuration (one value per key, direct gets for readers) with a
// source instead of subjects.
func sessionsByPartitionConfig(cfg ProvisionConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamSessionsByPartition,
		Description: "jetway session records under their partition (the server's copy of " + BucketSessions + ", which each runner watches for the partitions it holds)",
		Sources: []*jetstream.StreamSource{{
			Name:     StreamSessions,
			Consumer: &jetstream.StreamConsumerSource{Name: sessionsByPartitionConsumer, DeliverSubject: sessionsByPartitionDeliver},
		}},
		SubjectTransform:  SessionsByPartitionTransform(cfg.Partitions),
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: 1,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxConsumers:      -1,
		Discard:           jetstream.DiscardNew,
		AllowRollup:       true,
		DenyDelete:        true,
		AllowDirect:       true,
		Duplicates:        2 * time.Minute,
		Storage:           jetstream.FileStorage,
		Replicas:          cfg.Replicas,
	}
}
