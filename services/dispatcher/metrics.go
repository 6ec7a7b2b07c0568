package dispatcher

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests  *prometheus.CounterVec   // route, code
	duration  *prometheus.HistogramVec // route
	published *prometheus.CounterVec   // outcome: published, duplicate
	refused   *prometheus.CounterVec   // problem slug
	streams   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetway_dispatcher_requests_total",
			Help: "API requests by route (HTTP pattern or NATS endpoint) and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "jetway_dispatcher_request_duration_seconds",
			Help:    "Time to answer an API request (SSE streams excluded).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"route"}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetway_dispatcher_events_published_total",
			Help: "Events accepted onto JETWAY_EVENTS; duplicate means the same tenant's session had the caller-chosen CE id already (not stored again).",
		}, []string{"outcome"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetway_dispatcher_refusals_total",
			Help: "Requests refused, by problem type.",
		}, []string{"problem"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jetway_dispatcher_sse_streams",
			Help: "Open Server-Sent Events streams.",
		}),
	}
	var err error
	m.requests = register(reg, m.requests, &err)
	m.duration = register(reg, m.duration, &err)
	m.published = register(reg, m.published, &err)
	m.refused = register(reg, m.refused, &err)
	m.streams = register(reg, m.streams, &err)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: metrics: %w", err)
	}
	return m, nil
}

// register adds c to reg, reusing the collector already there when a second
// Dispatcher shares the registry (as in tests, or two in one process).
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		if *errp == nil {
			*errp = err
		}
	}
	return c
}
