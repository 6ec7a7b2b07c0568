package bustest

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// OldLayout is the stream layout of deployments made before the event
// streams were split, for tests of the upgrade: JETWAY_EVENTS holding host
// events, job events and schedules in one stream that tenants write, and
// JETWAY_WORK sourcing it through the durable consumer of that time,
// "jetway-work-source" (whose configuration is source).
func OldLayout(cfg bus.ProvisionConfig) (events, work jetstream.StreamConfig, source jetstream.ConsumerConfig) {
	events = jetstream.StreamConfig{
		Name:              bus.StreamEvents,
		Subjects:          []string{bus.SubjectEvents, bus.SubjectJobEvents, bus.SubjectSchedules},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		Replicas:          cfg.Replicas,
		Duplicates:        bus.DefaultDuplicateWindow,
		MaxAge:            bus.DefaultEventsMaxAge,
		AllowMsgSchedules: true,
		AllowRollup:       true,
	}
	work, source = UnshardedWork(cfg, "jetway-work-source")
	return events, work, source
}

// UnshardedWork is the work queue of deployments made before the event
// path was sharded, for tests of the upgrade: JETWAY_WORK sourcing
// JETWAY_EVENTS through the durable consumer named consumer, with the
// partition put in front (<p>.jetway.<kind>.<tenant>.<session>), and that
// consumer's configuration.
func UnshardedWork(cfg bus.ProvisionConfig, consumer string) (jetstream.StreamConfig, jetstream.ConsumerConfig) {
	p := cfg.Partitions
	if p <= 0 {
		p = bus.DefaultPartitions
	}
	replicas := max(cfg.Replicas, 1)
	src := &jetstream.StreamSource{
		Name: bus.StreamEvents,
		SubjectTransforms: []jetstream.SubjectTransformConfig{{
			Source:      "jetway.*.*.*",
			Destination: fmt.Sprintf("{{partition(%d,2,3)}}.jetway.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}", p),
		}},
		Consumer: &jetstream.StreamConsumerSource{Name: consumer, DeliverSubject: "jetway.sourcing.work"},
	}
	work := jetstream.StreamConfig{
		Name:      bus.StreamWork,
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.FileStorage,
		Replicas:  replicas,
		MaxAge:    bus.DefaultEventsMaxAge,
		Sources:   []*jetstream.StreamSource{src},
		Metadata:  map[string]string{bus.MetadataPartitions: strconv.Itoa(p)},
	}
	return work, oldSourceConsumer(consumer, src.Consumer.DeliverSubject, "jetway.*.*.*", replicas)
}

// oldSourceConsumer is a durable source consumer as provisioning made them
// before the shards.
func oldSourceConsumer(name, deliver, filter string, replicas int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        name,
		DeliverSubject: deliver,
		FilterSubject:  filter,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckFlowControlPolicy,
		FlowControl:    true,
		IdleHeartbeat:  time.Second,
		MaxDeliver:     -1,
		MaxAckPending:  10000,
		Replicas:       replicas,
	}
}

// UnshardedEvents is JETWAY_EVENTS of deployments made after the event
// streams were split and before the event path was sharded, for tests of
// the upgrade: it took jetway.events.> itself and sourced job events,
// sub-agent events and fired layovers (jetway.fired.<t>.<s> becoming
// jetway.events.<t>.<s>), each through a durable consumer named
// jetway-events-source on its origin. origins gives each origin's consumer
// configuration; make them before the stream.
func UnshardedEvents(cfg bus.ProvisionConfig) (events jetstream.StreamConfig, origins map[string]jetstream.ConsumerConfig) {
	replicas := max(cfg.Replicas, 1)
	origins = map[string]jetstream.ConsumerConfig{}
	source := func(origin, filter, deliver string, transforms ...jetstream.SubjectTransformConfig) *jetstream.StreamSource {
		origins[origin] = oldSourceConsumer(bus.EventsSourceConsumer, deliver, filter, replicas)
		return &jetstream.StreamSource{
			Name:              origin,
			SubjectTransforms: transforms,
			Consumer:          &jetstream.StreamConsumerSource{Name: bus.EventsSourceConsumer, DeliverSubject: deliver},
		}
	}
	events = jetstream.StreamConfig{
		Name:       bus.StreamEvents,
		Subjects:   []string{bus.SubjectEvents},
		Retention:  jetstream.LimitsPolicy,
		Storage:    jetstream.FileStorage,
		Replicas:   replicas,
		MaxAge:     bus.DefaultEventsMaxAge,
		DenyPurge:  true,
		DenyDelete: true,
		Sources: []*jetstream.StreamSource{
			source(bus.StreamJobEvents, "jetway.jobevents.*.*", "jetway.sourcing.jobevents"),
			source(bus.StreamAgentEvents, "jetway.agentevents.*.*", "jetway.sourcing.agentevents"),
			source(bus.StreamSchedules, "jetway.fired.*.*", "jetway.sourcing.fired",
				jetstream.SubjectTransformConfig{Source: "jetway.fired.*.*", Destination: "jetway.events.{{wildcard(1)}}.{{wildcard(2)}}"}),
		},
	}
	return events, origins
}

// MakeUnsharded makes, on a server without the partition mapping, the
// layout of just before the shards, for tests of the upgrade: the origin
// streams as StreamConfigs makes them, JETWAY_EVENTS taking
// jetway.events.> and sourcing them (UnshardedEvents), JETWAY_WORK
// sourcing it through jetway-work-source-2 with the partition in front
// (UnshardedWork), and the runners' pinned consumers work-<p> on it
// (filter <p>.>, group bus.WorkGroup), whose un-acked events stay pending
// for a minute.
func MakeUnsharded(ctx context.Context, js jetstream.JetStream, cfg bus.ProvisionConfig) error {
	for _, sc := range bus.StreamConfigs(cfg) {
		if sc.Name != bus.StreamJobEvents && sc.Name != bus.StreamAgentEvents && sc.Name != bus.StreamSchedules {
			continue
		}
		if _, err := js.CreateStream(ctx, sc); err != nil {
			return fmt.Errorf("make %s: %w", sc.Name, err)
		}
	}
	events, origins := UnshardedEvents(cfg)
	for origin, cc := range origins {
		if _, err := js.CreatePushConsumer(ctx, origin, cc); err != nil {
			return fmt.Errorf("the log's source consumer on %s: %w", origin, err)
		}
	}
	if _, err := js.CreateStream(ctx, events); err != nil {
		return fmt.Errorf("make the unsharded %s: %w", bus.StreamEvents, err)
	}
	work, source := UnshardedWork(cfg, "jetway-work-source-2")
	if _, err := js.CreatePushConsumer(ctx, bus.StreamEvents, source); err != nil {
		return fmt.Errorf("the work queue's source consumer: %w", err)
	}
	if _, err := js.CreateStream(ctx, work); err != nil {
		return fmt.Errorf("make %s: %w", bus.StreamWork, err)
	}
	p, _ := strconv.Atoi(work.Metadata[bus.MetadataPartitions])
	for part := range p {
		if _, err := js.CreateConsumer(ctx, bus.StreamWork, jetstream.ConsumerConfig{
			Durable:        bus.WorkConsumerName(part),
			FilterSubject:  strconv.Itoa(part) + ".>",
			AckPolicy:      jetstream.AckExplicitPolicy,
			AckWait:        time.Minute,
			MaxAckPending:  1000,
			PriorityPolicy: jetstream.PriorityPolicyPinned,
			PinnedTTL:      3 * time.Second,
			PriorityGroups: []string{bus.WorkGroup},
			Replicas:       work.Replicas,
		}); err != nil {
			return fmt.Errorf("old work consumer %d: %w", part, err)
		}
	}
	return nil
}
