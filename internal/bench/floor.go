package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// Names of the transport floor figures: the event path a runner stands
// on, with nothing of a runner in it. FigRawFloor is the one the runner's
// figures compare with (one shard, as bus.Provision makes by default).
const (
	FigRawFloor        = "raw js work shard, pinned pulls, acked, logged"
	FigRawFloorShards  = "raw js 2 work shards, pinned pulls, acked, logged"
	FigRawFloorShards4 = "raw js 4 work shards, pinned pulls, acked, logged"
	// FigRawFloorUnsharded is the event path before the shards (a work
	// queue sourcing the events stream), measured in the same run so the
	// two can be compared.
	FigRawFloorUnsharded = "raw js sourced work queue, pinned pulls, acked (layout before the shards)"
	// FigRawFloorAckAll is the one-shard floor with the work consumers'
	// acks gathered: ack-all consumers, each acking its newest delivery
	// every floorAckEvery. jetway acks every event on its own (an event a
	// busy session holds as a notice must not hold back the acks of the
	// events after it); this says what gathering them would give.
	FigRawFloorAckAll = "raw js work shard, pinned pulls, ack-all every 5 ms, logged"
)

// floorAckEvery is how often FigRawFloorAckAll's consumers ack.
const floorAckEvery = 5 * time.Millisecond

// The goal of the transport floor: a quarter of raw async publish.
const (
	floorGoal      = "≥ 25% of raw async publish"
	floorGoalRatio = 0.25
)

// floorKind is the subject kind the floor publishes under:
// jetway.benchfloor.<tenant>.<session>, partitioned by a mapping of the
// bench's own (floorMapping) as jetway.events.… is by jetway's, so the
// floor's streams never take jetway's events nor overlap jetway's shards.
const floorKind = "benchfloor"

// floorSessions is how many sessions the floor's messages rotate over.
const floorSessions = 200

// floorMapping partitions the floor's subjects as bus.PartitionMappings
// partitions jetway's: the bench's server carries it beside jetway's.
func floorMapping(partitions int) bus.Mapping {
	return bus.Mapping{
		From: "jetway." + floorKind + ".*.*",
		To:   fmt.Sprintf("jetway.%s.{{partition(%d,1,2)}}.{{wildcard(1)}}.{{wildcard(2)}}", floorKind, partitions),
	}
}

// floorPath is one event path the floor measures: where each message is
// published, which stream each partition's consumer is on, and when the
// path is empty again.
type floorPath struct {
	conn    string   // name of the consumers' connection
	streams []string // the streams the partition consumers are on
	shardOf func(p int) int
	// filter, if set, replaces the work consumers' filter of partition p.
	filter  func(p int) string
	subject func(i int) string // the i-th message's subject
	// ackEvery, if set, makes the consumers ack-all ones that ack their
	// newest delivery this often, instead of every message.
	ackEvery time.Duration
	// logged, if set, waits until the path's log holds the n messages.
	logged func(ctx context.Context, n int) error
	// emptied waits until every message is gone from the path's streams.
	emptied func(ctx context.Context) error
	drop    func()
}

// floorRun is what one floor measurement found.
type floorRun struct {
	rate  float64       // messages per second, first publish to every message acked and logged
	total time.Duration // first publish to every message acked and logged
	empty time.Duration // first publish to the path's streams empty
	msgs  float64       // messages per message on the consumers' connection (0: unknown)
	// cpu is the process's CPU from the first publish until every message
	// was acked and logged (zero when it could not be read).
	cpu cpuSpan
}

// measureFloor times what moving an event costs before any runner work,
// on the sharded path as jetway now lays it out (one shard, then two), and
// on the layout before the shards for comparison. A runner's sustained
// rate cannot pass the first: it adds, per event, a session actor, the
// transcript and the model call.
func (e *env) measureFloor(ctx context.Context) {
	const goal = "baseline"
	partitions, mapped, err := e.floorPartitions(ctx)
	if err != nil {
		for _, f := range []string{FigRawFloor, FigRawFloorShards, FigRawFloorShards4, FigRawFloorUnsharded, FigRawFloorAckAll} {
			e.skip(f, "msgs/s", goal, err)
		}
		return
	}
	n := e.sizes.RawMessages
	how := "mapped to its partition by the server"
	if !mapped {
		how = "its partition computed by the client (bus.PartitionFor: a server given by --nats has no mapping for the bench's subjects)"
	}

	defer e.measureFloorAckAll(ctx, partitions, mapped)
	for _, shards := range []int{1, 2, 4} {
		name := map[int]string{1: FigRawFloor, 2: FigRawFloorShards, 4: FigRawFloorShards4}[shards]
		e.progress("raw: %d async publishes into %d work shard(s), consumed by %d pinned pulls and acked, logged", n, shards, partitions)
		path, err := e.shardPath(ctx, shards, partitions, mapped)
		if err != nil {
			e.skip(name, "msgs/s", goal, err)
			continue
		}
		run, err := e.runFloor(ctx, path, partitions)
		path.drop()
		if err != nil {
			e.skip(name, "msgs/s", goal, err)
			continue
		}
		r := figure(name, "msgs/s", run.rate).vs("raw async publish", e.base.asyncRate)
		r = r.goal(floorGoal, r.Ratio != nil && *r.Ratio >= floorGoalRatio)
		if shards == 1 {
			e.base.floorRate, e.base.floorMsgs = run.rate, run.msgs
			if e.srv != nil && run.cpu.cpu > 0 {
				e.base.floorCPU, e.base.floorCores = run.cpu.perItem(n), run.cpu.cores()
			}
			e.add(r.note("%d messages published async on jetway.%s.<tenant>.<session> (%d sessions), %s, into an interest shard; pulled through %d pinned partition consumers (jetway's work consumer configuration), each acked, while a log stream sourced the shard through an unfiltered durable flow-controlled consumer and took the partition token out with its own subject transform (as JETWAY_EVENTS does); timed until every ack was applied and the log held every message: what moving an event costs with no runner work at all. The shard itself was empty at %s: the log's consumer releases what it copied only at its next flow control answer (when its %d in flight are reached, or at its 1 s heartbeat after a lull); %.2f messages per message on the consumers' connection%s",
				n, floorKind, floorSessions, how, partitions, run.empty.Round(time.Millisecond), bus.LogSourceMaxAckPending, run.msgs, floorCPUNote(e.base)))
		} else {
			e.add(r.note("as the figure of one shard, with partition p in shard p mod %d: %d interest streams on this one server and one log sourcing them (on a cluster each shard has a leader of its own; here they share the server's two cores, which one stream alone does not keep busy); the shards were empty at %s",
				shards, shards, run.empty.Round(time.Millisecond)))
		}
	}

	e.progress("raw: %d async publishes through a sourced work queue (the layout before the shards), consumed by %d pinned pulls and acked", n, partitions)
	path, err := e.unshardedPath(ctx, partitions)
	if err != nil {
		e.skip(FigRawFloorUnsharded, "msgs/s", goal, err)
		return
	}
	run, err := e.runFloor(ctx, path, partitions)
	path.drop()
	if err != nil {
		e.skip(FigRawFloorUnsharded, "msgs/s", goal, err)
		return
	}
	r := figure(FigRawFloorUnsharded, "msgs/s", run.rate).vs("raw async publish", e.base.asyncRate).info("baseline")
	e.add(r.note("%d messages published async into a stream that a work queue sources with the partition transform (JETWAY_EVENTS → JETWAY_WORK before the shards), pulled through %d pinned partition consumers and each acked, until every ack was applied and the work queue was empty: the floor the shards replace, for comparison", n, partitions))
}

// floorPartitions is P for the floor: the bench's own server maps the
// floor's subjects (mapped); a server given by --nats does not, and the
// floor takes that server's P and computes partitions itself.
func (e *env) floorPartitions(ctx context.Context) (partitions int, mapped bool, err error) {
	if e.srv != nil {
		return benchPartitions, true, nil
	}
	p, err := bus.ServerPartitions(ctx, e.nc)
	if err != nil {
		return 0, false, err
	}
	return p, false, nil
}

// runFloor publishes Sizes.RawMessages messages on path as fast as the
// client's window allows, consumed by one client through the P pinned
// partition consumers jetway's runners use, each message acked (as a
// runner acks a recorded event: one message, not answered), and times
// them from the first publish until every ack was applied and the path's
// log (if it has one) held every message. It then waits for the path's
// streams to empty, and says when they did: on the sharded path the log's
// consumer releases what it copied only at its next flow control answer,
// a delay that holds storage but no runner, so it is not in the rate.
func (e *env) runFloor(ctx context.Context, path floorPath, partitions int) (floorRun, error) {
	// The consumers have a connection of their own, as runners do.
	cnc, err := nats.Connect(e.url, nats.Name(path.conn))
	if err != nil {
		return floorRun{}, fmt.Errorf("connect: %w", err)
	}
	defer cnc.Close()
	cjs, err := jetstream.New(cnc)
	if err != nil {
		return floorRun{}, err
	}
	n := e.sizes.RawMessages
	var acked atomic.Int64
	done := make(chan struct{})
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	streams := map[string]jetstream.Stream{}
	var consumers []jetstream.Consumer
	var gathered []*ackGatherer
	for p := range partitions {
		name := path.streams[path.shardOf(p)]
		st, ok := streams[name]
		if !ok {
			if st, err = cjs.Stream(ctx, name); err != nil {
				return floorRun{}, fmt.Errorf("stream %s: %w", name, err)
			}
			streams[name] = st
		}
		cc := bus.WorkConsumerConfig(p, bus.ProvisionConfig{})
		cc.Replicas = 1
		if path.filter != nil {
			cc.FilterSubject = path.filter(p)
		}
		ack := func(m jetstream.Msg) error { return m.Ack() }
		if path.ackEvery > 0 {
			// Held for the next gathered ack (ackEvery) instead.
			cc.AckPolicy = jetstream.AckAllPolicy
			g := &ackGatherer{}
			ack = func(m jetstream.Msg) error { g.hold(m); return nil }
			gathered = append(gathered, g)
		}
		handle := func(m jetstream.Msg) {
			if ack(m) == nil && acked.Add(1) == int64(n) {
				close(done)
			}
		}
		cons, err := st.CreateOrUpdateConsumer(ctx, cc)
		if err != nil {
			return floorRun{}, fmt.Errorf("create consumer %s on %s: %w", cc.Durable, name, err)
		}
		consumers = append(consumers, cons)
		cctx, err := cons.Consume(handle, jetstream.PullPriorityGroup(bus.WorkGroup), jetstream.PullMaxMessages(256))
		if err != nil {
			return floorRun{}, fmt.Errorf("consume %s: %w", cc.Durable, err)
		}
		stops = append(stops, cctx.Stop)
	}

	msg, err := sampleEvent()
	if err != nil {
		return floorRun{}, err
	}
	hdr := withoutMsgID(msg.Header)
	if path.ackEvery > 0 {
		stopAcks := ackEvery(path.ackEvery, gathered)
		defer stopAcks()
	}
	before, cerr := e.connMsgs(path.conn)
	clock := startCPU()
	t0 := time.Now()
	for i := range n {
		m := &nats.Msg{Subject: path.subject(i), Header: hdr, Data: msg.Data}
		if err := publishWhenRoom(ctx, e.js, m); err != nil {
			return floorRun{}, fmt.Errorf("async publish: %w", err)
		}
	}
	wctx, cancel := deadline(ctx, 2*time.Minute)
	defer cancel()
	select {
	case <-done:
	case <-wctx.Done():
		return floorRun{}, fmt.Errorf("%d of %d messages acked: %w", acked.Load(), n, wctx.Err())
	}
	for _, g := range gathered {
		g.ack() // the newest of each, which the next tick may not have reached
	}
	// Acks are not answered: each consumer's state is the word that
	// they all arrived.
	for _, cons := range consumers {
		if err := settled(wctx, cons); err != nil {
			return floorRun{}, err
		}
	}
	if path.logged != nil {
		if err := path.logged(wctx, n); err != nil {
			return floorRun{}, err
		}
	}
	run := floorRun{total: time.Since(t0)}
	run.rate = rate(n, run.total)
	if span, err := clock.stop(); err == nil {
		run.cpu = span
	}
	if err := path.emptied(wctx); err != nil {
		return floorRun{}, err
	}
	run.empty = time.Since(t0)
	if after, err := e.connMsgs(path.conn); cerr == nil && err == nil {
		run.msgs = float64(after-before) / float64(n)
	}
	return run, nil
}

// shardPath makes the sharded event path on streams of the bench's own:
// K interest shards capturing the floor's partitioned subjects (partition
// p in shard p mod K, as bus.WorkStreamOf), and a log stream without
// subjects that sources every shard through a durable flow-controlled
// consumer and JETWAY_EVENTS's own transform (bus.EventsSources,
// bus.LogTransform). A message
// leaves its shard once its partition consumer acked it and the log's
// consumer did.
func (e *env) shardPath(ctx context.Context, shards, partitions int, mapped bool) (floorPath, error) {
	run := uid()
	name := "BENCH_FLOOR_" + run
	tenant := "f" + run
	logName := name + "_LOG"
	cfg := bus.ProvisionConfig{Partitions: partitions, Shards: shards, Replicas: 1}
	var created []string
	drop := func() {
		// The log first: its source consumers live on the shards.
		for i := len(created) - 1; i >= 0; i-- {
			_ = e.js.DeleteStream(context.WithoutCancel(ctx), created[i])
		}
	}
	path := floorPath{
		conn:    fmt.Sprintf("jetway-bench-floor-k%d", shards),
		shardOf: func(p int) int { return bus.ShardOf(p, shards) },
		drop:    drop,
	}
	var sources []*jetstream.StreamSource
	for k := range shards {
		shard := name + "_" + strconv.Itoa(k)
		var subjects []string
		if shards <= 1 {
			subjects = []string{fmt.Sprintf("jetway.%s.*.%s.*", floorKind, tenant)}
		} else {
			for p := range partitions {
				if bus.ShardOf(p, shards) == k {
					subjects = append(subjects, fmt.Sprintf("jetway.%s.%d.%s.*", floorKind, p, tenant))
				}
			}
		}
		if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: shard, Subjects: subjects, Retention: jetstream.InterestPolicy,
			Storage: jetstream.FileStorage, Replicas: 1,
		}); err != nil {
			drop()
			return floorPath{}, fmt.Errorf("create shard %s: %w", shard, err)
		}
		created = append(created, shard)
		path.streams = append(path.streams, shard)
		src := &jetstream.StreamSource{
			Name:     shard,
			Consumer: &jetstream.StreamConsumerSource{Name: "bench-log-source", DeliverSubject: "bench.sourcing." + shard},
		}
		// The source consumer before the log, as bus.Provision makes it:
		// an interest shard keeps nothing nobody is interested in.
		cc := bus.SourceConsumerConfig(bus.StreamEvents, src, cfg)
		cc.Description = logName + " sources " + shard
		c, err := e.js.CreatePushConsumer(ctx, shard, cc)
		if err != nil {
			drop()
			return floorPath{}, fmt.Errorf("create the log's source consumer on %s: %w", shard, err)
		}
		if c.CachedInfo().Config.AckPolicy != jetstream.AckFlowControlPolicy {
			drop()
			return floorPath{}, errors.New("the server does not support durable sourcing (needs nats-server 2.14 or later)")
		}
		sources = append(sources, src)
	}
	logStream, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: logName, Sources: sources, SubjectTransform: bus.LogTransform(), Storage: jetstream.FileStorage, Replicas: 1,
	})
	if err != nil {
		drop()
		return floorPath{}, fmt.Errorf("create log %s: %w", logName, err)
	}
	created = append(created, logName)

	sessions := make([]string, floorSessions)
	for i := range sessions {
		s := fmt.Sprintf("s%03d", i)
		if mapped {
			sessions[i] = fmt.Sprintf("jetway.%s.%s.%s", floorKind, tenant, s)
		} else {
			sessions[i] = fmt.Sprintf("jetway.%s.%d.%s.%s", floorKind, bus.PartitionFor(tenant, s, partitions), tenant, s)
		}
	}
	path.subject = func(i int) string { return sessions[i%floorSessions] }
	path.logged = func(ctx context.Context, n int) error { return holds(ctx, logStream, n) }
	path.emptied = func(ctx context.Context) error {
		for _, shard := range path.streams {
			st, err := e.js.Stream(ctx, shard)
			if err != nil {
				return fmt.Errorf("shard %s: %w", shard, err)
			}
			if err := drained(ctx, st); err != nil {
				return fmt.Errorf("shard %s: %w", shard, err)
			}
		}
		return nil
	}
	return path, nil
}

// unshardedPath makes the event path as it was before the shards: a
// stream of the bench's own and a work queue stream sourcing it with the
// partition transform (subjects <p>.<prefix>.<tenant>.<session>), as
// JETWAY_EVENTS → JETWAY_WORK were.
func (e *env) unshardedPath(ctx context.Context, partitions int) (floorPath, error) {
	name := "BENCH_SRC_" + uid()
	prefix := "bench." + name
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage, Replicas: 1,
	}); err != nil {
		return floorPath{}, fmt.Errorf("create stream: %w", err)
	}
	drop := func() {
		_ = e.js.DeleteStream(context.WithoutCancel(ctx), name+"_WORK")
		_ = e.js.DeleteStream(context.WithoutCancel(ctx), name)
	}
	work, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name + "_WORK", Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: 1,
		Sources: []*jetstream.StreamSource{{Name: name, SubjectTransforms: []jetstream.SubjectTransformConfig{{
			Source:      prefix + ".*.*",
			Destination: fmt.Sprintf("{{partition(%d,1,2)}}.%s.{{wildcard(1)}}.{{wildcard(2)}}", partitions, prefix),
		}}}},
	})
	if err != nil {
		drop()
		return floorPath{}, fmt.Errorf("create work queue: %w", err)
	}
	return floorPath{
		conn:    "jetway-bench-floor-unsharded",
		streams: []string{name + "_WORK"},
		shardOf: func(int) int { return 0 },
		filter:  func(p int) string { return strconv.Itoa(p) + ".>" },
		subject: func(i int) string { return fmt.Sprintf("%s.t.s%03d", prefix, i%floorSessions) },
		emptied: func(ctx context.Context) error { return drained(ctx, work) },
		drop:    drop,
	}, nil
}

// settled waits until a consumer has delivered everything its stream
// holds for it and every delivery's ack has been applied.
func settled(ctx context.Context, cons jetstream.Consumer) error {
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("consumer state: %w", err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return nil
		}
		t := time.NewTimer(time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("consumer %s: %d undelivered, %d unacked after every ack was sent: %w", info.Name, info.NumPending, info.NumAckPending, ctx.Err())
		case <-t.C:
		}
	}
}

// drained waits until a stream holds no message: every ack sent has been
// applied (and, on an interest stream, every other interest's too). Acks
// are not answered, so the stream's state is the only word that they all
// arrived.
func drained(ctx context.Context, st jetstream.Stream) error {
	for {
		info, err := st.Info(ctx)
		if err != nil {
			return fmt.Errorf("stream state: %w", err)
		}
		if info.State.Msgs == 0 {
			return nil
		}
		t := time.NewTimer(time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("stream still holds %d messages after every ack: %w", info.State.Msgs, ctx.Err())
		case <-t.C:
		}
	}
}

// publishWhenRoom publishes m async, waiting while the client's window of
// unacknowledged publishes is full: with consumers acking on the same
// server, the stream acks publishes more slowly than they are sent, and the
// client refuses a publish that stalls longer than its stall wait.
func publishWhenRoom(ctx context.Context, js jetstream.JetStream, m *nats.Msg) error {
	for {
		_, err := js.PublishMsgAsync(m)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// holds waits until st holds n messages or ctx ends.
func holds(ctx context.Context, st jetstream.Stream, n int) error {
	for {
		info, err := st.Info(ctx)
		if err != nil {
			return fmt.Errorf("stream %s: %w", st.CachedInfo().Config.Name, err)
		}
		if info.State.Msgs >= uint64(n) {
			return nil
		}
		t := time.NewTimer(time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("stream %s holds %d of %d messages: %w", info.Config.Name, info.State.Msgs, n, ctx.Err())
		case <-t.C:
		}
	}
}

// measureFloorAckAll measures FigRawFloorAckAll: the one-shard floor with
// its acks gathered, for how many of a floor consumer's messages the
// per-event ack costs and what it costs in rate.
func (e *env) measureFloorAckAll(ctx context.Context, partitions int, mapped bool) {
	const goal = "what gathered acks would give"
	e.progress("raw: %d async publishes into 1 work shard, consumed by %d pinned ack-all pulls acking every %s, logged", e.sizes.RawMessages, partitions, floorAckEvery)
	path, err := e.shardPath(ctx, 1, partitions, mapped)
	if err != nil {
		e.skip(FigRawFloorAckAll, "msgs/s", goal, err)
		return
	}
	path.conn += "-ackall"
	path.ackEvery = floorAckEvery
	run, err := e.runFloor(ctx, path, partitions)
	path.drop()
	if err != nil {
		e.skip(FigRawFloorAckAll, "msgs/s", goal, err)
		return
	}
	r := figure(FigRawFloorAckAll, "msgs/s", run.rate).vs("raw async publish", e.base.asyncRate).info(goal)
	e.add(r.note("as the figure of one shard, but each partition consumer ack-all, acking its newest delivery every %s (and once more at the end) instead of every message: %.2f messages per message on the consumers' connection, against %.2f acking each; jetway acks each event on its own, since under ack-all an event a busy session holds as a notice would hold back the acks of every later event of its partition",
		floorAckEvery, run.msgs, e.base.floorMsgs))
}

// ackGatherer holds a partition consumer's newest delivery for an
// ack-all ack.
type ackGatherer struct {
	mu            sync.Mutex
	newest, acked jetstream.Msg
}

func (g *ackGatherer) hold(m jetstream.Msg) {
	g.mu.Lock()
	g.newest = m
	g.mu.Unlock()
}

// ack acks the newest delivery, which under ack-all acks every earlier
// one, unless it was acked already.
func (g *ackGatherer) ack() {
	g.mu.Lock()
	m := g.newest
	if m == nil || m == g.acked {
		g.mu.Unlock()
		return
	}
	g.acked = m
	g.mu.Unlock()
	_ = m.Ack()
}

// ackEvery acks each gatherer's newest delivery every d until stopped.
func ackEvery(d time.Duration, gs []*ackGatherer) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				for _, g := range gs {
					g.ack()
				}
			}
		}
	}()
	return func() { close(quit); <-done }
}
