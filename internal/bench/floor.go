package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// FigRawFloor is the transport a runner stands on, with nothing of a
// runner in it.
const FigRawFloor = "raw js sourced work queue, pinned pulls, acked"

// measureFloor times what moving an event costs before any runner work:
// async publishes into a stream that a work queue sources with the
// partition transform, consumed by one client through the P pinned
// partition consumers jetway's runners use, each message acked (as a
// runner acks a recorded event: one message, not answered), from the
// first publish until the work queue is empty, every ack applied. A runner's sustained rate cannot pass this: it adds, per
// event, a session actor, the transcript and the model call.
func (e *env) measureFloor(ctx context.Context) {
	const goal = "baseline"
	name := "BENCH_FLOOR_" + uid()
	partitions := bus.DefaultPartitions
	prefix, _, drop, err := e.sourcedPair(ctx, name)
	if err != nil {
		e.skip(FigRawFloor, "msgs/s", goal, err)
		return
	}
	defer drop()

	// The consumers have a connection of their own, as runners do.
	cnc, err := nats.Connect(e.url, nats.Name("jetway-bench-floor"))
	if err != nil {
		e.skip(FigRawFloor, "msgs/s", goal, fmt.Errorf("connect: %w", err))
		return
	}
	defer cnc.Close()
	cjs, err := jetstream.New(cnc)
	if err != nil {
		e.skip(FigRawFloor, "msgs/s", goal, err)
		return
	}
	cwork, err := cjs.Stream(ctx, name+"_WORK")
	if err != nil {
		e.skip(FigRawFloor, "msgs/s", goal, err)
		return
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
	for p := range partitions {
		cc := bus.WorkConsumerConfig(p, bus.ProvisionConfig{})
		cc.Replicas = 1
		cons, err := cwork.CreateOrUpdateConsumer(ctx, cc)
		if err != nil {
			e.skip(FigRawFloor, "msgs/s", goal, fmt.Errorf("create consumer %s: %w", cc.Durable, err))
			return
		}
		cctx, err := cons.Consume(func(m jetstream.Msg) {
			if m.Ack() == nil && acked.Add(1) == int64(n) {
				close(done)
			}
		}, jetstream.PullPriorityGroup(bus.WorkGroup), jetstream.PullMaxMessages(256))
		if err != nil {
			e.skip(FigRawFloor, "msgs/s", goal, fmt.Errorf("consume %s: %w", cc.Durable, err))
			return
		}
		stops = append(stops, cctx.Stop)
	}

	msg, err := sampleEvent()
	if err != nil {
		e.skip(FigRawFloor, "msgs/s", goal, err)
		return
	}
	e.progress("raw: %d async publishes through a sourced work queue, consumed by %d pinned pulls and acked", n, partitions)
	hdr := withoutMsgID(msg.Header)
	before, cerr := e.connMsgs("jetway-bench-floor")
	t0 := time.Now()
	for i := range n {
		m := &nats.Msg{Subject: fmt.Sprintf("%s.t.s%03d", prefix, i%200), Header: hdr, Data: msg.Data}
		if err := publishWhenRoom(ctx, e.js, m); err != nil {
			e.skip(FigRawFloor, "msgs/s", goal, fmt.Errorf("async publish: %w", err))
			return
		}
	}
	wctx, cancel := deadline(ctx, 2*time.Minute)
	defer cancel()
	select {
	case <-done:
	case <-wctx.Done():
		e.skip(FigRawFloor, "msgs/s", goal, fmt.Errorf("%d of %d messages acked: %w", acked.Load(), n, wctx.Err()))
		return
	}
	if err := drained(wctx, cwork); err != nil {
		e.skip(FigRawFloor, "msgs/s", goal, err)
		return
	}
	v := rate(n, time.Since(t0))
	e.base.floorRate = v
	if after, err := e.connMsgs("jetway-bench-floor"); cerr == nil && err == nil {
		e.base.floorMsgs = float64(after-before) / float64(n)
	}
	r := figure(FigRawFloor, "msgs/s", v).vs("raw async publish", e.base.asyncRate).info("baseline")
	e.add(r.note("%d messages published async through the sourced work queue, pulled through %d pinned partition consumers (jetway's work consumer configuration) and each acked, until the work queue was empty: what moving an event costs with no runner work at all", n, partitions))
}

// drained waits until a work queue stream holds no message: every ack
// sent has been applied. Acks are not answered, so the stream's state is
// the only word that they all arrived.
func drained(ctx context.Context, st jetstream.Stream) error {
	for {
		info, err := st.Info(ctx)
		if err != nil {
			return fmt.Errorf("work queue state: %w", err)
		}
		if info.State.Msgs == 0 {
			return nil
		}
		t := time.NewTimer(time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("work queue still holds %d messages after every ack: %w", info.State.Msgs, ctx.Err())
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
