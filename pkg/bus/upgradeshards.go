package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Upgrading to the sharded event path.
//
// Before it, JETWAY_EVENTS took every publish on jetway.events.> and a
// work queue, JETWAY_WORK, sourced it with the partition put in front
// (<p>.jetway.<kind>.<tenant>.<session>); runners consumed that. The
// upgrade moves what the work queue still holds (events queued, and
// events a runner held un-acked as notices) into the shards, so nothing
// pending is lost. It runs with every service stopped and the servers
// already carrying the partition mapping (docs/OPERATIONS.md
// "Upgrading"); each step is safe to run again if a later one fails:
//
//  0. An old queue whose events cannot go into the shards' partitions (P
//     changed, more than one shard) is refused before anything changes.
//  1. The old work consumers go: a runner of the old layout still pulling
//     gets an error instead of events. Their un-acked events stay in the
//     work queue, which now holds exactly what no runner finished.
//  2. The work queue stops sourcing JETWAY_EVENTS, once the log's sources
//     have delivered everything fired so far and the queue has sourced the
//     log to its end (bounded waits). It records where JETWAY_SCHEDULES
//     stood (metadataFiredFrom): the shards source fired layovers from
//     there, not again those a runner may have finished.
//  3. JETWAY_EVENTS lets go of jetway.events.> (the shards capture the
//     partitioned subjects), once its own sources (job events, sub-agent
//     events, fired layovers) have delivered everything (bounded wait).
//     Provision then makes the shards, and JETWAY_EVENTS sourcing them.
//  4. Each shard sources the old work queue's events of its partitions,
//     the partition moved back after the kind. Sourcing takes them out of
//     the work queue; when it is empty, the extra sources go and the work
//     queue is deleted. Host events the old log took with a partition in
//     their subject (sent between the servers' restart and provisioning)
//     are published again into their shards (rescueMapped).
//
// The moved events are new messages in their shard, after what it held
// (nothing, with the services stopped); runners drop any a runner had
// already recorded, by CE id. JETWAY_EVENTS holds them twice: once from
// before, once through their shard, with the same CE id.

// StreamWork is the work queue of the layout before the shards; an
// upgrade drains it into them and deletes it.
const StreamWork = "JETWAY_WORK"

// The source consumers on JETWAY_EVENTS that StreamWork read through,
// by the names deployments used.
const (
	workSourceConsumerV1 = "jetway-work-source"
	workSourceConsumerV2 = "jetway-work-source-2"
)

// unshardedWork is the old work queue, nil when there is none.
func unshardedWork(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, StreamWork)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read stream: %w", err)
	}
	return st, nil
}

// metadataFiredFrom is the old work queue's metadata key recording, as it
// stops sourcing, the first sequence of JETWAY_SCHEDULES it may not have
// received. Every layover fired before reached the old queue (and a
// runner may have finished it), so the shards source fired layovers from
// there on, not from the start: JETWAY_SCHEDULES keeps what fired for
// EventsMaxAge, and the legacy jetway.fired.<t>.<s> of all of it would be
// delivered again.
const metadataFiredFrom = "jetway.upgrade.fired-from"

// detachUnsharded runs steps 1 to 3. It returns the sequence of
// JETWAY_SCHEDULES from which the shards are to source fired layovers (0:
// from the first).
func detachUnsharded(ctx context.Context, js jetstream.JetStream, old jetstream.Stream, cfg ProvisionConfig) (uint64, error) {
	info, err := old.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("read stream: %w", err)
	}
	// Refused before anything changes, so the old layout still works.
	if err := movable(info, cfg); err != nil {
		return 0, err
	}
	for name := range old.ConsumerNames(ctx).Name() {
		if err := old.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return 0, fmt.Errorf("delete work consumer %s: %w", name, err)
		}
		cfg.progress("old work consumer %s deleted", name)
	}
	if len(info.Config.Sources) == 0 {
		// Detached by an earlier run, which said where fired layovers start.
		from, _ := strconv.ParseUint(info.Config.Metadata[metadataFiredFrom], 10, 64)
		return from, takeEventsSubjects(ctx, js, cfg)
	}
	var firedFrom uint64
	ev, err := js.Stream(ctx, StreamEvents)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		// The log was replaced by upgradeEvents: JETWAY_SCHEDULES is new,
		// and all it fired is for the shards.
	case err != nil:
		return 0, fmt.Errorf("read %s: %w", StreamEvents, err)
	default:
		// What has fired so far goes into the log, and from there into the
		// old queue, before it stops sourcing.
		sched, err := js.Stream(ctx, StreamSchedules)
		switch {
		case err == nil:
			firedFrom = sched.CachedInfo().State.LastSeq + 1
		case !errors.Is(err, jetstream.ErrStreamNotFound):
			return 0, fmt.Errorf("read %s: %w", StreamSchedules, err)
		}
		if err := waitEventsSourced(ctx, js, ev.CachedInfo().Config); err != nil {
			return 0, err
		}
		evi, err := ev.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", StreamEvents, err)
		}
		if err := waitSourced(ctx, js, evi.State.LastSeq); err != nil {
			return 0, err
		}
	}
	c := info.Config
	c.Sources = nil
	c.Metadata = maps.Clone(c.Metadata)
	if c.Metadata == nil {
		c.Metadata = map[string]string{}
	}
	c.Metadata[metadataFiredFrom] = strconv.FormatUint(firedFrom, 10)
	if _, err := js.UpdateStream(ctx, c); err != nil {
		return 0, fmt.Errorf("stop sourcing %s: %w", StreamEvents, err)
	}
	cfg.progress("old %s no longer sources %s; it holds %d events no runner finished", StreamWork, StreamEvents, info.State.Msgs)
	return firedFrom, takeEventsSubjects(ctx, js, cfg)
}

// takeEventsSubjects takes jetway.events.> away from JETWAY_EVENTS once its
// sources have delivered everything: the shards capture the partitioned
// subjects.
func takeEventsSubjects(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig) error {
	ev, err := js.Stream(ctx, StreamEvents)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", StreamEvents, err)
	}
	c := ev.CachedInfo().Config
	if len(c.Subjects) == 0 {
		return nil
	}
	if err := waitEventsSourced(ctx, js, c); err != nil {
		return err
	}
	c.Subjects = nil
	if _, err := js.UpdateStream(ctx, c); err != nil {
		return fmt.Errorf("hand %s's subjects to the shards: %w", StreamEvents, err)
	}
	cfg.progress("%s no longer takes publishes itself: the shards do", StreamEvents)
	return nil
}

// waitEventsSourced waits until each source of the log (configuration c)
// that reads through a durable consumer has delivered everything.
func waitEventsSourced(ctx context.Context, js jetstream.JetStream, c jetstream.StreamConfig) error {
	for _, src := range c.Sources {
		if src == nil || src.Consumer == nil {
			continue
		}
		if err := waitSourceDone(ctx, js, src.Name, src.Consumer.Name); err != nil {
			return err
		}
	}
	return nil
}

// movable refuses an old work queue whose events cannot be put in the
// shards' partitions: P changed and more than one shard (one shard takes
// every event, its partition computed anew).
func movable(info *jetstream.StreamInfo, cfg ProvisionConfig) error {
	oldP, _ := strconv.Atoi(info.Config.Metadata[MetadataPartitions])
	if n := info.State.Msgs; n > 0 && oldP != cfg.Partitions && cfg.Shards > 1 {
		return fmt.Errorf("its %d events are in %d partitions, the shards' in %d: upgrade to %d partitions (or one shard) first, change them after", n, oldP, cfg.Partitions, oldP)
	}
	return nil
}

// waitSourceDone waits until the durable source consumer name on origin
// has delivered and had confirmed everything (or does not exist).
func waitSourceDone(ctx context.Context, js jetstream.JetStream, origin, name string) error {
	return waitUntil(ctx, UpgradeCatchUp, func() (bool, string, error) {
		c, err := js.PushConsumer(ctx, origin, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return true, "", nil
		}
		if err != nil {
			return false, "", fmt.Errorf("source consumer %s on %s: %w", name, origin, err)
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return false, "", fmt.Errorf("source consumer %s on %s: %w", name, origin, err)
		}
		return ci.NumPending == 0 && ci.NumAckPending == 0,
			fmt.Sprintf("%d events not yet delivered and %d not yet confirmed", ci.NumPending, ci.NumAckPending), nil
	}, fmt.Sprintf("source consumer %s on %s did not deliver everything", name, origin))
}

// drainUnsharded runs step 4, once the shards and their consumers exist.
func drainUnsharded(ctx context.Context, js jetstream.JetStream, old jetstream.Stream, cfg ProvisionConfig) error {
	info, err := old.Info(ctx)
	if err != nil {
		return fmt.Errorf("read stream: %w", err)
	}
	oldP, _ := strconv.Atoi(info.Config.Metadata[MetadataPartitions])
	if n := info.State.Msgs; n > 0 {
		if err := movable(info, cfg); err != nil {
			return err
		}
		for k := range cfg.Shards {
			if err := addOldWorkSource(ctx, js, k, oldP, cfg); err != nil {
				return err
			}
		}
		cfg.progress("moving the %d events of old %s into the shards", n, StreamWork)
		err := waitUntil(ctx, UpgradeCatchUp, func() (bool, string, error) {
			info, err := old.Info(ctx)
			if err != nil {
				return false, "", fmt.Errorf("read stream: %w", err)
			}
			return info.State.Msgs == 0, fmt.Sprintf("it still holds %d events", info.State.Msgs), nil
		}, "old "+StreamWork+" did not move into the shards")
		if err != nil {
			return err
		}
	}
	if err := rescueMapped(ctx, js, cfg); err != nil {
		return err
	}
	// The shards as they are meant to be: without the extra source.
	for _, sc := range shardConfigs(cfg) {
		if _, err := js.UpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("shard %s: drop the old work queue's source: %w", sc.Name, err)
		}
	}
	if err := js.DeleteStream(ctx, StreamWork); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete the old work queue: %w", err)
	}
	for _, origin := range []string{StreamJobEvents, StreamAgentEvents, StreamSchedules} {
		_ = js.DeleteConsumer(ctx, origin, EventsSourceConsumer) // the log's old sources' consumers
	}
	cfg.progress("old %s emptied into the shards and deleted", StreamWork)
	return nil
}

// rescueMapped publishes again, into the shards, what reached the old log
// with a partition in its subject: a host event sent after the servers
// took the mapping and before provisioning took jetway.events.> away
// from the log. The old work queue's source takes four-token subjects
// only, so no runner would ever have seen it. Job and sub-agent events of
// that time are in their own streams, which the shards source.
func rescueMapped(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig) error {
	ev, err := js.Stream(ctx, StreamEvents)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", StreamEvents, err)
	}
	info, err := ev.Info(ctx, jetstream.WithSubjectFilter("jetway.events.*.*.*"))
	if err != nil {
		return fmt.Errorf("read %s: %w", StreamEvents, err)
	}
	if len(info.State.Subjects) == 0 {
		return nil
	}
	c, err := ev.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jetway.events.*.*.*"}})
	if err != nil {
		return fmt.Errorf("read %s: %w", StreamEvents, err)
	}
	n := 0
	for {
		m, err := c.Next(jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", StreamEvents, err)
		}
		out := &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
		if _, err := js.PublishMsg(ctx, out); err != nil {
			return fmt.Errorf("publish %s again into its shard: %w", m.Subject(), err)
		}
		n++
		if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
			break
		}
	}
	cfg.progress("%d events sent while the servers had the mapping and the log still took publishes, published again into their shards", n)
	return nil
}

// addOldWorkSource makes shard k source the old work queue's events of its
// partitions, <p>.jetway.<kind>.<t>.<s> becoming jetway.<kind>.<p>.<t>.<s>.
// The server's own consumer reads it: on a work queue a source's consumer
// takes what it delivers out.
func addOldWorkSource(ctx context.Context, js jetstream.JetStream, k, oldP int, cfg ProvisionConfig) error {
	var trs []jetstream.SubjectTransformConfig
	if oldP != cfg.Partitions {
		// One shard: it takes every event, its partition computed anew.
		trs = append(trs, jetstream.SubjectTransformConfig{
			Source:      "*.jetway.*.*.*",
			Destination: fmt.Sprintf("jetway.{{wildcard(2)}}.{{partition(%d,3,4)}}.{{wildcard(3)}}.{{wildcard(4)}}", cfg.Partitions),
		})
	}
	for _, p := range partitionsOf(k, cfg) {
		if oldP != cfg.Partitions {
			break
		}
		ps := strconv.Itoa(p)
		trs = append(trs, jetstream.SubjectTransformConfig{
			Source:      ps + ".jetway.*.*.*",
			Destination: "jetway.{{wildcard(1)}}." + ps + ".{{wildcard(2)}}.{{wildcard(3)}}",
		})
	}
	st, err := js.Stream(ctx, WorkStream(k))
	if err != nil {
		return fmt.Errorf("read shard %s: %w", WorkStream(k), err)
	}
	c := st.CachedInfo().Config
	if sourceNamed(c.Sources, StreamWork) != nil {
		return nil
	}
	c.Sources = append(c.Sources, &jetstream.StreamSource{Name: StreamWork, SubjectTransforms: trs})
	if _, err := js.UpdateStream(ctx, c); err != nil {
		return fmt.Errorf("shard %s: source the old work queue: %w", WorkStream(k), err)
	}
	return nil
}
