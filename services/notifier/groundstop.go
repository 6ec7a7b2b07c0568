package notifier

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/events"
)

// watchGroundStop mirrors the Ground Stop switches until ctx is done and
// turns each change of a session's switch into a headline for that
// session. Only changes made while the notifier runs are announced: the
// switches already on at start are the mirror's initial copy, skipped, so
// a restart does not repeat old news; a change made while the watch was
// being restarted is still announced. A tenant's switch and the global one
// have no one session to tell and are logged. It returns once the mirror is
// ready, so a change after Run reports ready is never taken for old news.
func (n *Notifier) watchGroundStop(ctx context.Context) error {
	kv, err := bus.BindBucket(ctx, n.js, bus.BucketControl)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		n.log.Warn().Str("bucket", bus.BucketControl).Msg("no control bucket: Ground Stop headlines off")
		return nil
	}
	if err != nil {
		return fmt.Errorf("notifier: control bucket: %w", err)
	}
	m := groundstop.StartMirror(ctx, kv, n.log, func(c groundstop.Change) {
		if !c.Initial {
			n.announceStop(ctx, c)
		}
	})
	if err := m.WaitReady(ctx); err != nil {
		return fmt.Errorf("notifier: %w", err)
	}
	return nil
}

// announceStop tells a session its switch changed, and logs a wider one.
func (n *Notifier) announceStop(ctx context.Context, c groundstop.Change) {
	if c.Session == "" {
		n.log.Info().Str("switch", c.Key).Bool("on", c.On).Str("reason", c.Record.Reason).Str("by", c.Record.By).
			Msg("Ground Stop changed for more than one session: no headline")
		return
	}
	hl, ok := groundStopHeadline(c)
	if !ok {
		return
	}
	// A lost headline here cannot be redelivered: retry a few times, then
	// log it.
	var err error
	for range 3 {
		if err = n.Notify(ctx, hl); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil && ctx.Err() == nil {
		n.log.Error().Err(err).Str("key", c.Key).Msg("Ground Stop headline not stored")
	}
}

// groundStopHeadline reads one change of a session's switch. Its event id
// names the key, revision and direction, so several notifiers watching the
// same change store one headline (and a lift found after a restart, which
// may carry the revision of the put it undid, is not taken for that put).
func groundStopHeadline(c groundstop.Change) (Headline, bool) {
	if events.ValidateToken("tenant", c.Tenant) != nil || events.ValidateToken("session", c.Session) != nil {
		return Headline{}, false
	}
	id := c.Key + "@" + strconv.FormatUint(c.Revision, 10)
	if !c.On {
		id += ".off"
	}
	return Headline{Tenant: c.Tenant, Session: c.Session, Note: events.HeadlineNote{
		Text:  events.GroundStopHeadline(c.On, c.Record.Reason, c.Record.By),
		About: events.TypeGroundStop,
		Event: id,
	}}, true
}
