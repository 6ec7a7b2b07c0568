package notifier

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	headlines   *prometheus.CounterVec
	unreadable  prometheus.Counter
	attempts    *prometheus.CounterVec
	deadLetters prometheus.Counter
}

// newMetrics registers the notifier's metrics on reg (a private registry
// when nil, so tests and several notifiers in one process do not collide).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &metrics{
		headlines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetway_notifier_headlines_total",
			Help: "Headlines published, by the event type they are about.",
		}, []string{"about"}),
		unreadable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetway_notifier_unreadable_total",
			Help: "Source messages that could not be read and made no headline.",
		}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetway_notifier_webhook_attempts_total",
			Help: "Webhook POSTs, by result (ok, failed).",
		}, []string{"result"}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetway_notifier_dead_letters_total",
			Help: "Webhook deliveries that ran out of attempts.",
		}),
	}
	for _, c := range []prometheus.Collector{m.headlines, m.unreadable, m.attempts, m.deadLetters} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("notifier: register metrics: %w", err)
		}
	}
	return m, nil
}
