package bustest

import (
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
	for _, sc := range bus.StreamConfigs(cfg) {
		if sc.Name == bus.StreamWork {
			work = sc
		}
	}
	src := *work.Sources[0]
	src.Consumer = &jetstream.StreamConsumerSource{Name: "jetway-work-source", DeliverSubject: src.Consumer.DeliverSubject}
	work.Sources = []*jetstream.StreamSource{&src}
	return events, work, bus.SourceConsumerConfig(&src, cfg)
}
