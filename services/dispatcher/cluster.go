package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	api "jetway/pkg/dispatcherapi"
	"jetway/services/jobs/jobsapi"
)

// Cluster is the answer of GET /v1/cluster.
type Cluster = api.Cluster

// ClusterStaleAfter is how old a runner's heartbeat may be before the
// cluster view calls it stale. Runners beat every second by default and
// are taken over after three missed beats; a little more keeps a loaded
// machine's late beat from flickering.
const ClusterStaleAfter = 5 * time.Second

// clusterDiscover bounds the jobs workers' discovery: the first answer is
// awaited up to the first, the others a little longer.
const (
	clusterDiscoverFirst = time.Second
	clusterDiscoverMore  = 250 * time.Millisecond
)

// workerConfinementKey is the jobs worker's micro metadata key saying how
// it confines jobs (services/jobs.MetadataConfinement; not imported, so
// the dispatcher does not link the process-containment code).
const workerConfinementKey = "confinement"

// clusterCore reads who does the work, across every tenant: runners,
// partitions, jobs workers, streams and consumers.
type clusterCore struct {
	*store
}

// Cluster reads who does the work: runners and the partitions they hold,
// jobs workers, and jetway's streams and consumers. Only an operator may
// read it: it spans every tenant. A part that cannot be read is named in
// Errors and the rest is still answered.
func (d *clusterCore) Cluster(ctx context.Context, p auth.Principal) (Cluster, error) {
	if !p.Operator {
		return Cluster{}, fmt.Errorf("%w: only an operator token (role %q) may read the cluster", auth.ErrForbidden, auth.RoleOperator)
	}
	c := Cluster{Time: time.Now().UTC(), Runners: []api.ClusterRunner{}, Partitions: []api.ClusterPartition{},
		JobsWorkers: []api.ClusterJobsWorker{}, Streams: []api.ClusterStream{}, Consumers: []api.ClusterConsumer{}}
	note := func(what string, err error) {
		if err != nil {
			c.Errors = append(c.Errors, what+": "+err.Error())
		}
	}
	var err error
	c.Runners, err = d.clusterRunners(ctx)
	note("runners", err)
	c.Streams, c.Consumers, err = d.clusterStreams(ctx)
	note("streams", err)
	c.Partitions, err = d.clusterPartitions(ctx, c.Consumers)
	note("partitions", err)
	c.JobsWorkers, err = d.clusterWorkers(ctx)
	note("jobs workers", err)
	return c, nil
}

// runnerBeat is a runner's heartbeat value as the runner writes it.
type runnerBeat struct {
	Incarnation string `json:"incarnation"`
	Partitions  []int  `json:"partitions"`
}

func (d *clusterCore) clusterRunners(ctx context.Context) ([]api.ClusterRunner, error) {
	out := []api.ClusterRunner{}
	entries, err := d.scan(ctx, bus.BucketRunners, ">")
	for _, e := range entries {
		var b runnerBeat
		if json.Unmarshal(e.Value(), &b) != nil {
			continue
		}
		sort.Ints(b.Partitions)
		out = append(out, api.ClusterRunner{ID: e.Key(), Incarnation: b.Incarnation,
			Heartbeat: e.Created(), Stale: time.Since(e.Created()) > ClusterStaleAfter, Partitions: append([]int{}, b.Partitions...)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}

// clusterStreams lists jetway's streams and their durable consumers
// (a terminal's ordered consumer is ephemeral and not shown).
func (d *clusterCore) clusterStreams(ctx context.Context) ([]api.ClusterStream, []api.ClusterConsumer, error) {
	streams, consumers := []api.ClusterStream{}, []api.ClusterConsumer{}
	lister := d.js.ListStreams(ctx)
	for si := range lister.Info() {
		if !strings.HasPrefix(si.Config.Name, "JETWAY_") {
			continue
		}
		streams = append(streams, api.ClusterStream{Name: si.Config.Name, Messages: si.State.Msgs,
			Bytes: si.State.Bytes, Consumers: si.State.Consumers})
	}
	if err := lister.Err(); err != nil {
		return streams, consumers, fmt.Errorf("list streams: %w", err)
	}
	sort.Slice(streams, func(i, j int) bool { return streams[i].Name < streams[j].Name })
	var errs []error
	for _, s := range streams {
		st, err := d.js.Stream(ctx, s.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("stream %s: %w", s.Name, err))
			continue
		}
		cl := st.ListConsumers(ctx)
		for ci := range cl.Info() {
			if ci.Config.Durable == "" {
				continue
			}
			consumers = append(consumers, api.ClusterConsumer{Stream: s.Name, Name: ci.Name, Pending: ci.NumPending,
				AckPending: ci.NumAckPending, Redelivered: ci.NumRedelivered, Waiting: ci.NumWaiting})
		}
		if err := cl.Err(); err != nil {
			errs = append(errs, fmt.Errorf("consumers of %s: %w", s.Name, err))
		}
	}
	sort.Slice(consumers, func(i, j int) bool {
		a, b := consumers[i], consumers[j]
		return a.Stream < b.Stream || a.Stream == b.Stream && naturalLess(a.Name, b.Name)
	})
	return streams, consumers, errors.Join(errs...)
}

// naturalLess orders work-2 before work-10.
func naturalLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// clusterPartitions is one row per work partition, from its consumer.
func (d *clusterCore) clusterPartitions(ctx context.Context, consumers []api.ClusterConsumer) ([]api.ClusterPartition, error) {
	out := []api.ClusterPartition{}
	l, err := bus.ReadLayout(ctx, d.js)
	if err != nil {
		return out, err
	}
	byName := map[string]api.ClusterConsumer{}
	for _, c := range consumers {
		if strings.HasPrefix(c.Stream, bus.StreamWorkPrefix) {
			byName[c.Stream+"/"+c.Name] = c
		}
	}
	for i := range l.Partitions {
		c := byName[l.Stream(i)+"/"+bus.WorkConsumerName(i)]
		out = append(out, api.ClusterPartition{Partition: i, Pending: c.Pending, AckPending: c.AckPending, Redelivered: c.Redelivered})
	}
	return out, nil
}

// clusterWorkers pings the jobs workers' micro service and counts the
// sessions bound to each.
func (d *clusterCore) clusterWorkers(ctx context.Context) ([]api.ClusterJobsWorker, error) {
	out := []api.ClusterJobsWorker{}
	subject, err := micro.ControlSubject(micro.PingVerb, jobsapi.ServiceName, "")
	if err != nil {
		return out, err
	}
	inbox := d.nc.NewRespInbox()
	sub, err := d.nc.SubscribeSync(inbox)
	if err != nil {
		return out, fmt.Errorf("discover: %w", err)
	}
	// A failed unsubscribe (the connection is gone) leaves nothing to
	// deliver to.
	defer func() { _ = sub.Unsubscribe() }()
	if err := d.nc.PublishRequest(subject, inbox, nil); err != nil {
		return out, fmt.Errorf("discover: %w", err)
	}
	wait, cancel := context.WithTimeout(ctx, clusterDiscoverFirst)
	defer cancel()
	seen := map[string]bool{}
	for {
		msg, err := sub.NextMsgWithContext(wait)
		if err != nil {
			break
		}
		if len(out) == 0 {
			var more context.CancelFunc
			wait, more = context.WithTimeout(wait, clusterDiscoverMore)
			defer more()
		}
		var p micro.Ping
		if json.Unmarshal(msg.Data, &p) != nil || p.Metadata[jobsapi.MetadataWorker] == "" || seen[p.Metadata[jobsapi.MetadataWorker]] {
			continue
		}
		id := p.Metadata[jobsapi.MetadataWorker]
		seen[id] = true
		out = append(out, api.ClusterJobsWorker{ID: id, Version: p.Version, Confinement: p.Metadata[workerConfinementKey]})
	}
	bound, err := d.boundSessions(ctx)
	for i := range out {
		out[i].Sessions = bound[out[i].ID]
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}

// boundSessions counts the sessions bound to each jobs worker.
func (d *clusterCore) boundSessions(ctx context.Context) (map[string]int, error) {
	n := map[string]int{}
	entries, err := d.scan(ctx, bus.BucketWorkers, ">")
	for _, e := range entries {
		n[string(e.Value())]++
	}
	return n, err
}
