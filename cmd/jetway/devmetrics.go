package main

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"jetway/pkg/bus"
)

// stateCollector gives `jetway dev`'s /metrics the runner's and the jobs
// worker's side of the system, read from what they keep in JetStream at
// scrape time: the events waiting for a runner, the sessions by state and
// the background jobs by status. Those services keep no Prometheus
// registry of their own, and in dev they share this process with it.
type stateCollector struct {
	js       jetstream.JetStream
	pending  *prometheus.Desc
	sessions *prometheus.Desc
	jobs     *prometheus.Desc
}

func newStateCollector(js jetstream.JetStream) *stateCollector {
	return &stateCollector{
		js: js,
		pending: prometheus.NewDesc("jetway_runner_work_pending",
			"Events in the work shards ("+bus.StreamWorkPrefix+"<k>) that no runner has acked yet (or the log not yet copied): queued, or held by a busy session.", nil, nil),
		sessions: prometheus.NewDesc("jetway_runner_sessions",
			"Sessions by state (idle, running, interrupted, stopped) as the runners record them.", []string{"state"}, nil),
		jobs: prometheus.NewDesc("jetway_jobs",
			"Background jobs by status (running, exited, killed, …) as the jobs workers record them.", []string{"status"}, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.sessions
	ch <- c.jobs
}

// scrapeTimeout bounds the reads of one scrape.
const scrapeTimeout = 2 * time.Second

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	if pending, ok := c.workPending(ctx); ok {
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending))
	}
	c.countBy(ctx, ch, bus.BucketSessions, "state", c.sessions)
	c.countBy(ctx, ch, bus.BucketJobs, "status", c.jobs)
}

// workPending counts the events in every work shard (false when the
// shards cannot be read).
func (c *stateCollector) workPending(ctx context.Context) (uint64, bool) {
	l, err := bus.ReadLayout(ctx, c.js)
	if err != nil {
		return 0, false
	}
	var pending uint64
	for k := range l.Shards {
		st, err := c.js.Stream(ctx, bus.WorkStream(k))
		if err != nil {
			return 0, false
		}
		info, err := st.Info(ctx)
		if err != nil {
			return 0, false
		}
		pending += info.State.Msgs
	}
	return pending, true
}

// countBy counts the JSON records of bucket by the value of field.
func (c *stateCollector) countBy(ctx context.Context, ch chan<- prometheus.Metric, bucket, field string, desc *prometheus.Desc) {
	kv, err := c.js.KeyValue(ctx, bucket)
	if err != nil {
		return
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return
	}
	// Stopping a lister only ends its watch; a failure leaves nothing open.
	defer func() { _ = lister.Stop() }()
	counts := map[string]int{}
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			break
		}
		var rec map[string]json.RawMessage
		var v string
		if json.Unmarshal(e.Value(), &rec) != nil || json.Unmarshal(rec[field], &v) != nil || v == "" {
			continue
		}
		counts[v]++
	}
	for v, n := range counts {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(n), v)
	}
}
