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
// before the streams were split ("" if it is not): schedules allowed, or job
// events or schedule holders among its own subjects. That shape cannot be
// hardened in place (the server refuses to turn schedules off, and keeps
// roll-ups on while they are allowed), so the stream is replaced.
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
	if !c.Sealed && len(why) == 0 {
		return ""
	}
	if c.Sealed {
		why = append(why, "is sealed by an upgrade that did not finish")
	}
	return strings.Join(why, ", ")
}

// upgradeEvents replaces a JETWAY_EVENTS of the old shape without losing an
// event or a pending layover. In order, each step safe to run again if the
// one after fails:
//
//  1. The old stream is sealed and gives up the jobevents and schedules
//     subjects: from here on nothing more is stored in it (a publish is
//     refused, and the jobs outbox retries until step 2 is done), so
//     "everything copied" below has a fixed end.
//  2. JETWAY_JOBEVENTS and JETWAY_SCHEDULES are made.
//  3. Every pending schedule holder is published again on the same subject
//     in JETWAY_SCHEDULES, with its due time and its target moved from
//     jetway.events.<t>.<s> to jetway.fired.<t>.<s> (sourced back as the
//     former). A holder already due fires at once.
//  4. JETWAY_WORK's source consumer must have handed over every event of
//     the old log (bounded wait), so no session misses one.
//  5. The old log's events and job events are copied into JETWAY_EVENTS_V1
//     (kept for audit; it ages out after EventsMaxAge), bounded wait.
//  6. The old stream is deleted (with its consumers); Provision then makes
//     the new JETWAY_EVENTS, its source consumers, and JETWAY_WORK's source
//     consumer from the new log's first event.
func upgradeEvents(ctx context.Context, js jetstream.JetStream, cfg ProvisionConfig) error {
	st, err := js.Stream(ctx, StreamEvents)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read stream: %w", err)
	}
	info := st.CachedInfo()
	why := oldEventsShape(info.Config)
	if why == "" {
		return nil
	}
	cfg.progress("stream %s %s: replacing it (docs/OPERATIONS.md \"Upgrading\")", StreamEvents, why)

	// 1. Seal, keeping only the tenants' subject.
	if !info.Config.Sealed {
		c := info.Config
		c.Subjects = []string{SubjectEvents}
		c.Sealed = true
		if _, err := js.UpdateStream(ctx, c); err != nil {
			return fmt.Errorf("seal the old stream: %w", err)
		}
		cfg.progress("old %s sealed: publishes are refused until the upgrade ends", StreamEvents)
	}
	if info, err = st.Info(ctx); err != nil {
		return fmt.Errorf("read sealed stream: %w", err)
	}
	last := info.State.LastSeq

	// 2. The new origin streams.
	for _, sc := range StreamConfigs(cfg) {
		if sc.Name != StreamJobEvents && sc.Name != StreamSchedules {
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

	// 3. Pending layovers.
	n, err := carryHolders(ctx, js, st)
	if err != nil {
		return err
	}
	cfg.progress("%d pending schedule holders carried over to %s", n, StreamSchedules)

	// 4. Everything handed to the runners.
	if err := waitSourced(ctx, js, last); err != nil {
		return err
	}
	cfg.progress("%s has sourced the old log to its end (sequence %d)", StreamWork, last)

	// 5. A copy of the old log.
	if err := keepOldLog(ctx, js, st, cfg); err != nil {
		return err
	}

	// 6. Out with the old. Its other consumers (the notifier's) go with
	// it; say what they had not yet taken, since they will not get it.
	reportLeftBehind(ctx, st, cfg)
	if err := js.DeleteStream(ctx, StreamEvents); err != nil {
		return fmt.Errorf("delete the old stream: %w", err)
	}
	cfg.progress("old %s deleted; its events are in %s", StreamEvents, StreamEventsV1)
	return nil
}

// carryHolders publishes each pending schedule holder of the old stream
// again in JETWAY_SCHEDULES, its target rewritten to the fired subject. It
// returns how many it carried.
func carryHolders(ctx context.Context, js jetstream.JetStream, old jetstream.Stream) (int, error) {
	info, err := old.Info(ctx, jetstream.WithSubjectFilter(SubjectSchedules))
	if err != nil {
		return 0, fmt.Errorf("list schedule holders: %w", err)
	}
	want := len(info.State.Subjects)
	if want == 0 {
		return 0, nil
	}
	cons, err := old.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{SubjectSchedules},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return 0, fmt.Errorf("read schedule holders: %w", err)
	}
	for n := 0; n < want; n++ {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			return n, fmt.Errorf("read schedule holder %d of %d: %w", n+1, want, err)
		}
		if m.Headers().Get(jetstream.ScheduleHeader) == "" {
			continue // not a schedule (or one that fired and left its last message)
		}
		out := nats.NewMsg(m.Subject())
		out.Data = m.Data()
		for k, vs := range m.Headers() {
			if strings.HasPrefix(k, "Nats-") && !keptHeaders[k] {
				continue // stream bookkeeping (sequence, time, source), not the schedule
			}
			for _, v := range vs {
				out.Header.Add(k, v)
			}
		}
		target := out.Header.Get(jetstream.ScheduleTargetHeader)
		if rest, ok := strings.CutPrefix(target, "jetway.events."); ok {
			out.Header.Set(jetstream.ScheduleTargetHeader, "jetway.fired."+rest)
		}
		if _, err := js.PublishMsg(ctx, out); err != nil {
			return n, fmt.Errorf("carry schedule holder %s: %w", m.Subject(), err)
		}
	}
	return want, nil
}

// reportLeftBehind names each consumer of the old stream (other than
// JETWAY_WORK's source) with events it had not yet acknowledged.
func reportLeftBehind(ctx context.Context, old jetstream.Stream, cfg ProvisionConfig) {
	list := old.ListConsumers(ctx)
	for ci := range list.Info() {
		if ci.Name == WorkSourceConsumer {
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

// waitSourced waits until JETWAY_WORK has taken the old log up to last.
func waitSourced(ctx context.Context, js jetstream.JetStream, last uint64) error {
	if last == 0 {
		return nil
	}
	return waitUntil(ctx, UpgradeCatchUp, func() (bool, string, error) {
		c, err := js.PushConsumer(ctx, StreamEvents, WorkSourceConsumer)
		if err == nil {
			ci, err := c.Info(ctx)
			if err != nil {
				return false, "", fmt.Errorf("source consumer %s: %w", WorkSourceConsumer, err)
			}
			done := ci.NumPending == 0 && ci.NumAckPending == 0
			return done, fmt.Sprintf("its source consumer %s has %d events not yet delivered and %d not yet confirmed", WorkSourceConsumer, ci.NumPending, ci.NumAckPending), nil
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return false, "", fmt.Errorf("source consumer %s: %w", WorkSourceConsumer, err)
		}
		// An older deployment sources through the server's own consumer.
		w, err := js.Stream(ctx, StreamWork)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return true, "", nil
		}
		if err != nil {
			return false, "", fmt.Errorf("read %s: %w", StreamWork, err)
		}
		seq := sourcedUpTo(w.CachedInfo(), StreamEvents)
		return seq >= last, fmt.Sprintf("it has sourced up to sequence %d of %d", seq, last), nil
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
