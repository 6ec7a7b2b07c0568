package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Upgrading the log's sources to their unfiltered form.
//
// A log provisioned before LogTransform read each shard through a source
// with the partition transform, so through a filtered consumer. Changing
// a source's transform makes it a new source to the server, which knows
// nothing of what the old one copied: what the old one had copied but its
// consumer had not yet confirmed (up to LogSourceMaxAckPending a shard)
// would be copied twice. So refilterLog moves one shard at a time, with
// events flowing:
//
//  1. The log takes LogTransform, its old sources unchanged (their copies
//     already have four tokens, which the transform leaves alone).
//  2. The shard's source consumer is paused, and refilterLog waits until
//     the log has copied everything it delivered: nothing is in flight.
//  3. The log stops sourcing the shard.
//  4. The consumer is reset to the event after the last the log copied,
//     which confirms every event up to it, loses its filter and resumes.
//  5. The log sources the shard again, unfiltered, through that consumer:
//     it goes on from the event after the last it holds.
//
// The log's leader is not moved in the provisioning that moved its
// sources (Provision skips spreading the busy streams then): on three
// nodes, a provisioning that moved the sources and then the log's leader
// copied up to LogSourceMaxAckPending events twice in about one run of
// three, while either alone (four runs each, events flowing) copied none
// twice.
//
// A failure between steps leaves the shard's source consumer paused, so
// its events wait in the shard (runners are not held up) until
// provisioning again finishes the move: from a log that no longer
// sources the shard, with the consumer still filtered or paused, it goes
// on at step 4 from what the consumer delivered, all of which the log
// held when step 3 began.

// refilterPause is how long a pause lasts should provisioning stop
// half-way (the next provisioning resumes it), and refilterWait how long
// refilterLog waits for the log to copy what a paused consumer delivered.
const (
	refilterPause = 24 * time.Hour
	refilterWait  = 30 * time.Second
)

// sourceRetryWait bounds waitSourcing, which says what it waits for every
// sourceNoteEvery (variables so a test can wait less).
var (
	sourceRetryWait = 90 * time.Second
	sourceNoteEvery = 10 * time.Second
)

func refilterLog(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig) (moved bool, err error) {
	st, err := js.Stream(ctx, StreamEvents)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", StreamEvents, err)
	}
	sc := st.CachedInfo().Config
	for _, shard := range (Layout{Partitions: cfg.Partitions, Shards: cfg.Shards}).Streams() {
		src := sourceNamed(sc.Sources, shard)
		switch {
		case src != nil && !filteredShardSource(src):
			continue // already moved, or never filtered
		case src == nil:
			// Stopped half-way after step 3, or a shard the log never
			// sourced (provisioning makes that one in the new form).
			cons, err := js.PushConsumer(ctx, shard, EventsSourceConsumer)
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
				continue // a shard or consumer provisioning makes below
			}
			if err != nil {
				return moved, fmt.Errorf("%s's source consumer on %s: %w", StreamEvents, shard, err)
			}
			ci := cons.CachedInfo()
			if ci.Config.FilterSubject == "" && len(ci.Config.FilterSubjects) == 0 && !ci.Paused {
				continue
			}
			if err := giveLogTransform(ctx, js, &sc); err != nil {
				return moved, err
			}
			fresh := &jetstream.StreamSource{Name: shard, Consumer: &jetstream.StreamConsumerSource{Name: EventsSourceConsumer, DeliverSubject: ci.Config.DeliverSubject}}
			if err := restartSource(ctx, js, cfg, &sc, fresh, ci.Config, max(ci.Delivered.Stream, ci.AckFloor.Stream)); err != nil {
				return moved, fmt.Errorf("%s's source %s: %w", StreamEvents, shard, err)
			}
		default:
			if err := giveLogTransform(ctx, js, &sc); err != nil {
				return moved, err
			}
			if err := refilterSource(ctx, js, cfg, &sc, src); err != nil {
				return moved, fmt.Errorf("%s's source %s: %w", StreamEvents, shard, err)
			}
		}
		moved = true
		cfg.progress("%s reads %s unfiltered now", StreamEvents, shard)
	}
	return moved, nil
}

// giveLogTransform is step 1: the log's own transform, sources unchanged.
func giveLogTransform(ctx context.Context, js jetstream.JetStream, sc *jetstream.StreamConfig) error {
	if sc.SubjectTransform != nil {
		return nil
	}
	sc.SubjectTransform = LogTransform()
	if _, err := js.UpdateStream(ctx, *sc); err != nil {
		return fmt.Errorf("give %s its transform: %w", StreamEvents, err)
	}
	return nil
}

// filteredShardSource says src is a shard read in the old form.
func filteredShardSource(src *jetstream.StreamSource) bool {
	return src != nil && src.Consumer != nil && len(src.SubjectTransforms) > 0 && strings.HasPrefix(src.Name, StreamWorkPrefix)
}

// refilterSource is steps 2 to 5 for the shard src reads.
func refilterSource(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig, sc *jetstream.StreamConfig, src *jetstream.StreamSource) error {
	name := src.Consumer.Name
	if _, err := js.PauseConsumer(ctx, src.Name, name, time.Now().Add(refilterPause)); err != nil {
		return fmt.Errorf("pause its consumer %s: %w", name, err)
	}
	cc, last, err := waitCopied(ctx, js, src.Name, name)
	if err != nil {
		return err
	}
	sc.Sources = slices.DeleteFunc(sc.Sources, func(s *jetstream.StreamSource) bool { return s.Name == src.Name })
	if _, err := js.UpdateStream(ctx, *sc); err != nil {
		return fmt.Errorf("stop sourcing: %w", err)
	}
	fresh := *src
	fresh.SubjectTransforms = nil
	return restartSource(ctx, js, cfg, sc, &fresh, cc, last)
}

// restartSource is steps 4 and 5: the consumer cc of src goes on after
// last, the log's last copy from it, unfiltered, and the log sources src.
func restartSource(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig, sc *jetstream.StreamConfig, src *jetstream.StreamSource, cc jetstream.ConsumerConfig, last uint64) error {
	if err := resetConsumer(ctx, js, src.Name, cc.Durable, last+1); err != nil {
		return err
	}
	cc.FilterSubject, cc.FilterSubjects, cc.PauseUntil = "", nil, nil
	if _, err := js.UpdatePushConsumer(ctx, src.Name, cc); err != nil {
		return fmt.Errorf("unfilter its consumer %s: %w", cc.Durable, err)
	}
	if _, err := js.ResumeConsumer(ctx, src.Name, cc.Durable); err != nil {
		return fmt.Errorf("resume its consumer %s: %w", cc.Durable, err)
	}
	sc.Sources = append(sc.Sources, src)
	if _, err := js.UpdateStream(ctx, *sc); err != nil {
		return fmt.Errorf("source again, from %d: %w", last+1, err)
	}
	return waitSourcing(ctx, js, cfg, src.Name, last)
}

// waitSourcing waits until the log has copied an event of origin past
// last through its new source, or origin has none past last: the move is
// seen to work before the next shard's begins. (It does not close the
// window above: with it, moving the log's leader right after still
// copied events twice in one run of five.) The server sets a source up
// in the background and, when its request fails or goes unanswered,
// retries after 2 s plus 10 s per failure so far: the wait is bounded by
// sourceRetryWait, which covers a few retries, and says every
// sourceNoteEvery what it waits for and what the server says of the
// source (sourcingState). A log that lags longer is told by an error;
// provisioning again goes on from there.
func waitSourcing(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig, origin string, last uint64) error {
	deadline := time.Now().Add(sourceRetryWait)
	nextNote := time.Now().Add(sourceNoteEvery)
	for {
		copied, state, err := sourcingState(ctx, js, origin)
		if err != nil {
			return err
		}
		sh, err := js.Stream(ctx, origin)
		if err != nil {
			return fmt.Errorf("read %s: %w", origin, err)
		}
		if copied > last || sh.CachedInfo().State.LastSeq <= last {
			return nil
		}
		now := time.Now()
		if now.After(deadline) {
			return fmt.Errorf("%s has not copied %s past %d again in %s (%s)", StreamEvents, origin, last, sourceRetryWait, state)
		}
		if now.After(nextNote) {
			cfg.progress("waiting for %s to copy %s past %d again (%s)", StreamEvents, origin, last, state)
			nextNote = now.Add(sourceNoteEvery)
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s has not copied %s past %d again: %w", StreamEvents, origin, last, ctx.Err())
		case <-t.C:
		}
	}
}

// sourcingState reads how far the log has copied origin and what the
// server says of that source: its last error setting it up, or that it
// has none and how long ago the source was last active (a setup request
// that goes unanswered leaves no error, only the silence).
func sourcingState(ctx context.Context, js jetstream.JetStream, origin string) (uint64, string, error) {
	log, err := js.Stream(ctx, StreamEvents)
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", StreamEvents, err)
	}
	info := log.CachedInfo()
	for _, si := range info.Sources {
		switch {
		case si == nil || si.Name != origin:
		case si.Error != nil:
			return si.Seq, "the server's last error setting it up: " + si.Error.Error(), nil
		case si.Active < 0:
			return si.Seq, "no error from the server, never active", nil
		default:
			return si.Seq, fmt.Sprintf("no error from the server, last active %s ago", si.Active.Round(time.Millisecond)), nil
		}
	}
	return 0, "the log does not list the source", nil
}

// waitCopied waits until the consumer name says it is paused and the log
// says it copied from origin the last event that consumer delivered, and
// returns the consumer's configuration and that event's sequence. It
// reads the consumer again after: on a cluster a pause takes effect on
// the consumer's leader a moment after its answer, and until then the
// consumer delivers.
func waitCopied(ctx context.Context, js jetstream.JetStream, origin, name string) (jetstream.ConsumerConfig, uint64, error) {
	wctx, cancel := context.WithTimeout(ctx, refilterWait)
	defer cancel()
	log, err := js.Stream(wctx, StreamEvents)
	if err != nil {
		return jetstream.ConsumerConfig{}, 0, fmt.Errorf("read %s: %w", StreamEvents, err)
	}
	var copied uint64
	for {
		cons, err := js.PushConsumer(wctx, origin, name)
		if err != nil {
			return jetstream.ConsumerConfig{}, 0, fmt.Errorf("its consumer %s: %w", name, err)
		}
		ci := cons.CachedInfo()
		if ci.Paused && copied >= ci.Delivered.Stream {
			return ci.Config, max(copied, ci.AckFloor.Stream), nil
		}
		info, err := log.Info(wctx)
		if err != nil {
			return jetstream.ConsumerConfig{}, 0, fmt.Errorf("read %s: %w", StreamEvents, err)
		}
		copied = sourcedUpTo(info, origin)
		if ci.Paused && copied >= ci.Delivered.Stream {
			continue // read the consumer again: did it deliver more?
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-wctx.Done():
			t.Stop()
			return jetstream.ConsumerConfig{}, 0, fmt.Errorf("%s copied %s up to %d, its consumer delivered up to %d: %w", StreamEvents, origin, copied, ci.Delivered.Stream, wctx.Err())
		case <-t.C:
		}
	}
}

// resetConsumer points durable consumer name on stream at seq: it
// delivers from there, and everything before counts as acknowledged
// (nats-server 2.14's consumer reset).
func resetConsumer(ctx context.Context, js jetstream.JetStream, stream, name string, seq uint64) error {
	req, err := json.Marshal(struct {
		Seq uint64 `json:"seq"`
	}{seq})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, refilterWait)
	defer cancel()
	msg, err := js.Conn().RequestWithContext(rctx, APIPrefix(js)+"CONSUMER.RESET."+stream+"."+name, req)
	if err != nil {
		return fmt.Errorf("reset consumer %s to %d: %w", name, seq, err)
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("reset consumer %s: %w", name, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("reset consumer %s to %d: %w", name, seq, resp.Error)
	}
	return nil
}
