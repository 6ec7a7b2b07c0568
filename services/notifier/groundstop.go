package notifier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/events"
)

// watchGroundStop starts a watch on the per-session Ground Stop switches
// and returns a function that turns each change into a headline for that
// session until ctx is done. Only changes made while the notifier runs are
// announced (a restart does not repeat old ones). The global switch has no
// session to tell and is only logged.
func (n *Notifier) watchGroundStop(ctx context.Context) (func() error, error) {
	kv, err := n.js.KeyValue(ctx, bus.BucketControl)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		n.log.Warn().Str("bucket", bus.BucketControl).Msg("no control bucket: Ground Stop headlines off")
		return func() error { <-ctx.Done(); return nil }, nil
	}
	if err != nil {
		return nil, fmt.Errorf("notifier: control bucket: %w", err)
	}
	w, err := kv.Watch(ctx, groundstop.KeyGlobal+".*.*", jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("notifier: watch Ground Stop: %w", err)
	}
	return func() error {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case e, ok := <-w.Updates():
				if !ok {
					if ctx.Err() != nil {
						return nil
					}
					return errors.New("notifier: Ground Stop watch ended")
				}
				if e == nil {
					continue
				}
				hl, ok := groundStopHeadline(e)
				if !ok {
					continue
				}
				// A lost headline here cannot be redelivered: retry a few
				// times, then log it.
				var err error
				for range 3 {
					if err = n.Notify(ctx, hl); err == nil || ctx.Err() != nil {
						break
					}
				}
				if err != nil && ctx.Err() == nil {
					n.log.Error().Err(err).Str("key", e.Key()).Msg("Ground Stop headline not stored")
				}
			}
		}
	}, nil
}

// groundStopHeadline reads one change of a per-session switch. Its event
// id names the key and revision, so several notifiers watching the same
// change store one headline.
func groundStopHeadline(e jetstream.KeyValueEntry) (Headline, bool) {
	toks := strings.Split(e.Key(), ".")
	if len(toks) != 3 || toks[0] != groundstop.KeyGlobal {
		return Headline{}, false
	}
	tenant, session := toks[1], toks[2]
	if events.ValidateToken("tenant", tenant) != nil || events.ValidateToken("session", session) != nil {
		return Headline{}, false
	}
	on := e.Operation() == jetstream.KeyValuePut
	var rec groundstop.Record
	if on && json.Unmarshal(e.Value(), &rec) != nil {
		rec.Reason = string(e.Value()) // set by hand: still on, as groundstop reads it
	}
	return Headline{Tenant: tenant, Session: session, Note: events.HeadlineNote{
		Text:  events.GroundStopHeadline(on, rec.Reason, rec.By),
		About: events.TypeGroundStop,
		Event: e.Key() + "@" + strconv.FormatUint(e.Revision(), 10),
	}}, true
}
