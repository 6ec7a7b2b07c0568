package jobs

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Outbox timings: a failed publish or write is retried with backoff for up
// to giveUp; at shutdown what is queued gets drain to go out.
const (
	outboxAttempt = 5 * time.Second
	outboxGiveUp  = time.Minute
	outboxDrain   = 10 * time.Second
)

var errOutboxClosed = errors.New("jobs: outbox closed")

// outbox sends the worker's events and task records in the order they
// happened, off the tasks' goroutines (the manager's callbacks must not
// block). One queue for both keeps "publish the end, then record it" in
// that order: a crash between the two re-reports the end on restart, and
// the stable Nats-Msg-Id drops the repeat, whereas the other order could
// lose it.
type outbox struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	record func(task string) (key string, value []byte, ok bool)
	log    zerolog.Logger

	mu      sync.Mutex
	queue   []outItem
	closed  bool
	wake    chan struct{}
	stopped chan struct{}
}

type outItem struct {
	msg  *nats.Msg // an event to publish, or
	task string    // a task whose current record to write
	// of is the task the item is about: its items keep their order.
	of   string
	done chan error
	// sent, when set, is closed once the record's write is on the
	// connection (or the item is given up): see persistSent.
	sent     chan struct{}
	sentOnce *sync.Once
}

// markSent closes sent, once.
func (it outItem) markSent() {
	if it.sent != nil {
		it.sentOnce.Do(func() { close(it.sent) })
	}
}

func newOutbox(js jetstream.JetStream, kv jetstream.KeyValue, record func(string) (string, []byte, bool), log zerolog.Logger) *outbox {
	return &outbox{js: js, kv: kv, record: record, log: log, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
}

// publish queues an event about task.
func (o *outbox) publish(task string, msg *nats.Msg) { o.add(outItem{msg: msg, of: task}) }

// persist queues a write of the task's record as it is when the write
// happens (so writes of one task never go back in time) and returns a
// channel told when it is stored.
func (o *outbox) persist(task string) <-chan error {
	done := make(chan error, 1)
	o.add(outItem{task: task, of: task, done: done})
	return done
}

// persistSent queues a write of the task's record like persist, and returns
// a channel closed as soon as the write is on the worker's connection,
// before the server has acknowledged it. An answer the worker publishes
// after that on the same connection reaches the server after the write
// does, so a caller who got the answer knows the record is at the server:
// a worker that dies the moment after cannot take it back. The outbox
// still waits for the acknowledgement, and retries, as for any record.
func (o *outbox) persistSent(task string) <-chan struct{} {
	sent := make(chan struct{})
	o.add(outItem{task: task, of: task, sent: sent, sentOnce: new(sync.Once)})
	return sent
}

func (o *outbox) add(it outItem) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		if it.done != nil {
			it.done <- errOutboxClosed
		}
		it.markSent()
		o.log.Error().Str("task", it.task).Msg("jobs: outbox closed; dropped an event or record")
		return
	}
	if it.sent != nil {
		// An answer waits on this write: it goes ahead of other tasks'
		// items (each sent with a round trip: a Start waited behind the
		// previous job's end event and record), never ahead of its own
		// task's, whose order is what the outbox keeps.
		at := 0
		for j, q := range o.queue {
			if q.of == it.of {
				at = j + 1
			}
		}
		o.queue = slices.Insert(o.queue, at, it)
	} else {
		o.queue = append(o.queue, it)
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// close stops taking items; run sends what is queued (for up to
// outboxDrain) and returns.
func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	close(o.stopped)
}

func (o *outbox) run() {
	var drainBy time.Time
	for {
		o.mu.Lock()
		if len(o.queue) == 0 {
			closed := o.closed
			o.mu.Unlock()
			if closed {
				return
			}
			select {
			case <-o.wake:
			case <-o.stopped:
			}
			continue
		}
		it := o.queue[0]
		o.queue = o.queue[1:]
		closed := o.closed
		o.mu.Unlock()
		if closed && drainBy.IsZero() {
			drainBy = time.Now().Add(outboxDrain)
		}
		err := o.send(it, drainBy)
		if it.done != nil {
			it.done <- err
		}
		it.markSent()
	}
}

// send delivers one item, retrying with backoff until it succeeds, a minute
// passes, or (when draining) the drain deadline does.
func (o *outbox) send(it outItem, drainBy time.Time) error {
	giveUp := time.Now().Add(outboxGiveUp)
	if !drainBy.IsZero() && drainBy.Before(giveUp) {
		giveUp = drainBy
	}
	backoff := 50 * time.Millisecond
	for {
		err := o.try(it)
		if err == nil {
			return nil
		}
		if time.Now().Add(backoff).After(giveUp) {
			ev := o.log.Error().Err(err)
			if it.msg != nil {
				ev = ev.Str("subject", it.msg.Subject).Str("id", it.msg.Header.Get(nats.MsgIdHdr))
			} else {
				ev = ev.Str("task", it.task)
			}
			ev.Msg("jobs: gave up sending")
			return err
		}
		time.Sleep(backoff)
		backoff = min(backoff*2, 2*time.Second)
	}
}

func (o *outbox) try(it outItem) error {
	ctx, cancel := context.WithTimeout(context.Background(), outboxAttempt)
	defer cancel()
	if it.msg != nil {
		_, err := o.js.PublishMsg(ctx, it.msg)
		return err
	}
	key, value, ok := o.record(it.task)
	if !ok {
		return nil
	}
	if it.sent == nil {
		_, err := o.kv.Put(ctx, key, value)
		return err
	}
	// The KV put, published by hand so that the moment it is on the
	// connection can be told (kv.Put only returns once acknowledged).
	ack, err := o.js.PublishMsgAsync(&nats.Msg{Subject: "$KV." + o.kv.Bucket() + "." + key, Data: value})
	if err != nil {
		return err
	}
	it.markSent()
	select {
	case <-ack.Ok():
		return nil
	case err := <-ack.Err():
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
