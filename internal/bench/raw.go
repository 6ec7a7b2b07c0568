package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/events"
)

// Names of the raw baseline figures.
const (
	FigRawSyncP50    = "raw js sync publish p50"
	FigRawSyncP99    = "raw js sync publish p99"
	FigRawAsync      = "raw js async publish rate"
	FigRawConsume    = "raw js consume rate (durable pull)"
	FigRawRequestP50 = "raw nats request/reply p50"
	FigRawRequestP99 = "raw nats request/reply p99"
)

// sampleEvent is the message the raw figures publish: an encoded host event
// of the size jetway sends, so raw and jetway move the same bytes.
func sampleEvent() (*nats.Msg, error) {
	ev, err := events.New("bench", "raw", "jetway/bench", events.Input{Text: "please run the test suite and tell me what failed"})
	if err != nil {
		return nil, err
	}
	subj, err := events.EventsSubject("bench", "raw")
	if err != nil {
		return nil, err
	}
	return events.Encode(context.Background(), subj, ev)
}

// measureRaw measures the raw JetStream baselines on a stream of the bench's
// own, configured like JETWAY_EVENTS (file storage) but with no dedupe
// header: this is what the bus alone costs.
func (e *env) measureRaw(ctx context.Context) {
	goal := "baseline"
	msg, err := sampleEvent()
	if err != nil {
		e.skip(FigRawSyncP50, "ms", goal, err)
		return
	}
	name := "BENCH_RAW_" + uid()
	prefix := "bench.raw." + name
	st, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage, Replicas: 1,
	})
	if err != nil {
		for _, f := range []string{FigRawSyncP50, FigRawSyncP99} {
			e.skip(f, "ms", goal, fmt.Errorf("create stream: %w", err))
		}
		return
	}
	defer func() { _ = e.js.DeleteStream(context.WithoutCancel(ctx), name) }()

	hdr := withoutMsgID(msg.Header)
	out := func(subject string) *nats.Msg {
		return &nats.Msg{Subject: subject, Header: hdr, Data: msg.Data}
	}

	// Sync publish: one at a time, each waiting for the stream's ack.
	e.progress("raw: %d sync publishes", e.sizes.RawSamples)
	var sync samples
	for i := range e.sizes.RawSamples + e.sizes.RawSamples/10 {
		t0 := time.Now()
		if _, err := e.js.PublishMsg(ctx, out(prefix+".sync")); err != nil {
			e.skip(FigRawSyncP50, "ms", goal, fmt.Errorf("sync publish: %w", err))
			return
		}
		if i >= e.sizes.RawSamples/10 { // the first tenth warms up
			sync = append(sync, time.Since(t0))
		}
	}
	e.base.syncP50, e.base.syncP99 = sync.pct(50), sync.pct(99)
	e.add(figure(FigRawSyncP50, "ms", e.base.syncP50).info("baseline").note("%d publishes, each awaiting its ack", len(sync)))
	e.add(figure(FigRawSyncP99, "ms", e.base.syncP99).info("baseline"))

	// Async publish: as fast as the client's pending window allows.
	n := e.sizes.RawMessages
	e.progress("raw: %d async publishes", n)
	subj := prefix + ".async"
	t0 := time.Now()
	for range n {
		if _, err := e.js.PublishMsgAsync(out(subj)); err != nil {
			e.skip(FigRawAsync, "msgs/s", goal, fmt.Errorf("async publish: %w", err))
			return
		}
	}
	wctx, cancel := deadline(ctx, 2*time.Minute)
	select {
	case <-e.js.PublishAsyncComplete():
	case <-wctx.Done():
		cancel()
		e.skip(FigRawAsync, "msgs/s", goal, fmt.Errorf("async publishes not acked: %w", wctx.Err()))
		return
	}
	cancel()
	e.base.asyncRate = rate(n, time.Since(t0))
	e.add(figure(FigRawAsync, "msgs/s", e.base.asyncRate).info("baseline").note("%d messages of %d B", n, len(msg.Data)))

	// Consume: a durable pull consumer with explicit acks, like a work
	// consumer, reading back what was just published.
	e.progress("raw: consuming %d messages", n)
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "bench", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: subj, MaxAckPending: bus.DefaultWorkMaxAck,
	})
	if err != nil {
		e.skip(FigRawConsume, "msgs/s", goal, fmt.Errorf("create consumer: %w", err))
		return
	}
	var got atomic.Int64
	done := make(chan struct{})
	t0 = time.Now()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		if got.Add(1) == int64(n) {
			close(done)
		}
	})
	if err != nil {
		e.skip(FigRawConsume, "msgs/s", goal, fmt.Errorf("consume: %w", err))
		return
	}
	wctx, cancel = deadline(ctx, 2*time.Minute)
	select {
	case <-done:
		e.base.consumeRate = rate(n, time.Since(t0))
		e.add(figure(FigRawConsume, "msgs/s", e.base.consumeRate).info("baseline").note("%d messages, each acked", n))
	case <-wctx.Done():
		e.skip(FigRawConsume, "msgs/s", goal, fmt.Errorf("consumed %d of %d: %w", got.Load(), n, wctx.Err()))
	}
	cancel()
	cc.Stop()

	e.measureRequest(ctx)
	e.measureFloor(ctx)
	e.base.measured = true
}

// withoutMsgID is h without Nats-Msg-Id: identical ids would be
// deduplicated into one stored message, and raw means no dedupe.
func withoutMsgID(h nats.Header) nats.Header {
	out := nats.Header{}
	for k, v := range h {
		if k != jetstream.MsgIDHeader {
			out[k] = v
		}
	}
	return out
}

// measureRequest times core NATS request/reply to a responder on its own
// connection: the round trip every jobs service call adds.
func (e *env) measureRequest(ctx context.Context) {
	goal := "baseline"
	rc, err := nats.Connect(e.url, nats.Name("jetway-bench-echo"))
	if err != nil {
		e.skip(FigRawRequestP50, "ms", goal, fmt.Errorf("connect responder: %w", err))
		return
	}
	defer rc.Close()
	subj := "bench.echo." + uid()
	sub, err := rc.Subscribe(subj, func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		e.skip(FigRawRequestP50, "ms", goal, fmt.Errorf("subscribe responder: %w", err))
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := rc.Flush(); err != nil {
		e.skip(FigRawRequestP50, "ms", goal, fmt.Errorf("flush responder: %w", err))
		return
	}
	e.progress("raw: %d request/reply round trips", e.sizes.RawSamples)
	payload := make([]byte, 256)
	var s samples
	for i := range e.sizes.RawSamples + e.sizes.RawSamples/10 {
		rctx, cancel := deadline(ctx, 5*time.Second)
		t0 := time.Now()
		_, err := e.nc.RequestWithContext(rctx, subj, payload)
		d := time.Since(t0)
		cancel()
		if err != nil {
			e.skip(FigRawRequestP50, "ms", goal, fmt.Errorf("request: %w", err))
			return
		}
		if i >= e.sizes.RawSamples/10 {
			s = append(s, d)
		}
	}
	e.base.rttP50, e.base.rttP99 = s.pct(50), s.pct(99)
	e.add(figure(FigRawRequestP50, "ms", e.base.rttP50).info("baseline").note("%d requests of 256 B to a responder on its own connection", len(s)))
	e.add(figure(FigRawRequestP99, "ms", e.base.rttP99).info("baseline"))
}
