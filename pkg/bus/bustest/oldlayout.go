package bustest

import (
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
	cc := jetstream.ConsumerConfig{
		Durable:        consumer,
		DeliverSubject: src.Consumer.DeliverSubject,
		FilterSubject:  "jetway.*.*.*",
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckFlowControlPolicy,
		FlowControl:    true,
		IdleHeartbeat:  time.Second,
		MaxDeliver:     -1,
		MaxAckPending:  10000,
		Replicas:       replicas,
	}
	return work, cc
}
