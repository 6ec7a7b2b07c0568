package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

	DuplicateWindow time.Duration // JETWAY_EVENTS dedupe window (Nats-Msg-Id)
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
// in place, so every service may call it at start.
func Provision(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig) error {
	cfg = cfg.withDefaults()
	for _, sc := range StreamConfigs(cfg) {
		var s jetstream.Stream
		err := whilePlacing(ctx, func(ctx context.Context) (err error) {
			if len(sc.Sources) > 0 {
				if sc, err = carryOver(ctx, js, sc, cfg); err != nil {
					return err
				}
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

// carryOver gives sc the sources of the stream as it exists, carried over
// (continueSources); a stream not yet made keeps sc's.
func carryOver(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, cfg ProvisionConfig) (jetstream.StreamConfig, error) {
	st, err := js.Stream(ctx, sc.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return sc, nil
	}
	if err != nil {
		return sc, err
	}
	sources, ok := continueSources(st.CachedInfo(), sc.Sources)
	if !ok {
		cfg.progress("stream %s keeps its old sources: the server does not say where they got to, and a changed source would queue every event again", sc.Name)
		if old, _ := strconv.Atoi(st.CachedInfo().Config.Metadata[MetadataPartitions]); old > 0 {
			sc.Metadata = map[string]string{MetadataPartitions: strconv.Itoa(old)} // the old sources' partitions
		}
	}
	sc.Sources = sources
	return sc, nil
}

func describeStream(sc jetstream.StreamConfig) string {
	s := sc.Retention.String()
	if sc.MaxAge > 0 {
		s += ", max age " + sc.MaxAge.String()
	}
	return s + ", replicas " + strconv.Itoa(sc.Replicas)
}

// StreamConfigs returns the configuration of every jetway stream, in the
// order they must be created (JETWAY_WORK sources JETWAY_EVENTS).
func StreamConfigs(cfg ProvisionConfig) []jetstream.StreamConfig {
	cfg = cfg.withDefaults()
	return []jetstream.StreamConfig{
		{
			Name:        StreamEvents,
			Description: "jetway host events, job events and message schedules (log of record)",
			Subjects:    []string{SubjectEvents, SubjectJobEvents, SubjectSchedules},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			Duplicates:  cfg.DuplicateWindow,
			MaxAge:      cfg.EventsMaxAge,
			// Schedules are how layovers and overdue timers fire. The server
			// turns on roll-ups for them anyway; saying so keeps updates clean.
			AllowMsgSchedules: true,
			AllowRollup:       true,
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

// WorkTransforms are the source transforms from JETWAY_EVENTS into
// JETWAY_WORK. They hash tenant and session only, so a session's events and
// job events share a partition; schedule holders (five tokens) match
// neither and are not sourced (only what they fire onto the events subject
// is).
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

// continueSources carries an existing JETWAY_WORK's sourcing over to the
// sources wanted now. The server takes a source whose filter or transforms
// changed for a new one and sources it again: from the start while the
// stream holds its first message (every event still in JETWAY_EVENTS
// queued twice), else from the time of its last message. So a changed source starts after
// the last event the old one sourced, as the stream reports it; a source
// that did not change keeps its start as it was. A few events sourced
// between the report and the update may be queued twice, which the
// runners drop as already recorded (by CE id); none is skipped. A stream
// that never stored anything takes the new source as it is. When the
// server does not report where the old source got to, the old source is
// kept as it is, and ok is false.
func continueSources(info *jetstream.StreamInfo, want []*jetstream.StreamSource) (sources []*jetstream.StreamSource, ok bool) {
	out := make([]*jetstream.StreamSource, 0, len(want))
	ok = true
	for _, w := range want {
		w := *w
		old := sourceNamed(info.Config.Sources, w.Name)
		switch {
		case old == nil:
		case old.FilterSubject == w.FilterSubject && slices.Equal(old.SubjectTransforms, w.SubjectTransforms):
			w.OptStartSeq, w.OptStartTime = old.OptStartSeq, old.OptStartTime
		default:
			seq := uint64(0)
			for _, si := range info.Sources {
				if si != nil && si.Name == w.Name {
					seq = si.Seq
				}
			}
			if seq == 0 && info.State.LastSeq == 0 {
				break // nothing sourced yet: the new source starts where the old would have
			}
			if seq == 0 {
				w, ok = *old, false
				break
			}
			w.OptStartSeq, w.OptStartTime = seq+1, nil
		}
		out = append(out, &w)
	}
	return out, ok
}

func sourceNamed(sources []*jetstream.StreamSource, name string) *jetstream.StreamSource {
	for _, s := range sources {
		if s != nil && s.Name == name {
			return s
		}
	}
	return nil
}

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
