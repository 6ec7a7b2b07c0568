package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// UpgradeCatchUp bounds each wait of an upgrade: for JETWAY_WORK to have
// sourced the old log's last event, and for the copy of the old log to be
// complete. A wait that runs out fails the upgrade with an error naming what
// did not catch up; provisioning again continues where it stopped.
var UpgradeCatchUp = 2 * time.Minute

// oldEventsShape reports why a JETWAY_EVENTS configuration is the shape from
// before the streams were split ("" if it is not): schedules or roll-ups
// allowed, or job events or schedule holders among its own subjects. That
// shape cannot be hardened in place (the server refuses to turn schedules
// off, and keeps roll-ups on while they are allowed), so the stream is
// replaced.
func oldEventsShape(c jetstream.StreamConfig) string {
	var why []string
	if c.AllowMsgSchedules {
		why = append(why, "allows message schedules")
	}
	if slices.Contains(c.Subjects, SubjectJobEvents) || slices.Contains(c.Subjects, SubjectSchedules) {
		why = append(why, "holds job events or schedules itself")
	}
	if c.AllowRollup {
		why = append(why, "allows roll-ups")
	}
	return strings.Join(why, ", ")
}

// The stream an upgrade keeps pending layovers in between reading them from
// the old JETWAY_EVENTS and publishing them in JETWAY_SCHEDULES, so that a
// failure in between loses none: provisioning again finishes the move. The
// schedule headers are stored renamed (stashPrefix + name), as plain data:
// a stream without schedules refuses them, and one with schedules would
// fire them.
const (
	streamUpgradeStash = "JETWAY_UPGRADE_LAYOVERS"
	stashSubjectPrefix = "jetway.upgrade.layovers."
	stashPrefix        = "Jetway-Carried-"
)

// frozenMsgSize is the MaxMsgSize that freezes the old stream during an
// upgrade: every message is larger, so every publish (and every schedule
// firing) is refused, while consumers and sources still read it. Sealing
// would say it better, but the server refuses to seal a stream with
// schedules on a cluster (sealing means discard new, which schedules
// forbid).
const frozenMsgSize = 1

// upgradeEvents replaces a JETWAY_EVENTS of the old shape without losing an
// event or a pending layover. In order, each step safe to run again if a
// later one fails:
//
//  1. The old stream is frozen (frozenMsgSize): from here on nothing more is
//     stored in it, so "everything copied" below has a fixed end. Publishes
//     are refused until the new streams exist (the jobs outbox retries).
//  2. Every pending schedule holder is stashed (streamUpgradeStash) with
//     its due time and its target moved from jetway.events.<t>.<s> to
//     jetway.fired.<t>.<s> (sourced back as the former).
//  3. JETWAY_WORK's source consumer must have handed over every event of
//     the old log (bounded wait), so no session misses one.
//  4. The old log's events and job events are copied into JETWAY_EVENTS_V1
//     (kept for audit; it ages out after EventsMaxAge), bounded wait.
//  5. The old stream is deleted (with its consumers).
//  6. JETWAY_JOBEVENTS and JETWAY_SCHEDULES are made, and the stashed
//     holders published there (a holder already due fires at once); the
//     stash is deleted. Provision then moves the old work queue into the
//     shards (upgradeshards.go) and makes the new JETWAY_EVENTS sourcing
//     them.
func upgradeEvents(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig) error {
	st, err := js.Stream(ctx, StreamEvents)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		// Gone (an upgrade deleted it and stopped before making the new
		// one), or never made: either way the new log starts empty.
	case err != nil:
		return fmt.Errorf("read stream: %w", err)
	default:
		if why := oldEventsShape(st.CachedInfo().Config); why != "" {
			cfg.progress("stream %s %s: replacing it (docs/OPERATIONS.md \"Upgrading\")", StreamEvents, why)
			if err := retireOldEvents(ctx, js, st, cfg); err != nil {
				return err
			}
		}
	}
	return unstashHolders(ctx, js, cfg)
}

// retireOldEvents runs steps 1 to 5 of upgradeEvents.
func retireOldEvents(ctx context.Context, js jetstream.JetStream, st jetstream.Stream, cfg ProvisionConfig) error {
	// 1. Freeze.
	info := st.CachedInfo()
	if info.Config.MaxMsgSize != frozenMsgSize {
		c := info.Config
		c.MaxMsgSize = frozenMsgSize
		if _, err := js.UpdateStream(ctx, c); err != nil {
			return fmt.Errorf("freeze the old stream: %w", err)
		}
		cfg.progress("old %s frozen: publishes are refused until the upgrade ends", StreamEvents)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("read the frozen stream: %w", err)
	}
	last := info.State.LastSeq

	// 2. Pending layovers, somewhere safe.
	n, err := stashHolders(ctx, js, st, cfg)
	if err != nil {
		return err
	}
	cfg.progress("%d pending schedule holders read from the old %s", n, StreamEvents)

	// 3. Everything handed to the runners.
	if err := waitSourced(ctx, js, last); err != nil {
		return err
	}
	cfg.progress("%s has sourced the old log to its end (sequence %d)", StreamWork, last)

	// 4. A copy of the old log.
	if err := keepOldLog(ctx, js, st, cfg); err != nil {
		return err
	}

	// 5. Out with the old. Its other consumers (the notifier's) go with
	// it; say what they had not yet taken, since they will not get it.
	reportLeftBehind(ctx, st, cfg)
	if err := js.DeleteStream(ctx, StreamEvents); err != nil {
		return fmt.Errorf("delete the old stream: %w", err)
	}
	cfg.progress("old %s deleted; its events are in %s", StreamEvents, StreamEventsV1)
	return nil
}

// stashHolders copies each pending schedule holder of the old stream into
// the stash, its target rewritten to the fired subject and its schedule
// headers renamed. It returns how many it stashed.
func stashHolders(ctx context.Context, js jetstream.JetStream, old jetstream.Stream, cfg ProvisionConfig) (int, error) {
	info, err := old.Info(ctx, jetstream.WithSubjectFilter(SubjectSchedules))
	if err != nil {
		return 0, fmt.Errorf("list schedule holders: %w", err)
	}
	want := len(info.State.Subjects)
	if want == 0 {
		return 0, nil
	}
	err = whilePlacing(ctx, func(ctx context.Context) error {
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:              streamUpgradeStash,
			Description:       "jetway layovers being moved to JETWAY_SCHEDULES by an upgrade",
			Subjects:          []string{stashSubjectPrefix + ">"},
			Storage:           jetstream.FileStorage,
			Replicas:          cfg.Replicas,
			MaxMsgsPerSubject: 1,
		})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("make %s: %w", streamUpgradeStash, err)
	}
	cons, err := old.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{SubjectSchedules},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return 0, fmt.Errorf("read schedule holders: %w", err)
	}
	n := 0
	for i := 0; i < want; i++ {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			return n, fmt.Errorf("read schedule holder %d of %d: %w", i+1, want, err)
		}
		if m.Headers().Get(jetstream.ScheduleHeader) == "" {
			continue // not a schedule
		}
		out := nats.NewMsg(stashSubjectPrefix + m.Subject())
		out.Data = m.Data()
		for k, vs := range m.Headers() {
			name := k
			if strings.HasPrefix(k, "Nats-") {
				if !keptHeaders[k] {
					continue // stream bookkeeping (sequence, time), not the schedule
				}
				name = stashPrefix + k
			}
			for _, v := range vs {
				out.Header.Add(name, v)
			}
		}
		target := out.Header.Get(stashPrefix + jetstream.ScheduleTargetHeader)
		if rest, ok := strings.CutPrefix(target, "jetway.events."); ok {
			out.Header.Set(stashPrefix+jetstream.ScheduleTargetHeader, "jetway.fired."+rest)
		}
		if _, err := js.PublishMsg(ctx, out); err != nil {
			return n, fmt.Errorf("stash schedule holder %s: %w", m.Subject(), err)
		}
		n++
	}
	return n, nil
}

// unstashHolders (step 6 of upgradeEvents) makes the new origin streams if
// a stash is waiting, publishes each stashed holder in JETWAY_SCHEDULES,
// and deletes the stash.
func unstashHolders(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig) error {
	stash, err := js.Stream(ctx, streamUpgradeStash)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", streamUpgradeStash, err)
	}
	for _, sc := range StreamConfigs(cfg) {
		if sc.Name != StreamJobEvents && sc.Name != StreamSchedules && sc.Name != StreamAgentEvents {
			continue
		}
		err := whilePlacing(ctx, func(ctx context.Context) error {
			_, err := js.CreateOrUpdateStream(ctx, sc)
			return err
		})
		if err != nil {
			return fmt.Errorf("make %s: %w", sc.Name, err)
		}
	}
	want := stash.CachedInfo().State.Msgs
	if want > 0 {
		cons, err := stash.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return fmt.Errorf("read %s: %w", streamUpgradeStash, err)
		}
		for i := uint64(0); i < want; i++ {
			m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
			if err != nil {
				return fmt.Errorf("read stashed holder %d of %d: %w", i+1, want, err)
			}
			out := nats.NewMsg(strings.TrimPrefix(m.Subject(), stashSubjectPrefix))
			out.Data = m.Data()
			for k, vs := range m.Headers() {
				if strings.HasPrefix(k, "Nats-") {
					continue // the stash's own bookkeeping
				}
				for _, v := range vs {
					out.Header.Add(strings.TrimPrefix(k, stashPrefix), v)
				}
			}
			if _, err := js.PublishMsg(ctx, out); err != nil {
				return fmt.Errorf("carry schedule holder %s: %w", out.Subject, err)
			}
		}
	}
	if err := js.DeleteStream(ctx, streamUpgradeStash); err != nil {
		return fmt.Errorf("delete %s: %w", streamUpgradeStash, err)
	}
	cfg.progress("%d pending schedule holders carried over to %s", want, StreamSchedules)
	return nil
}

// reportLeftBehind names each consumer of the old stream (other than
// JETWAY_WORK's source) with events it had not yet acknowledged.
func reportLeftBehind(ctx context.Context, old jetstream.Stream, cfg ProvisionConfig) {
	list := old.ListConsumers(ctx)
	for ci := range list.Info() {
		if ci.Name == workSourceConsumerV2 || ci.Name == workSourceConsumerV1 {
			continue
		}
		if n := ci.NumPending + uint64(ci.NumAckPending); n > 0 {
			cfg.progress("consumer %s of the old %s had %d events not yet acknowledged; they stay in %s but it will not get them (restart its service to make it again on the new stream)", ci.Name, StreamEvents, n, StreamEventsV1)
		} else {
			cfg.progress("consumer %s of the old %s goes with it (restart its service to make it again on the new stream)", ci.Name, StreamEvents)
		}
	}
	if err := list.Err(); err != nil {
		cfg.progress("could not list the old %s's consumers: %v", StreamEvents, err)
	}
}

// keptHeaders are the NATS headers a carried schedule holder keeps: the
// schedule itself and the id that dedupes a carry run twice.
var keptHeaders = map[string]bool{
	jetstream.ScheduleHeader:         true,
	jetstream.ScheduleTargetHeader:   true,
	jetstream.ScheduleTTLHeader:      true,
	jetstream.ScheduleTimeZoneHeader: true,
	nats.MsgIdHdr:                    true,
}

// waitSourced waits until JETWAY_WORK has taken the old log up to last:
// the durable consumer it sources through (named in its configuration; or,
// with no JETWAY_WORK, whichever source consumer is on the old log) has
// nothing left to deliver or confirm, or the server's own source has
// reached last.
func waitSourced(ctx context.Context, js jetstream.JetStream, last uint64) error {
	if last == 0 {
		return nil
	}
	names := []string{workSourceConsumerV1, workSourceConsumerV2}
	ephemeral := false
	w, err := js.Stream(ctx, StreamWork)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return fmt.Errorf("read %s: %w", StreamWork, err)
	default:
		src := sourceNamed(w.CachedInfo().Config.Sources, StreamEvents)
		switch {
		case src == nil:
			return nil // nothing sources the old log
		case src.Consumer == nil:
			ephemeral = true
		default:
			names = []string{src.Consumer.Name}
		}
	}
	return waitUntil(ctx, UpgradeCatchUp, func() (bool, string, error) {
		if ephemeral {
			info, err := w.Info(ctx)
			if err != nil {
				return false, "", fmt.Errorf("read %s: %w", StreamWork, err)
			}
			seq := sourcedUpTo(info, StreamEvents)
			return seq >= last, fmt.Sprintf("it has sourced up to sequence %d of %d", seq, last), nil
		}
		for _, name := range names {
			c, err := js.PushConsumer(ctx, StreamEvents, name)
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				continue
			}
			if err != nil {
				return false, "", fmt.Errorf("source consumer %s: %w", name, err)
			}
			ci, err := c.Info(ctx)
			if err != nil {
				return false, "", fmt.Errorf("source consumer %s: %w", name, err)
			}
			done := ci.NumPending == 0 && ci.NumAckPending == 0
			return done, fmt.Sprintf("its source consumer %s has %d events not yet delivered and %d not yet confirmed", name, ci.NumPending, ci.NumAckPending), nil
		}
		return true, "", nil // no source consumer: nothing to wait for
	}, StreamWork+" did not source the old log to its end")
}

// keepOldLog copies the old log's events and job events (not schedule
// holders: a stream without schedules would refuse them) into
// JETWAY_EVENTS_V1, then cuts the copy loose from the old stream.
func keepOldLog(ctx context.Context, js jetstream.JetStream, old jetstream.Stream, cfg ProvisionConfig) error {
	info, err := old.Info(ctx, jetstream.WithSubjectFilter(SubjectSchedules))
	if err != nil {
		return fmt.Errorf("count the old log: %w", err)
	}
	var holders uint64
	for _, n := range info.State.Subjects {
		holders += n
	}
	want := info.State.Msgs - holders
	copyOf := []*jetstream.StreamSource{{
		Name: StreamEvents,
		SubjectTransforms: []jetstream.SubjectTransformConfig{
			{Source: eventsFilter, Destination: "jetway.events.{{wildcard(1)}}.{{wildcard(2)}}"},
			{Source: jobEventsFilter, Destination: "jetway.jobevents.{{wildcard(1)}}.{{wildcard(2)}}"},
		},
	}}
	v1, err := js.Stream(ctx, StreamEventsV1)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		v1, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        StreamEventsV1,
			Description: "jetway events before the streams were split (kept by an upgrade; ages out)",
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			MaxAge:      cfg.EventsMaxAge,
			Sources:     copyOf,
		})
		if err != nil {
			return fmt.Errorf("make %s: %w", StreamEventsV1, err)
		}
	case err != nil:
		return fmt.Errorf("read %s: %w", StreamEventsV1, err)
	}
	err = waitUntil(ctx, UpgradeCatchUp, func() (bool, string, error) {
		vi, err := v1.Info(ctx)
		if err != nil {
			return false, "", fmt.Errorf("read %s: %w", StreamEventsV1, err)
		}
		return vi.State.Msgs >= want, fmt.Sprintf("it holds %d of %d", vi.State.Msgs, want), nil
	}, StreamEventsV1+" did not copy the old log")
	if err != nil {
		return err
	}
	// Cut loose: the origin is about to go. Without sources or subjects the
	// server gives a stream its own name as subject, which nobody may
	// publish.
	c := v1.CachedInfo().Config
	if len(c.Sources) > 0 {
		c.Sources = nil
		c.DenyDelete = true
		if _, err := js.UpdateStream(ctx, c); err != nil {
			return fmt.Errorf("detach %s: %w", StreamEventsV1, err)
		}
	}
	cfg.progress("stream %s holds the old log's %d events", StreamEventsV1, want)
	return nil
}

// waitUntil polls cond every 100 ms until it is true, it fails, ctx ends or
// patience passes; then the error says what and how far it got.
func waitUntil(ctx context.Context, patience time.Duration, cond func() (bool, string, error), what string) error {
	deadline := time.Now().Add(patience)
	for {
		ok, state, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s within %s: %s; run provisioning again to continue", what, patience, state)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %s: %w", what, state, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
