package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults used when a ProvisionConfig field is zero.
const (
	DefaultReplicas        = 1
	DefaultPartitions      = 16
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultEventsMaxAge    = 7 * 24 * time.Hour
	DefaultOutMaxAge       = time.Hour
	DefaultRunnerTTL       = 15 * time.Second
	DefaultWorkAckWait     = 5 * time.Second
	DefaultWorkMaxAck      = 1000
	DefaultWorkPinnedTTL   = 3 * time.Second
)

// AgentHistory is how many versions of each agent profile the agents
// bucket keeps.
const AgentHistory = 64

// MetadataPartitions is the JETWAY_WORK stream metadata key that records the
// partition count, so consumers can read P back instead of being told it.
const MetadataPartitions = "jetway.partitions"

// ProvisionConfig sizes the streams, buckets and work consumers. Zero values
// take the Default* constants.
type ProvisionConfig struct {
	// Replicas for every stream, bucket and consumer (1 or 3 in practice).
	Replicas int
	// Partitions is P, the number of work partitions. The server decides
	// it (its partition mapping, MappingsConf): zero takes the server's,
	// and Provision refuses a P the server does not map. Changing it on a
	// live system moves sessions between partitions; messages still
	// pending on a partition that no longer exists are stranded, so change
	// it only when the work streams are drained.
	Partitions int
	// Shards is K, the number of work streams the partitions are spread
	// over (partition p in shard p mod K); at most P. Zero keeps the
	// shards there are (DefaultShards when there are none). Changing it
	// moves partitions between shards: only with the shards drained.
	Shards int

	// DuplicateWindow is how long a repeat is recognised: JETWAY_JOBEVENTS
	// and JETWAY_SCHEDULES dedupe windows (Nats-Msg-Id), and the TTL of
	// the dispatcher's per-session id records (BucketEventIDs).
	DuplicateWindow time.Duration
	EventsMaxAge    time.Duration // JETWAY_EVENTS and JETWAY_WORK retention
	// TranscriptsMaxAge is zero for "keep forever": a transcript is the
	// session's memory.
	TranscriptsMaxAge time.Duration
	OutMaxAge         time.Duration // JETWAY_OUT retention
	RunnerTTL         time.Duration // how long a runner heartbeat lives

	WorkAckWait       time.Duration // redelivery timeout of work consumers
	WorkMaxAckPending int           // un-acked messages per partition
	WorkPinnedTTL     time.Duration // how long a silent pin holder keeps its partition

	// Progress, if set, receives one short line per step ("stream JETWAY_EVENTS ready").
	Progress func(line string)
}

func (c ProvisionConfig) withDefaults() ProvisionConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Replicas <= 0 {
		c.Replicas = DefaultReplicas
	}
	if c.Partitions <= 0 {
		c.Partitions = DefaultPartitions
	}
	if c.Shards <= 0 {
		c.Shards = DefaultShards
	}
	def(&c.DuplicateWindow, DefaultDuplicateWindow)
	def(&c.EventsMaxAge, DefaultEventsMaxAge)
	def(&c.OutMaxAge, DefaultOutMaxAge)
	def(&c.RunnerTTL, DefaultRunnerTTL)
	def(&c.WorkAckWait, DefaultWorkAckWait)
	def(&c.WorkPinnedTTL, DefaultWorkPinnedTTL)
	if c.WorkMaxAckPending <= 0 {
		c.WorkMaxAckPending = DefaultWorkMaxAck
	}
	return c
}

func (c ProvisionConfig) progress(format string, args ...any) {
	if c.Progress != nil {
		c.Progress(fmt.Sprintf(format, args...))
	}
}

// Provision creates or updates every stream, bucket and work consumer jetway
// uses. It is idempotent: running it again, or with changed limits, updates
// in place, so every service may call it at start. A deployment whose
// JETWAY_EVENTS still has the shape from before the streams were split
// (schedules and job events in the tenants' stream) is upgraded first (see
// upgradeEvents and docs/OPERATIONS.md "Upgrading").
func Provision(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig) error {
	p, err := ServerPartitions(ctx, js.Conn())
	if err != nil {
		return err
	}
	if cfg.Partitions > 0 && cfg.Partitions != p {
		return fmt.Errorf("bus: provision: %d partitions asked for, but the server maps sessions to %d (its JETWAY account's mappings, bus.MappingsConf): change both together", cfg.Partitions, p)
	}
	cfg.Partitions = p
	if cfg.Shards <= 0 {
		// Keep what the provisioner chose: a service provisioning at its
		// start must not undo it.
		if l, err := ReadLayout(ctx, js); err == nil {
			cfg.Shards = l.Shards
		}
	}
	cfg = cfg.withDefaults()
	if cfg.Shards > cfg.Partitions {
		return fmt.Errorf("bus: provision: %d shards for %d partitions: a shard without a partition would carry nothing", cfg.Shards, cfg.Partitions)
	}
	if err := upgradeEvents(ctx, js, cfg); err != nil {
		return fmt.Errorf("bus: upgrade %s: %w", StreamEvents, err)
	}
	old, err := unshardedWork(ctx, js)
	if err != nil {
		return fmt.Errorf("bus: upgrade %s: %w", StreamWork, err)
	}
	var starts map[string]uint64 // where a new source consumer starts, by origin
	if old != nil {
		firedFrom, err := detachUnsharded(ctx, js, old, cfg)
		if err != nil {
			return fmt.Errorf("bus: upgrade %s: %w", StreamWork, err)
		}
		if firedFrom > 1 {
			starts = map[string]uint64{StreamSchedules: firedFrom}
		}
	}
	if err := reshard(ctx, js, cfg); err != nil {
		return fmt.Errorf("bus: provision: %w", err)
	}
	refiltered, err := refilterLog(ctx, js, cfg)
	if err != nil {
		return fmt.Errorf("bus: upgrade %s: %w", StreamEvents, err)
	}
	// The buckets first: a stream may source one (the session records by
	// partition).
	for _, kc := range BucketConfigs(cfg) {
		err := whilePlacing(ctx, func(ctx context.Context) error {
			_, err := js.CreateOrUpdateKeyValue(ctx, kc)
			return err
		})
		if err != nil {
			return fmt.Errorf("bus: provision bucket %s: %w", kc.Bucket, err)
		}
		cfg.progress("bucket %s ready", kc.Bucket)
	}
	for _, sc := range StreamConfigs(cfg) {
		var s jetstream.Stream
		err := whilePlacing(ctx, func(ctx context.Context) (err error) {
			if err := ensureSourceConsumers(ctx, js, sc, cfg, starts); err != nil {
				return err
			}
			s, err = js.CreateOrUpdateStream(ctx, sc)
			return err
		})
		if err != nil {
			return fmt.Errorf("bus: provision stream %s: %w", sc.Name, err)
		}
		// A server too old for schedules drops the field without an error,
		// and layovers would then never fire.
		if sc.AllowMsgSchedules && !s.CachedInfo().Config.AllowMsgSchedules {
			return fmt.Errorf("bus: provision stream %s: the server does not support message schedules (needs nats-server 2.12 or later)", sc.Name)
		}
		cfg.progress("stream %s ready (%s)", sc.Name, describeStream(sc))
	}
	if err := EnsureWorkConsumers(ctx, js, cfg); err != nil {
		return err
	}
	if old != nil {
		if err := drainUnsharded(ctx, js, old, cfg); err != nil {
			return fmt.Errorf("bus: upgrade %s: %w", StreamWork, err)
		}
	}
	if cfg.Replicas > 1 {
		groups := LeaderGroups(Layout{Partitions: cfg.Partitions, Shards: cfg.Shards})
		if refiltered {
			groups = groups[:1] // the log's leader stays this time (upgradelog.go)
			cfg.progress("the leaders of %s are spread at the next provisioning", strings.Join(BusyStreams(), ", "))
		}
		for _, g := range groups {
			if moved, err := SpreadLeaders(ctx, js, g); err != nil {
				cfg.progress("leaders of %s not spread: %v", strings.Join(g, ", "), err)
			} else if moved > 0 {
				cfg.progress("%d leaders of %s moved so that each node leads its share", moved, strings.Join(g, ", "))
			}
		}
	}
	return nil
}

// LeaderGroups are the groups of streams whose leaders provisioning
// spreads over the nodes, each group on its own: the shards, then the busy
// streams off the event path. Spread together, the shards could end one
// to a node with every busy stream on the same one.
func LeaderGroups(l Layout) [][]string {
	return [][]string{l.Streams(), BusyStreams()}
}

// BusyStreams are the streams off the event path that take a write for
// most events, one leader each whatever K is: the log of record, the
// transcripts, the output, the sessions bucket's stream and the server's
// copy of it by partition, which takes every record write again and
// serves the runners' watches of their partitions. None of them
// binds before the shards do (docs/BENCHMARKS.md "One leader each"), as
// long as they do not share a node's cores, so provisioning spreads their
// leaders over the nodes as it spreads the shards'.
func BusyStreams() []string {
	return []string{StreamEvents, StreamTranscripts, StreamOut, StreamSessions, StreamSessionsByPartition}
}

// ensureSourceConsumers makes the durable consumer each of sc's sources
// reads its origin through, unless it exists; one made new starts at the
// origin's sequence in starts, if it has one there (an upgrade's: see
// metadataFiredFrom).
func ensureSourceConsumers(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, cfg ProvisionConfig, starts map[string]uint64) error {
	for _, src := range sc.Sources {
		if src == nil || src.Consumer == nil {
			continue
		}
		cc := SourceConsumerConfig(sc.Name, src, cfg)
		if err := ensureSourceConsumer(ctx, js, src.Name, cc, starts[src.Name], false); err != nil {
			return err
		}
	}
	return nil
}

// sourcedUpTo is the last sequence of origin the stream says its source
// copied (0 if it does not say).
func sourcedUpTo(info *jetstream.StreamInfo, origin string) uint64 {
	for _, si := range info.Sources {
		if si != nil && si.Name == origin {
			return si.Seq
		}
	}
	return 0
}

func sourceNamed(sources []*jetstream.StreamSource, name string) *jetstream.StreamSource {
	for _, s := range sources {
		if s != nil && s.Name == name {
			return s
		}
	}
	return nil
}

// ensureSourceConsumer makes the durable source consumer cc on origin
// unless it exists (or, with replace, makes it again), delivering from
// sequence start (0: from the first event).
func ensureSourceConsumer(ctx context.Context, js jetstream.JetStream, origin string, cc jetstream.ConsumerConfig, start uint64, replace bool) error {
	_, err := js.PushConsumer(ctx, origin, cc.Durable)
	switch {
	case err == nil && !replace:
		return nil
	case err == nil:
		if err := js.DeleteConsumer(ctx, origin, cc.Durable); err != nil {
			return fmt.Errorf("source consumer %s on %s: replace: %w", cc.Durable, origin, err)
		}
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return fmt.Errorf("source consumer %s on %s: %w", cc.Durable, origin, err)
	}
	if start > 0 {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	c, err := js.CreatePushConsumer(ctx, origin, cc)
	if err != nil {
		return fmt.Errorf("source consumer %s on %s: %w", cc.Durable, origin, err)
	}
	// A server too old for durable sourcing (before 2.14) has no flow
	// control ack policy; it would source nothing through the consumer.
	if c.CachedInfo().Config.AckPolicy != jetstream.AckFlowControlPolicy {
		return fmt.Errorf("source consumer %s on %s: the server does not support durable sourcing (needs nats-server 2.14 or later)", cc.Durable, origin)
	}
	return nil
}

func describeStream(sc jetstream.StreamConfig) string {
	s := sc.Retention.String()
	if sc.MaxAge > 0 {
		s += ", max age " + sc.MaxAge.String()
	}
	return s + ", replicas " + strconv.Itoa(sc.Replicas)
}

// StreamConfigs returns the configuration of every jetway stream, in the
// order they must be created (a stream's sources first).
//
// Why each stream is set as it is (docs/SECURITY.md has the attacks):
//   - JETWAY_JOBEVENTS and JETWAY_SCHEDULES are written only by the jobs
//     workers and the runners respectively (NATS permissions). Message
//     schedules are allowed only in JETWAY_SCHEDULES: the server stores a
//     scheduled message on any Nats-Schedule-Target of the schedule's own
//     stream without checking the publisher may publish there, so the
//     stream must hold nothing but what its writers may already write.
//   - JETWAY_EVENTS, which tenants write, denies purges and deletes and
//     allows no roll-ups (Nats-Rollup: all from any publisher would erase
//     every tenant's events) and no schedules. Having sources, it has no
//     dedupe window: a Nats-Msg-Id from one tenant cannot make another's
//     event a duplicate. Exactly once to the model is the runner's check of
//     CE ids against the session's transcript; a retried request's
//     "duplicate" answer is the dispatcher's, scoped to tenant and session
//     (BucketEventIDs).
//   - The work shards (JETWAY_WORK_<k>) are written by tenants too, and
//     set as JETWAY_EVENTS is. Job events, sub-agent events and fired
//     layovers reach them by sourcing; JETWAY_EVENTS sources every shard,
//     so it stays the one log of every session's events, off the path an
//     event takes to its runner. The shards keep an event (interest
//     retention) until its runner has acked it and the log has copied
//     it, so "is an older event of this session still in its shard" is
//     the question the runners' order check asks.
func StreamConfigs(cfg ProvisionConfig) []jetstream.StreamConfig {
	cfg = cfg.withDefaults()
	all := []jetstream.StreamConfig{
		{
			Name:        StreamJobEvents,
			Description: "jetway job events from the jobs workers (sourced into JETWAY_EVENTS)",
			Subjects:    []string{SubjectJobEvents},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			// The jobs outbox retries a publish, and a restarted worker
			// may report an end again: the window drops those repeats.
			// Only jobs workers write here, so nobody else can occupy an id.
			Duplicates: cfg.DuplicateWindow,
			MaxAge:     cfg.EventsMaxAge,
			DenyPurge:  true,
			DenyDelete: true,
		},
		{
			Name:        StreamAgentEvents,
			Description: "jetway sub-agent events from the runners (sourced into JETWAY_EVENTS)",
			Subjects:    []string{SubjectAgentEvents},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			// A child's end is published with an id made from its run, again
			// after a crash between its end and the publish: the window
			// drops the repeat. Only runners write here.
			Duplicates: cfg.DuplicateWindow,
			MaxAge:     cfg.EventsMaxAge,
			DenyPurge:  true,
			DenyDelete: true,
		},
		{
			Name:        StreamSchedules,
			Description: "jetway layover schedules and what they fire (runners only; sourced into JETWAY_EVENTS)",
			Subjects:    []string{SubjectSchedules, SubjectFired},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			Duplicates:  cfg.DuplicateWindow,
			MaxAge:      cfg.EventsMaxAge,
			// The server turns on roll-ups (and purges) for schedules
			// anyway; saying so keeps updates clean. Cancelling a layover
			// purges its holder's subject.
			AllowMsgSchedules: true,
			AllowRollup:       true,
		},
		// The shards come in here (shardConfigs), before the log that
		// sources them.
		{
			Name:             StreamEvents,
			Description:      "jetway events of every session, sourced from the work shards (log of record)",
			Retention:        jetstream.LimitsPolicy,
			Storage:          jetstream.FileStorage,
			Replicas:         cfg.Replicas,
			MaxAge:           cfg.EventsMaxAge,
			DenyPurge:        true,
			DenyDelete:       true,
			Sources:          EventsSources(cfg.Shards),
			SubjectTransform: LogTransform(),
		},
		{
			Name:        StreamTranscripts,
			Description: "jetway session transcripts",
			Subjects:    []string{SubjectTranscripts},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			MaxAge:      cfg.TranscriptsMaxAge,
			// A runner reads a session's transcript back in batched direct
			// gets, no consumer per load; it checks each read reaches the
			// last record the leader has (services/runner/transcriptread.go).
			AllowDirect: true,
		},
		{
			Name:        StreamOut,
			Description: "jetway run output and headlines, kept briefly for reconnecting terminals",
			Subjects:    []string{SubjectOut, SubjectNotify},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			MaxAge:      cfg.OutMaxAge,
		},
	}
	// The shards after the streams they source, before the log.
	return slices.Concat(all[:3], shardConfigs(cfg), all[3:], []jetstream.StreamConfig{sessionsByPartitionConfig(cfg)})
}

// EventsSources are JETWAY_EVENTS's sources: every shard, each through a
// durable consumer that takes everything the shard holds. The log's own
// SubjectTransform (LogTransform) takes the partition token out again, so
// the log holds jetway.<kind>.<tenant>.<session> as it always has.
//
// The transform is the log's, not the sources': a source with a transform
// reads its origin through a consumer filtered to the transform's source,
// and the server matches a filtered consumer's subjects against the filter
// message by message, or, when it falls behind, every subject of a block
// for each message. A log catching up copied 77–79 k events a second that
// way and 137–148 k through an unfiltered consumer (docs/BENCHMARKS.md);
// with several transforms, one per kind, it had been a thousand.
func EventsSources(shards int) []*jetstream.StreamSource {
	var out []*jetstream.StreamSource
	for k := range max(shards, 1) {
		out = append(out, &jetstream.StreamSource{
			Name:     WorkStream(k),
			Consumer: &jetstream.StreamConsumerSource{Name: EventsSourceConsumer, DeliverSubject: "jetway.sourcing.events." + strconv.Itoa(k)},
		})
	}
	return out
}

// LogTransform is JETWAY_EVENTS's subject transform: what it copies from
// the shards, jetway.<kind>.<p>.<tenant>.<session>, it stores as
// jetway.<kind>.<tenant>.<session>.
func LogTransform() *jetstream.SubjectTransformConfig {
	return &jetstream.SubjectTransformConfig{
		Source:      "jetway.*.*.*.*",
		Destination: "jetway.{{wildcard(1)}}.{{wildcard(3)}}.{{wildcard(4)}}",
	}
}

// The durable consumers sources read their origins through, and the
// subjects the server delivers them on (jetway.sourcing.>, which no
// service may publish or read).
//
// A source made of the server's own ephemeral consumer lost that consumer
// with the origin's leader, and the server noticed only at its 10-second
// source health check, then backed off: sourcing paused 19–20 s after the
// leader's node stopped on a three-node cluster (15–45 s under load).
// Through a durable R3 consumer it went on 0.13–2.1 s after
// (docs/BENCHMARKS.md). The consumer also holds where sourcing stands
// (its ack floor, moved by the sourcing stream's flow control answers at
// least once a second), so a changed source copies again only what was
// not yet confirmed.
const (
	// EventsSourceConsumer is the name of JETWAY_EVENTS's consumer on
	// each shard.
	EventsSourceConsumer = "jetway-events-source"
	// shardSourceConsumerPrefix names shard k's consumer on each of its
	// origins: jetway-work-<k>-source.
	shardSourceConsumerPrefix = "jetway-work-"
	agentEventsFilter         = "jetway.agentevents.*.*"
	firedFilter               = "jetway.fired.*.*"
	jobEventsFilter           = "jetway.jobevents.*.*"
	eventsFilter              = "jetway.events.*.*"
)

// partitionsOf lists the partitions of shard k.
func partitionsOf(k int, cfg ProvisionConfig) []int {
	var ps []int
	for p := range cfg.Partitions {
		if ShardOf(p, cfg.Shards) == k {
			ps = append(ps, p)
		}
	}
	return ps
}

// perPartition renders pattern (with %d for the partition) for each of
// shard k's partitions; with one shard, a single wildcard does.
func perPartition(pattern string, k int, cfg ProvisionConfig) []string {
	if cfg.Shards <= 1 {
		return []string{strings.Replace(pattern, "%d", "*", 1)}
	}
	var out []string
	for _, p := range partitionsOf(k, cfg) {
		out = append(out, fmt.Sprintf(pattern, p))
	}
	return out
}

// shardConfigs are the K work shards. Each captures its partitions'
// events as published (the mapping put the partition in), and sources its
// partitions' job events, sub-agent events and fired layovers. Layovers
// set before the event path was sharded fire on jetway.fired.<t>.<s>
// without a partition: the transform computes it, and with more than one
// shard every shard takes a copy of which only the partition's own shard
// has a consumer (the others' copies go to the log, and leave).
func shardConfigs(cfg ProvisionConfig) []jetstream.StreamConfig {
	var out []jetstream.StreamConfig
	for k := range cfg.Shards {
		var fired []jetstream.SubjectTransformConfig
		for _, f := range perPartition("jetway.fired.%d.*.*", k, cfg) {
			dest := "jetway.events." + strings.Split(f, ".")[2] + ".{{wildcard(1)}}.{{wildcard(2)}}"
			if cfg.Shards <= 1 {
				dest = "jetway.events.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}"
			}
			fired = append(fired, jetstream.SubjectTransformConfig{Source: f, Destination: dest})
		}
		fired = append(fired, jetstream.SubjectTransformConfig{
			Source:      firedFilter,
			Destination: fmt.Sprintf("jetway.events.{{partition(%d,1,2)}}.{{wildcard(1)}}.{{wildcard(2)}}", cfg.Partitions),
		})
		consumer := func(origin string) *jetstream.StreamConsumerSource {
			return &jetstream.StreamConsumerSource{
				Name:           shardSourceConsumerPrefix + strconv.Itoa(k) + "-source",
				DeliverSubject: "jetway.sourcing.work" + strconv.Itoa(k) + "." + strings.ToLower(strings.TrimPrefix(origin, "JETWAY_")),
			}
		}
		out = append(out, jetstream.StreamConfig{
			Name:        WorkStream(k),
			Description: fmt.Sprintf("jetway work shard %d of %d: the events of its partitions, consumed by runners", k, cfg.Shards),
			Subjects:    perPartition("jetway.events.%d.*.*", k, cfg),
			// Interest: an event stays until its runner acked it and
			// JETWAY_EVENTS copied it.
			Retention:  jetstream.InterestPolicy,
			Storage:    jetstream.FileStorage,
			Replicas:   cfg.Replicas,
			MaxAge:     cfg.EventsMaxAge,
			DenyPurge:  true,
			DenyDelete: true,
			Sources: []*jetstream.StreamSource{
				{Name: StreamJobEvents, Consumer: consumer(StreamJobEvents)},
				{Name: StreamAgentEvents, Consumer: consumer(StreamAgentEvents)},
				{Name: StreamSchedules, SubjectTransforms: fired, Consumer: consumer(StreamSchedules)},
			},
			Metadata: map[string]string{
				MetadataPartitions: strconv.Itoa(cfg.Partitions),
				MetadataShards:     strconv.Itoa(cfg.Shards),
			},
		})
	}
	return out
}

// SourceConsumerConfig is the configuration of the durable consumer src
// reads its origin through, for the stream into: a flow-controlled push
// consumer acked by the sourcing stream's flow control answers (ADR-58),
// filtered to what the source takes, never given up on.
func SourceConsumerConfig(into string, src *jetstream.StreamSource, cfg ProvisionConfig) jetstream.ConsumerConfig {
	cfg = cfg.withDefaults()
	var filters []string
	for _, tr := range src.SubjectTransforms {
		filters = append(filters, tr.Source)
	}
	if len(filters) == 0 && strings.HasPrefix(into, StreamWorkPrefix) {
		k, _ := strconv.Atoi(strings.TrimPrefix(into, StreamWorkPrefix))
		kind := "jobevents"
		if src.Name == StreamAgentEvents {
			kind = "agentevents"
		}
		filters = perPartition("jetway."+kind+".%d.*.*", k, cfg)
	}
	cc := jetstream.ConsumerConfig{
		Durable:        src.Consumer.Name,
		Description:    into + " sources " + src.Name + " through this consumer",
		DeliverSubject: src.Consumer.DeliverSubject,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckFlowControlPolicy,
		FlowControl:    true,
		IdleHeartbeat:  time.Second, // the server requires 1 s for this policy
		MaxDeliver:     -1,
		MaxAckPending:  sourceMaxAckPending,
		Replicas:       cfg.Replicas,
	}
	if into == StreamEvents {
		// Its ack floor moves only when this many are out (or after a
		// second with nothing to send), and a shard keeps what the log
		// has not confirmed: fewer out, fewer acked events waiting there.
		cc.MaxAckPending = LogSourceMaxAckPending
	}
	if len(filters) == 1 {
		cc.FilterSubject = filters[0]
	} else {
		cc.FilterSubjects = filters
	}
	return cc
}

// sourceMaxAckPending is how many events may be in flight to a shard
// before sourcing waits for its flow control answer; LogSourceMaxAckPending
// the same for the log's sources on the shards, whose ack floor (and so
// what the shards may let go of) moves only when that many are out, or
// after a second with nothing to send.
const (
	sourceMaxAckPending    = 10000
	LogSourceMaxAckPending = 1000
)

// BucketConfigs returns the configuration of every jetway key-value bucket.
func BucketConfigs(cfg ProvisionConfig) []jetstream.KeyValueConfig {
	cfg = cfg.withDefaults()
	kv := func(name, desc string, history uint8, ttl time.Duration) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{
			Bucket:      name,
			Description: desc,
			History:     history,
			TTL:         ttl,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
		}
	}
	return []jetstream.KeyValueConfig{
		kv(BucketSessions, "jetway session records (CAS-fenced)", 1, 0),
		kv(BucketJobs, "jetway background job table", 1, 0),
		kv(BucketWorkers, "jetway session to jobs worker binding", 1, 0),
		kv(BucketRunners, "jetway runner heartbeats", 1, cfg.RunnerTTL),
		// A few revisions of control keys show who flipped Ground Stop and when.
		kv(BucketControl, "jetway Ground Stop switches and layovers", 5, 0),
		// Written only by the dispatcher, with Create: a key that exists is
		// a retry of the same tenant's same session's same id. Entries
		// live as long as the old stream-wide duplicate window did.
		kv(BucketEventIDs, "jetway caller-chosen CE ids per tenant and session (duplicate answers)", 1, cfg.DuplicateWindow),
		// Old revisions stay readable so a recovered or steered run goes
		// on with the profile version its run started with, even after an
		// update (the most the server keeps is 64).
		kv(BucketAgents, "jetway agent profiles per tenant (revision = version)", AgentHistory, 0),
	}
}

// Layout is how the event path is divided: P partitions over K shards.
type Layout struct {
	Partitions int
	Shards     int
}

// Stream is the shard stream holding partition p.
func (l Layout) Stream(p int) string { return WorkStreamOf(p, l.Shards) }

// Streams are the names of every shard of l: the streams a publish into
// a session is stored in.
func (l Layout) Streams() []string {
	out := make([]string, 0, max(l.Shards, 1))
	for k := range max(l.Shards, 1) {
		out = append(out, WorkStream(k))
	}
	return out
}

// ReadLayout reads P and K back from the first shard's metadata, so a
// service need not be told them.
func ReadLayout(ctx context.Context, js jetstream.JetStream) (Layout, error) {
	var s jetstream.Stream
	err := whilePlacing(ctx, func(ctx context.Context) (err error) {
		s, err = js.Stream(ctx, WorkStream(0))
		return err
	})
	if err != nil {
		return Layout{}, fmt.Errorf("bus: read the work layout: %w", err)
	}
	md := s.CachedInfo().Config.Metadata
	var l Layout
	for key, into := range map[string]*int{MetadataPartitions: &l.Partitions, MetadataShards: &l.Shards} {
		v, ok := md[key]
		if !ok {
			return Layout{}, fmt.Errorf("bus: read the work layout: stream %s has no %q metadata", WorkStream(0), key)
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return Layout{}, fmt.Errorf("bus: read the work layout: bad %q metadata %q", key, v)
		}
		*into = n
	}
	return l, nil
}

// Partitions reads P back from the work shards.
func Partitions(ctx context.Context, js jetstream.JetStream) (int, error) {
	l, err := ReadLayout(ctx, js)
	return l.Partitions, err
}

// errNoSuitablePeers is JetStream's "no suitable peers for placement": a
// cluster that has just formed (or lost a node) may not yet count every peer
// as online for a replicated stream.
const errNoSuitablePeers jetstream.ErrorCode = 10005

// placementPatience bounds how long provisioning waits for a cluster's
// peers to be placeable; attemptTimeout bounds one request. A cluster that
// has just formed can drop a request in a leader election, and without its
// own timeout one unanswered create held the whole provisioning (a chaos
// run sat three minutes on it).
const (
	placementPatience = 60 * time.Second
	attemptTimeout    = 10 * time.Second
)

// OpenBucket binds the key-value bucket name, waiting out a cluster that
// answers nobody yet (leaders being elected after a restart or a fresh
// provision, for seconds on a loaded machine): a service started beside
// its cluster waits for it instead of exiting. It binds as BindBucket.
func OpenBucket(ctx context.Context, js jetstream.JetStream, name string) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := whilePlacing(ctx, func(ctx context.Context) (err error) {
		kv, err = BindBucket(ctx, js, name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bus: bucket %s: %w", name, err)
	}
	return kv, nil
}

// whilePlacing runs create until it succeeds, fails with anything but "no
// suitable peers" or an unanswered request, placementPatience passes, or
// ctx ends.
func whilePlacing(ctx context.Context, create func(context.Context) error) error {
	deadline := time.Now().Add(placementPatience)
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := create(actx)
		cancel()
		if err == nil || !retryablePlacement(ctx, err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// retryablePlacement: no suitable peers yet, or the attempt went
// unanswered while the caller still has time.
func retryablePlacement(ctx context.Context, err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == errNoSuitablePeers
	}
	unanswered := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders)
	return unanswered && ctx.Err() == nil
}
