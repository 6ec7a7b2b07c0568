package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/control/transcriptrec"
	"jetway/pkg/events"
	"jetway/pkg/llm"
)

// The transcript's record and its kinds live in pkg/control/transcriptrec,
// which the dispatcher reads them by; the runner writes them.
const (
	RecordMessage    = transcriptrec.KindMessage
	RecordBoundary   = transcriptrec.KindBoundary
	RecordRunStarted = transcriptrec.KindRunStarted
	RecordRunEnded   = transcriptrec.KindRunEnded
	RecordRefused    = transcriptrec.KindRefused
	RecordAnswered   = transcriptrec.KindAnswered
)

// Record is one entry of a session's transcript (transcriptrec.Record).
type Record = transcriptrec.Record

// ErrFenced means another runner wrote to the session's transcript: this
// runner has lost the session and must stop working on it at once.
var ErrFenced = errors.New("runner: session fenced: another runner wrote its transcript")

// transcript appends to one session's transcript subject, fenced by the
// expected last sequence per subject: an append that races another
// runner's is refused by the server, never interleaved.
//
// Its own lock orders the appends of the live run's recorder and the
// actor (a refusal recorded mid-run). It is held across the round trip, so
// it is not the actor's lock: deliveries and heartbeats must not wait on
// the store.
type transcript struct {
	ts      *transcripts // the runner's, shared by every session it loads
	subject string
	mu      sync.Mutex
	last    uint64 // sequence of the last record on the subject; 0 = none
}

// transcripts is JETWAY_TRANSCRIPTS as a runner uses it. The stream is
// looked up once per runner, not at every session load: that lookup is a
// round trip and a stream info the server builds, and a runner loads a
// session's transcript at its first event after a takeover or an eviction
// (a thousand new sessions, a thousand lookups).
type transcripts struct {
	js jetstream.JetStream
	// direct says the stream answers direct gets, so a load reads the
	// records in batches instead of through a consumer (transcriptread.go);
	// replies takes those batches.
	direct  bool
	replies *replyMux
	api     string // the JetStream API prefix, for the requests made by hand
}

func openTranscripts(ctx context.Context, js jetstream.JetStream) (transcripts, error) {
	st, err := js.Stream(ctx, bus.StreamTranscripts)
	if err != nil {
		return transcripts{}, fmt.Errorf("stream %s: %w", bus.StreamTranscripts, err)
	}
	ts := transcripts{js: js, direct: st.CachedInfo().Config.AllowDirect, api: bus.APIPrefix(js)}
	if ts.direct {
		if ts.replies, err = newReplyMux(js.Conn()); err != nil {
			return transcripts{}, fmt.Errorf("stream %s: direct reads: %w", bus.StreamTranscripts, err)
		}
	}
	return ts, nil
}

// load reads a session's transcript from its start and returns it with the
// fence set to its last record. Records before the last boundary are kept:
// the request view, not the loader, decides what the model sees.
func (ts *transcripts) load(ctx context.Context, tenant, session string) (*transcript, []Record, error) {
	subj, err := events.TranscriptSubject(tenant, session)
	if err != nil {
		return nil, nil, err
	}
	t := &transcript{ts: ts, subject: subj}
	last, ok, err := ts.lastRecord(ctx, subj)
	if err != nil {
		return nil, nil, fmt.Errorf("transcript %s: last record: %w", subj, err)
	}
	if !ok {
		return t, nil, nil
	}
	t.last = last
	recs, err := ts.readRecords(ctx, subj, last)
	if err != nil {
		return nil, nil, err
	}
	return t, recs, nil
}

// append writes one record, fenced. ErrFenced means the session is lost.
func (t *transcript) append(ctx context.Context, r Record) error {
	if t == nil {
		return ErrFenced // forgotten after a lost fence
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.appendLocked(ctx, r)
}

func (t *transcript) appendLocked(ctx context.Context, r Record) error {
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("transcript %s: encode: %w", t.subject, err)
	}
	ack, err := t.ts.js.Publish(ctx, t.subject, data, jetstream.WithExpectLastSequencePerSubject(t.last))
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			return fmt.Errorf("%w (%s after sequence %d)", ErrFenced, t.subject, t.last)
		}
		return fmt.Errorf("transcript %s: append: %w", t.subject, err)
	}
	t.last = ack.Sequence
	return nil
}

// appendSure writes a record that must not be skipped (a run's end), trying
// again for up to patience when the store does not answer (a node restart,
// a leader election). A try that landed although its answer was lost makes
// the next one look fenced; the transcript's last record tells the two
// apart.
func (t *transcript) appendSure(ctx context.Context, r Record, patience time.Duration) error {
	if t == nil {
		return ErrFenced
	}
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	deadline := time.Now().Add(patience)
	unsure := false
	for {
		err := t.appendLocked(ctx, r)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrFenced) {
			if unsure && t.landed(ctx, r) {
				return nil
			}
			return err
		}
		unsure = true
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// landedAtFence reports whether r is the first record after the fence, as
// an append fenced at t.last that landed would be, even if others wrote
// after it. The fence does not move: the session is lost either way.
func (t *transcript) landedAtFence(ctx context.Context, r Record) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	m, err := bus.LeaderGet(ctx, t.ts.js, bus.StreamTranscripts, bus.MsgRequest{Seq: t.last + 1, NextFor: t.subject})
	if err != nil {
		return false
	}
	var got Record
	return json.Unmarshal(m.Data, &got) == nil && got.Kind == r.Kind && got.Run == r.Run && got.Runner == r.Runner && got.Time.Equal(r.Time)
}

// landed reports whether r is the subject's last record (an earlier try
// that landed), and if so moves the fence past it.
func (t *transcript) landed(ctx context.Context, r Record) bool {
	m, err := bus.LeaderGet(ctx, t.ts.js, bus.StreamTranscripts, bus.MsgRequest{LastFor: t.subject})
	if err != nil {
		return false
	}
	var got Record
	if json.Unmarshal(m.Data, &got) != nil || got.Kind != r.Kind || got.Run != r.Run || got.Runner != r.Runner || !got.Time.Equal(r.Time) {
		return false
	}
	t.last = m.Sequence
	return true
}

// history is the conversation a transcript holds: its message records and
// the first turns its run_started records carry, in order, boundaries
// included as their marker messages. (Transcripts written before a run's
// first turn rode in its run_started record hold it as a message record
// after it: both read the same.)
func history(recs []Record) []llm.Message {
	var out []llm.Message
	for _, r := range recs {
		if (r.Kind == RecordMessage || r.Kind == RecordRunStarted) && r.Message != nil {
			out = append(out, *r.Message)
		}
	}
	return out
}

// delivered returns the CE ids every message record says it delivered.
func delivered(recs []Record) map[string]struct{} {
	ids := make(map[string]struct{})
	for _, r := range recs {
		if r.Message != nil {
			for _, id := range r.Message.Delivers {
				ids[id] = struct{}{}
			}
		}
		if (r.Kind == RecordRefused || r.Kind == RecordAnswered) && r.Event != "" {
			ids[r.Event] = struct{}{}
		}
	}
	return ids
}
