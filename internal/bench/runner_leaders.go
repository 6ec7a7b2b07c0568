package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// GroupLeaders measures the streams off the event path that take a write
// for most events and have one leader each, whatever K is: how fast one
// leader takes jetway's kind of write, and so how many events a second a
// deployment carries before one of them needs splitting.
const GroupLeaders = "leaders"

// Names of the single-leader figures.
const (
	FigLeaderLog         = "one leader: the log of record copying a shard"
	FigLeaderTranscripts = "one leader: fenced transcript appends"
	FigLeaderOut         = "one leader: output stores"
	FigLeaderSessions    = "one leader: session record compare-and-swap writes"
	FigLeadersCeiling    = "events/s the single leaders carry (the least of the four)"
)

// The file sorts after runner.go: the group runs after the runner's, whose
// tapped run says what each leader takes per event.
func init() {
	AllGroups = append(AllGroups, GroupLeaders)
	measures[GroupLeaders] = (*env).measureLeaders
}

// leaderLoad is what one leader takes per event in a sustained run.
type leaderLoad struct {
	perEvent float64 // writes per event
	size     int     // mean payload bytes of a write
}

// tapKinds are the tap's kinds of message that each leader stores.
var tapKinds = map[string]func(kind string) bool{
	bus.StreamTranscripts: func(k string) bool { return k == "out: transcript append" },
	bus.StreamOut:         func(k string) bool { return strings.HasPrefix(k, "out: output event") },
	bus.StreamSessions:    func(k string) bool { return k == "out: session record write" },
}

// leaderLoadsOf turns a tapped run's counts and bytes into each leader's
// load per event.
func leaderLoadsOf(counts, sizes map[string]int, events int) map[string]leaderLoad {
	out := map[string]leaderLoad{}
	for stream, is := range tapKinds {
		n, b := 0, 0
		for k, c := range counts {
			if is(k) {
				n += c
				b += sizes[k]
			}
		}
		if n > 0 && events > 0 {
			out[stream] = leaderLoad{perEvent: float64(n) / float64(events), size: b / n}
		}
	}
	return out
}

// defaultWriteSize is a write's payload size when the tapped run did not
// measure it: a model answer's record, a text event, a session record.
var defaultWriteSize = map[string]int{bus.StreamTranscripts: 600, bus.StreamOut: 250, bus.StreamSessions: 350}

// writeSize is the payload size of a write into stream.
func (e *env) writeSize(stream string) int {
	if l, ok := e.base.leaderLoads[stream]; ok && l.size > 0 {
		return l.size
	}
	return defaultWriteSize[stream]
}

// measureLeaders measures each single leader alone, on streams of the
// bench's own configured as jetway's (bus.StreamConfigs, bus.BucketConfigs)
// at one replica, with the writes the runners make: fenced appends and
// compare-and-swap writes from as many sessions as the sustained run has,
// each waiting for its answer before its next as a session does, async
// output stores, and the log's durable source copying a full shard.
func (e *env) measureLeaders(ctx context.Context) {
	n := max(e.sizes.RawMessages/2, 1000)
	chains := e.sizes.SustainedSessions
	type leader struct {
		name, stream string
		measure      func(context.Context, int, int) (float64, error)
		what         string
	}
	leaders := []leader{
		{FigLeaderLog, bus.StreamEvents, e.leaderLog,
			"%d events of a full shard copied by a log stream configured as JETWAY_EVENTS (its own subject transform) through its unfiltered durable flow-controlled source consumer, timed from the log's creation until it held them all"},
		{FigLeaderTranscripts, bus.StreamTranscripts, e.leaderTranscripts,
			"%d appends of %d B over %d sessions into a stream configured as JETWAY_TRANSCRIPTS, each fenced on its session's last sequence and sent after the answer to the one before (the runner's fenced append)"},
		{FigLeaderOut, bus.StreamOut, e.leaderOut,
			"%d output events of %d B over %d sessions published async into a stream configured as JETWAY_OUT"},
		{FigLeaderSessions, bus.StreamSessions, e.leaderSessions,
			"%d writes of %d B over %d keys of a bucket configured as jetway_sessions, each a compare-and-swap on the key's last revision sent after the answer to the one before (a run's claim and end)"},
	}
	ceiling, least, carried := 0.0, "", 0
	for _, l := range leaders {
		size := e.writeSize(l.stream)
		e.progress("leaders: %s", l.name)
		got, err := l.measure(ctx, n, chains)
		if err != nil {
			e.skip(l.name, "msgs/s", "", err)
			continue
		}
		r := figure(l.name, "msgs/s", got).vs("raw async publish", e.base.asyncRate).info("single leader")
		what := fmt.Sprintf(l.what, n, size, chains)
		if l.stream == bus.StreamEvents {
			what = fmt.Sprintf(l.what, n)
		}
		perEvent, known := 1.0, true // the log copies every event once
		if l.stream != bus.StreamEvents {
			load, ok := e.base.leaderLoads[l.stream]
			perEvent, known = load.perEvent, ok && load.perEvent > 0
		}
		if !known {
			e.add(r.note("%s; the events a second this carries need the runner group's tapped run (what a leader takes per event)", what))
			continue
		}
		carries := got / perEvent
		carried++
		e.add(r.note("%s; at %.2f per event (the tapped sustained run) one leader carries %.0f events/s", what, perEvent, carries))
		if least == "" || carries < ceiling {
			ceiling, least = carries, l.stream
		}
	}
	if carried < len(leaders) {
		e.skip(FigLeadersCeiling, "events/s", "", fmt.Errorf("%d of %d leaders measured with a known load per event (the runner group's tapped run says what each takes)", carried, len(leaders)))
		return
	}
	e.add(figure(FigLeadersCeiling, "events/s", ceiling).vs("raw async publish", e.base.asyncRate).info("single leaders").
		note("the least of the four figures above, each leader's rate divided by what it takes per event: %s binds first. Each leader is one stream on one node, so on a cluster they can each have a node; on this machine they share two cores with everything else", least))
}

// configLike is jetway's configuration of stream name, at one replica.
func configLike(name string) (jetstream.StreamConfig, error) {
	all := bus.StreamConfigs(bus.ProvisionConfig{Replicas: 1})
	i := slices.IndexFunc(all, func(sc jetstream.StreamConfig) bool { return sc.Name == name })
	if i < 0 {
		return jetstream.StreamConfig{}, fmt.Errorf("no stream %s in jetway's configuration", name)
	}
	return all[i], nil
}

// leaderStream creates a stream of the bench's own with jetway's
// configuration of the stream named like, under subjects of its own, and
// returns what deletes it.
func (e *env) leaderStream(ctx context.Context, like string, subjects []string) (drop func(), err error) {
	sc, err := configLike(like)
	if err != nil {
		return nil, err
	}
	sc.Name = "BENCH_LEADER_" + uid()
	sc.Subjects, sc.Sources, sc.Description = subjects, nil, "jetway-bench: "+like+" alone"
	if _, err := e.js.CreateStream(ctx, sc); err != nil {
		return nil, e.withServerSaid(fmt.Errorf("create %s like %s: %w", sc.Name, like, err))
	}
	return func() { _ = e.js.DeleteStream(context.WithoutCancel(ctx), sc.Name) }, nil
}

// leaderTranscripts times fenced appends, chains at a time.
func (e *env) leaderTranscripts(ctx context.Context, n, chains int) (float64, error) {
	prefix := "bench." + uid() + ".transcript"
	drop, err := e.leaderStream(ctx, bus.StreamTranscripts, []string{prefix + ".>"})
	if err != nil {
		return 0, err
	}
	defer drop()
	data := make([]byte, e.writeSize(bus.StreamTranscripts))
	return e.inChains(ctx, n, chains, func(ctx context.Context, chain int) (func(context.Context) error, error) {
		subj := fmt.Sprintf("%s.t.s%05d", prefix, chain)
		var last uint64
		return func(ctx context.Context) error {
			ack, err := e.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: data}, jetstream.WithExpectLastSequencePerSubject(last))
			if err != nil {
				return fmt.Errorf("fenced append on %s after %d: %w", subj, last, err)
			}
			last = ack.Sequence
			return nil
		}, nil
	})
}

// leaderSessions times compare-and-swap writes, chains at a time.
func (e *env) leaderSessions(ctx context.Context, n, chains int) (float64, error) {
	i := slices.IndexFunc(bus.BucketConfigs(bus.ProvisionConfig{Replicas: 1}), func(kc jetstream.KeyValueConfig) bool { return kc.Bucket == bus.BucketSessions })
	if i < 0 {
		return 0, fmt.Errorf("no bucket %s in jetway's configuration", bus.BucketSessions)
	}
	kc := bus.BucketConfigs(bus.ProvisionConfig{Replicas: 1})[i]
	kc.Bucket, kc.Description = "bench_leader_"+uid(), "jetway-bench: "+bus.BucketSessions+" alone"
	kv, err := e.js.CreateKeyValue(ctx, kc)
	if err != nil {
		return 0, fmt.Errorf("create bucket %s: %w", kc.Bucket, err)
	}
	defer func() { _ = e.js.DeleteKeyValue(context.WithoutCancel(ctx), kc.Bucket) }()
	data := make([]byte, e.writeSize(bus.StreamSessions))
	return e.inChains(ctx, n, chains, func(ctx context.Context, chain int) (func(context.Context) error, error) {
		key := fmt.Sprintf("t.s%05d", chain)
		var rev uint64
		return func(ctx context.Context) error {
			var err error
			if rev == 0 {
				rev, err = kv.Create(ctx, key, data)
			} else {
				rev, err = kv.Update(ctx, key, data, rev)
			}
			if err != nil {
				return fmt.Errorf("compare-and-swap on %s: %w", key, err)
			}
			return nil
		}, nil
	})
}

// inChains runs n writes as chains sequences side by side, each write of
// a chain after the answer to the one before, and returns writes/s.
func (e *env) inChains(ctx context.Context, n, chains int, newChain func(context.Context, int) (func(context.Context) error, error)) (float64, error) {
	wctx, cancel := deadline(ctx, 2*time.Minute)
	defer cancel()
	steps := make([]func(context.Context) error, chains)
	for c := range chains {
		step, err := newChain(wctx, c)
		if err != nil {
			return 0, err
		}
		steps[c] = step
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, chains)
	t0 := time.Now()
	for c := range chains {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := steps[c](wctx); err != nil {
					errs[c] = err
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	d := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return rate(n, d), nil
}

// leaderOut times async output stores until every one is answered.
func (e *env) leaderOut(ctx context.Context, n, sessions int) (float64, error) {
	prefix := "bench." + uid() + ".out"
	drop, err := e.leaderStream(ctx, bus.StreamOut, []string{prefix + ".>"})
	if err != nil {
		return 0, err
	}
	defer drop()
	data := make([]byte, e.writeSize(bus.StreamOut))
	subjects := make([]string, sessions)
	for i := range subjects {
		subjects[i] = fmt.Sprintf("%s.t.s%05d", prefix, i)
	}
	t0 := time.Now()
	for i := range n {
		if err := publishWhenRoom(ctx, e.js, &nats.Msg{Subject: subjects[i%sessions], Data: data}); err != nil {
			return 0, fmt.Errorf("async publish: %w", err)
		}
	}
	wctx, cancel := deadline(ctx, 2*time.Minute)
	defer cancel()
	select {
	case <-e.js.PublishAsyncComplete():
	case <-wctx.Done():
		return 0, fmt.Errorf("async output stores not answered: %w", wctx.Err())
	}
	return rate(n, time.Since(t0)), nil
}

// leaderLog fills a shard of the bench's own with n events, then times a
// log configured as JETWAY_EVENTS copying it through the durable source
// consumer bus.Provision gives each shard.
func (e *env) leaderLog(ctx context.Context, n, sessions int) (float64, error) {
	run := uid()
	tenant := "l" + run
	shard, logName := "BENCH_LEADER_SHARD_"+run, "BENCH_LEADER_LOG_"+run
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: shard, Subjects: []string{fmt.Sprintf("jetway.%s.*.%s.*", floorKind, tenant)},
		Storage: jetstream.FileStorage, Replicas: 1,
	}); err != nil {
		return 0, e.withServerSaid(fmt.Errorf("create shard %s: %w", shard, err))
	}
	defer func() {
		_ = e.js.DeleteStream(context.WithoutCancel(ctx), logName)
		_ = e.js.DeleteStream(context.WithoutCancel(ctx), shard)
	}()
	msg, err := sampleEvent()
	if err != nil {
		return 0, err
	}
	hdr := withoutMsgID(msg.Header)
	for i := range n {
		s := fmt.Sprintf("s%05d", i%sessions)
		subj := fmt.Sprintf("jetway.%s.%d.%s.%s", floorKind, bus.PartitionFor(tenant, s, benchPartitions), tenant, s)
		if err := publishWhenRoom(ctx, e.js, &nats.Msg{Subject: subj, Header: hdr, Data: msg.Data}); err != nil {
			return 0, fmt.Errorf("fill the shard: %w", err)
		}
	}
	wctx, cancel := deadline(ctx, 2*time.Minute)
	defer cancel()
	select {
	case <-e.js.PublishAsyncComplete():
	case <-wctx.Done():
		return 0, fmt.Errorf("the shard's fill not answered: %w", wctx.Err())
	}
	src := &jetstream.StreamSource{
		Name:     shard,
		Consumer: &jetstream.StreamConsumerSource{Name: "bench-log-source", DeliverSubject: "bench.sourcing." + shard},
	}
	cc := bus.SourceConsumerConfig(bus.StreamEvents, src, bus.ProvisionConfig{Replicas: 1})
	cc.Description = logName + " sources " + shard
	if _, err := e.js.CreatePushConsumer(wctx, shard, cc); err != nil {
		return 0, fmt.Errorf("create the log's source consumer on %s: %w", shard, err)
	}
	sc, err := configLike(bus.StreamEvents)
	if err != nil {
		return 0, err
	}
	sc.Name, sc.Sources, sc.Description = logName, []*jetstream.StreamSource{src}, "jetway-bench: "+bus.StreamEvents+" alone"
	t0 := time.Now()
	logStream, err := e.js.CreateStream(wctx, sc)
	if err != nil {
		return 0, e.withServerSaid(fmt.Errorf("create log %s: %w", logName, err))
	}
	if err := holds(wctx, logStream, n); err != nil {
		return 0, err
	}
	return rate(n, time.Since(t0)), nil
}
