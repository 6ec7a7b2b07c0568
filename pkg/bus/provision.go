package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	// Partitions is P, the number of work partitions. Changing it on a live
	// system moves sessions between partitions; messages still pending on a
	// partition that no longer exists are stranded, so change it only when
	// JETWAY_WORK is drained.
	Partitions int

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
	cfg = cfg.withDefaults()
	replaced, err := upgradeEvents(ctx, js, cfg)
	if err != nil {
		return fmt.Errorf("bus: upgrade %s: %w", StreamEvents, err)
	}
	for _, sc := range StreamConfigs(cfg) {
		var s jetstream.Stream
		err := whilePlacing(ctx, func(ctx context.Context) (err error) {
			if sc.Name == StreamWork {
				if sc, err = carryOver(ctx, js, sc, cfg, replaced); err != nil {
					return err
				}
			} else if err := ensureSourceConsumers(ctx, js, sc, cfg); err != nil {
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
	if err := EnsureWorkConsumers(ctx, js, cfg); err != nil {
		return err
	}
	return nil
}

// ensureSourceConsumers makes the durable consumer each of sc's sources
// reads its origin through, unless it exists.
func ensureSourceConsumers(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, cfg ProvisionConfig) error {
	for _, src := range sc.Sources {
		if src == nil || src.Consumer == nil {
			continue
		}
		cc := SourceConsumerConfig(src, cfg)
		if err := ensureSourceConsumer(ctx, js, src.Name, cc, 0, false); err != nil {
			return err
		}
	}
	return nil
}

// carryOver makes the durable consumer JETWAY_WORK sources through, and
// returns sc to create or update the stream with. A stream made before
// jetway sourced through the durable consumer has an ephemeral source; the
// consumer then starts just after the last event that source copied, as
// the stream reports it (a source the server takes as new is copied again
// otherwise: from the start while the stream holds its first message,
// else from the time of its last). A few events copied between the report
// and the update may be queued twice, which the runners drop as already
// recorded (by CE id); none is skipped. When the server does not say where
// the old source got to, the stream keeps its old source, and provisioning
// says so. An existing consumer is left as it is: where it stands is
// where sourcing goes on.
//
// After an upgrade replaced JETWAY_EVENTS (fresh), whatever the old source
// reported is about the old log: the consumer starts at the new log's
// first event.
func carryOver(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, cfg ProvisionConfig, fresh bool) (jetstream.StreamConfig, error) {
	start := uint64(0) // the consumer's first event; 0: all of JETWAY_EVENTS
	replace := false   // a consumer left from before is not where sourcing stands
	st, err := js.Stream(ctx, sc.Name)
	switch {
	case fresh:
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return sc, err
	default:
		info := st.CachedInfo()
		if old := sourceNamed(info.Config.Sources, StreamEvents); old != nil && old.Consumer == nil {
			seq := sourcedUpTo(info, StreamEvents)
			if seq == 0 && info.State.LastSeq > 0 {
				cfg.progress("stream %s keeps its ephemeral source: the server does not say where it got to, and a new source would queue its events again", sc.Name)
				sc.Sources = info.Config.Sources
				if p, _ := strconv.Atoi(info.Config.Metadata[MetadataPartitions]); p > 0 {
					sc.Metadata = map[string]string{MetadataPartitions: strconv.Itoa(p)} // the old source's partitions
				}
				return sc, nil
			}
			if seq > 0 {
				start = seq + 1
			}
			replace = true
		}
	}
	cc := SourceConsumerConfig(sc.Sources[0], cfg)
	if err := ensureSourceConsumer(ctx, js, StreamEvents, cc, start, replace); err != nil {
		return sc, err
	}
	return sc, nil
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
//   - Job events and fired layovers reach JETWAY_EVENTS by sourcing, so
//     JETWAY_EVENTS stays the one log of every session's events in order,
//     and JETWAY_WORK keeps one source with one transform.
func StreamConfigs(cfg ProvisionConfig) []jetstream.StreamConfig {
	cfg = cfg.withDefaults()
	return []jetstream.StreamConfig{
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
		{
			Name:        StreamEvents,
			Description: "jetway host events, with job events and fired layovers sourced in (log of record)",
			Subjects:    []string{SubjectEvents},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			MaxAge:      cfg.EventsMaxAge,
			DenyPurge:   true,
			DenyDelete:  true,
			Sources:     EventsSources(),
		},
		{
			Name:        StreamWork,
			Description: "jetway events by work partition, consumed by runners",
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			MaxAge:      cfg.EventsMaxAge,
			Sources: []*jetstream.StreamSource{{
				Name:              StreamEvents,
				SubjectTransforms: WorkTransforms(cfg.Partitions),
				Consumer:          &jetstream.StreamConsumerSource{Name: WorkSourceConsumer, DeliverSubject: WorkSourceDeliver},
			}},
			Metadata: map[string]string{MetadataPartitions: strconv.Itoa(cfg.Partitions)},
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
}

// The durable consumers JETWAY_EVENTS sources job events and fired
// layovers through (one on each origin), and the subjects the server
// delivers them on. Durable for the reason WorkSourceConsumer is.
const (
	EventsSourceConsumer     = "jetway-events-source"
	EventsSourceDeliverJobs  = "jetway.sourcing.jobevents"
	EventsSourceDeliverFired = "jetway.sourcing.fired"
	EventsSourceDeliverAgent = "jetway.sourcing.agentevents"
	agentEventsFilter        = "jetway.agentevents.*.*"
	firedFilter              = "jetway.fired.*.*"
	jobEventsFilter          = "jetway.jobevents.*.*"
	eventsFilter             = "jetway.events.*.*"
	firedToEventsDestination = "jetway.events.{{wildcard(1)}}.{{wildcard(2)}}"
)

// EventsSources are JETWAY_EVENTS's sources: job events and sub-agent
// events as they are, and
// what layover schedules fire, from jetway.fired.<tenant>.<session> to
// jetway.events.<tenant>.<session> (where a session's resume has always
// arrived). Schedule holders are not sourced.
func EventsSources() []*jetstream.StreamSource {
	return []*jetstream.StreamSource{
		{
			// No filter here: a source through a durable consumer filters
			// with the consumer (SourceConsumerConfig).
			Name:     StreamJobEvents,
			Consumer: &jetstream.StreamConsumerSource{Name: EventsSourceConsumer, DeliverSubject: EventsSourceDeliverJobs},
		},
		{
			Name:     StreamAgentEvents,
			Consumer: &jetstream.StreamConsumerSource{Name: EventsSourceConsumer, DeliverSubject: EventsSourceDeliverAgent},
		},
		{
			Name:              StreamSchedules,
			SubjectTransforms: []jetstream.SubjectTransformConfig{{Source: firedFilter, Destination: firedToEventsDestination}},
			Consumer:          &jetstream.StreamConsumerSource{Name: EventsSourceConsumer, DeliverSubject: EventsSourceDeliverFired},
		},
	}
}

// WorkTransforms are the source transforms from JETWAY_EVENTS into
// JETWAY_WORK. They hash tenant and session only, so a session's events and
// job events share a partition.
//
// It is one transform for both kinds, not one per kind: a source with two
// transforms reads its origin through a consumer with two filters, and the
// server then matches every subject of a message block against them for
// each message it sources. With a thousand sessions that capped sourcing
// at about a thousand events a second, where one filter ran at 45–52 k
// (docs/BENCHMARKS.md). The partitions are the same either way: the hash
// is of the same two tokens.
func WorkTransforms(partitions int) []jetstream.SubjectTransformConfig {
	return []jetstream.SubjectTransformConfig{{
		Source:      "jetway.*.*.*",
		Destination: fmt.Sprintf("{{partition(%d,2,3)}}.jetway.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}", partitions),
	}}
}

// The durable consumer on JETWAY_EVENTS that JETWAY_WORK sources through,
// and the subject the server delivers its events on.
//
// A source made of the server's own ephemeral consumer lost that consumer
// with the leader of JETWAY_EVENTS, and the server noticed only at its
// 10-second source health check, then backed off: sourcing paused 19–20 s
// after the leader's node stopped on a three-node cluster (15–45 s under
// load). Through a durable R3 consumer it went on 0.13–2.1 s after
// (docs/BENCHMARKS.md). The consumer also holds where sourcing stands
// (its ack floor, moved by the sourcing stream's flow control answers at
// least once a second), so a changed source (another partition count)
// copies again only what was not yet confirmed.
//
// The "-2" is the JETWAY_EVENTS it reads: the split stream an upgrade
// makes (upgradeEvents). The server knows a source by a name that includes
// its consumer's, and seeds a source it does not know yet from the
// Nats-Stream-Source headers of what the sourcing stream still holds. With
// the old name, events from the old log still queued in JETWAY_WORK told
// it the new log was read up to their sequence, and it skipped the new
// log's first events as already copied. A new name is a new source that
// starts at the new log's first event.
const (
	WorkSourceConsumer = "jetway-work-source-2"
	WorkSourceDeliver  = "jetway.sourcing.work"
)

// workSourceConsumerV1 is the source consumer name deployments made before
// the split used (on the old JETWAY_EVENTS).
const workSourceConsumerV1 = "jetway-work-source"

// SourceConsumerConfig is the configuration of the durable consumer a
// source reads its origin through: a flow-controlled push consumer acked by
// the sourcing stream's flow control answers (ADR-58), filtered to what the
// source takes, never given up on.
func SourceConsumerConfig(src *jetstream.StreamSource, cfg ProvisionConfig) jetstream.ConsumerConfig {
	cfg = cfg.withDefaults()
	filter := jobEventsFilter
	if src.Name == StreamAgentEvents {
		filter = agentEventsFilter
	}
	if len(src.SubjectTransforms) == 1 {
		filter = src.SubjectTransforms[0].Source
	}
	into := StreamWork
	if src.Name != StreamEvents {
		into = StreamEvents
	}
	return jetstream.ConsumerConfig{
		Durable:        src.Consumer.Name,
		Description:    into + " sources " + src.Name + " through this consumer",
		DeliverSubject: src.Consumer.DeliverSubject,
		FilterSubject:  filter,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckFlowControlPolicy,
		FlowControl:    true,
		IdleHeartbeat:  time.Second, // the server requires 1 s for this policy
		MaxDeliver:     -1,
		MaxAckPending:  sourceMaxAckPending,
		Replicas:       cfg.Replicas,
	}
}

// sourceMaxAckPending is how many events may be in flight to JETWAY_WORK
// before sourcing waits for its flow control answer.
const sourceMaxAckPending = 10000

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

// Partitions reads P back from the JETWAY_WORK stream.
func Partitions(ctx context.Context, js jetstream.JetStream) (int, error) {
	var s jetstream.Stream
	err := whilePlacing(ctx, func(ctx context.Context) (err error) {
		s, err = js.Stream(ctx, StreamWork)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("bus: read partitions: %w", err)
	}
	v, ok := s.CachedInfo().Config.Metadata[MetadataPartitions]
	if !ok {
		return 0, fmt.Errorf("bus: read partitions: stream %s has no %q metadata", StreamWork, MetadataPartitions)
	}
	p, err := strconv.Atoi(v)
	if err != nil || p <= 0 {
		return 0, fmt.Errorf("bus: read partitions: bad %q metadata %q", MetadataPartitions, v)
	}
	return p, nil
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
// its cluster waits for it instead of exiting.
func OpenBucket(ctx context.Context, js jetstream.JetStream, name string) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := whilePlacing(ctx, func(ctx context.Context) (err error) {
		kv, err = js.KeyValue(ctx, name)
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
