package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// Reading a transcript back.
//
// A session's first event after an eviction or a takeover reads its whole
// transcript before the run starts, so the read is on the path a person
// waits on. It is two requests and no consumer:
//
//  1. the fence: the subject's last record, asked of the stream's leader
//     (STREAM.MSG.GET), which has every acknowledged append;
//  2. the records: one batched direct get (DIRECT.GET with next_by_subj
//     and a batch), which any replica may answer, repeated when the
//     transcript is larger than one batch.
//
// A replica may be behind the leader. That is harmless here because the
// read must reach the fence's record: replicas apply the stream in order,
// so a reply that holds the fence's record holds every record before it.
// A reply that ends short of the fence (a lagging replica, a stream
// provisioned before it allowed direct gets, a runner without the
// permission) is discarded and the transcript is read through an ordered
// consumer, served by the leader, as it was before. Records appended after
// the fence was read (another runner's) are left out, as the consumer read
// leaves them out: the next fenced append is refused either way.

// Batch limits of one direct get. The server also stops at its own
// pending limit; these keep one reply well inside a client's
// slow-consumer limits whatever the transcript holds.
const (
	directBatch    = 1000
	directMaxBytes = 4 << 20
)

// errShort means a direct read ended before the fence's record.
var errShort = errors.New("direct read ended before the fence")

// lastRecord is the fence: the sequence of the subject's last record,
// from the stream's leader. ok is false when the subject has none.
func (ts transcripts) lastRecord(ctx context.Context, subj string) (seq uint64, ok bool, err error) {
	m, err := bus.LeaderGet(ctx, ts.js, bus.StreamTranscripts, bus.MsgRequest{LastFor: subj})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return m.Sequence, true, nil
}

// readRecords reads a subject's records up to and including sequence
// last: batched direct gets where the stream allows them, else (or when
// they come back short) an ordered consumer.
func (ts transcripts) readRecords(ctx context.Context, subj string, last uint64) ([]Record, error) {
	if ts.direct {
		recs, err := ts.readDirect(ctx, subj, last)
		if err == nil {
			return recs, nil
		}
		// Not an error of the transcript's: the leader's reader has it.
	}
	return ts.readOrdered(ctx, subj, last)
}

// readDirect reads records by batched direct gets until the fence's
// record. errShort (or any other error) means: read it another way.
func (ts transcripts) readDirect(ctx context.Context, subj string, last uint64) ([]Record, error) {
	var recs []Record
	from := uint64(1)
	for {
		got, next, pending, err := ts.directBatch(ctx, subj, from, last, &recs)
		if err != nil {
			return nil, err
		}
		if got {
			return recs, nil
		}
		if pending == 0 || next <= from {
			return nil, errShort
		}
		from = next
	}
}

// directBatch sends one batched direct get from sequence from and appends
// the records up to last to recs. done says the fence's record (or a later
// one) arrived; otherwise next is where to go on and pending how many of
// the subject's records the replica still holds after this batch.
func (ts transcripts) directBatch(ctx context.Context, subj string, from, last uint64, recs *[]Record) (done bool, next, pending uint64, err error) {
	req, err := json.Marshal(directGetRequest{Seq: from, NextFor: subj, Batch: directBatch, MaxBytes: directMaxBytes})
	if err != nil {
		return false, 0, 0, err
	}
	replies, stop, err := ts.replies.send(ts.api+"DIRECT.GET."+bus.StreamTranscripts, req)
	if err != nil {
		return false, 0, 0, err
	}
	defer stop()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	next = from
	for {
		var m *nats.Msg
		select {
		case m = <-replies:
		case <-rctx.Done():
			return false, 0, 0, rctx.Err()
		}
		if status := m.Header.Get("Status"); status != "" {
			if status != "204" { // 404: nothing from there on this replica
				return false, next, 0, nil
			}
			pending, _ = strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
			return false, next, pending, nil
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return false, 0, 0, fmt.Errorf("direct get: sequence: %w", err)
		}
		if seq > last {
			return true, 0, 0, nil // appended after the fence was read
		}
		var r Record
		if err := json.Unmarshal(m.Data, &r); err != nil {
			return false, 0, 0, fmt.Errorf("transcript %s: record %d: %w", subj, seq, err)
		}
		*recs = append(*recs, r)
		if seq == last {
			return true, 0, 0, nil
		}
		next = seq + 1
	}
}

// replyMux takes the replies of every direct read on one subscription
// (<inbox>.*, one token per read) and hands each read its own. A
// subscription made and dropped per read cost more than the read: 0.7–1.4
// ms a load against 0.14 ms on one kept subscription, measured here.
type replyMux struct {
	nc      *nats.Conn
	prefix  string
	mu      sync.Mutex
	waiting map[string]chan *nats.Msg
	n       uint64
}

func newReplyMux(nc *nats.Conn) (*replyMux, error) {
	m := &replyMux{nc: nc, prefix: nc.NewInbox() + ".", waiting: map[string]chan *nats.Msg{}}
	if _, err := nc.Subscribe(m.prefix+"*", m.deliver); err != nil {
		return nil, err
	}
	return m, nil
}

// deliver hands a reply to its read. The read's channel holds a whole
// batch, so this never blocks; a reply for a read that gave up is dropped.
func (m *replyMux) deliver(msg *nats.Msg) {
	m.mu.Lock()
	ch := m.waiting[msg.Subject[len(m.prefix):]]
	m.mu.Unlock()
	select {
	case ch <- msg:
	default:
	}
}

// send publishes a request whose replies come on the returned channel
// until stop is called.
func (m *replyMux) send(subject string, data []byte) (<-chan *nats.Msg, func(), error) {
	ch := make(chan *nats.Msg, directBatch+1) // a batch and its end
	m.mu.Lock()
	m.n++
	token := strconv.FormatUint(m.n, 36)
	m.waiting[token] = ch
	m.mu.Unlock()
	stop := func() {
		m.mu.Lock()
		delete(m.waiting, token)
		m.mu.Unlock()
	}
	if err := m.nc.PublishRequest(subject, m.prefix+token, data); err != nil {
		stop()
		return nil, nil, err
	}
	return ch, stop, nil
}

// readOrdered reads the records through an ordered consumer, which the
// stream's leader serves: the read for streams without direct gets and
// for a replica that is behind.
func (ts transcripts) readOrdered(ctx context.Context, subj string, last uint64) ([]Record, error) {
	cons, err := ts.js.OrderedConsumer(ctx, bus.StreamTranscripts, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subj},
		// A reader lives for one load; left to the 5-minute default, a
		// busy runner kept thousands of them and the server refused more.
		InactiveThreshold: readerInactive,
	})
	if err != nil {
		return nil, fmt.Errorf("transcript %s: reader: %w", subj, err)
	}
	defer dropReader(ts.js, cons)
	var recs []Record
	for {
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("transcript %s: read: %w", subj, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var r Record
			if err := json.Unmarshal(m.Data(), &r); err != nil {
				return nil, fmt.Errorf("transcript %s: record: %w", subj, err)
			}
			recs = append(recs, r)
			md, err := m.Metadata()
			if err == nil && md.Sequence.Stream >= last {
				return recs, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("transcript %s: read: %w", subj, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("transcript %s: read stopped before sequence %d", subj, last)
		}
	}
}

// readerInactive is how long the server keeps a transcript reader that
// was not deleted (its runner died mid-load).
const readerInactive = 10 * time.Second

// dropReader deletes a transcript reader once the load is done. It does
// not hold the load up: the deletion is a round trip nobody waits for.
func dropReader(js jetstream.JetStream, cons jetstream.Consumer) {
	name := cons.CachedInfo().Name
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(ctx, bus.StreamTranscripts, name)
	}()
}

// directGetRequest is the JetStream API's direct get request (a subset
// of the server's JSApiMsgGetRequest).
type directGetRequest struct {
	Seq      uint64 `json:"seq,omitempty"`
	NextFor  string `json:"next_by_subj,omitempty"`
	Batch    int    `json:"batch,omitempty"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}
