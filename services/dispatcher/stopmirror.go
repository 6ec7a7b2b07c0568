package dispatcher

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"jetway/pkg/auth"
	"jetway/pkg/control/groundstop"
)

// The Ground Stop switches are mirrored in memory so that an input's answer
// can say which switches hold its session without three key reads per
// input: on the input path those reads tripled the time to accept an
// event. Reads that must see a switch set a moment ago (a session's detail,
// a status read) still read the bucket, and so does an answer given before
// the mirror has its first copy.

// heldFromMirror answers covering from the mirror; ok is false while the
// mirror is not ready. The first call starts the mirror, which lives as
// long as the dispatcher's connection.
func (d *stopCore) heldFromMirror(ctx context.Context, p auth.Principal, session string) (held []StopSwitch, ok bool) {
	d.stopsOnce.Do(d.startStopMirror)
	m := d.stops
	if m == nil || !m.IsReady() {
		return nil, false
	}
	var lineage []string
	if m.AnySessionOn(p.Tenant) {
		// Only then can an ancestor's switch hold a sub-agent: the record
		// is read for its lineage in that case alone.
		sr, err := d.readRecord(ctx, p.Tenant, session)
		if err != nil {
			return nil, false
		}
		lineage = sr.Rec.Lineage
	}
	for _, c := range m.Covering(p.Tenant, session, lineage) {
		held = append(held, switchOf(p, c))
	}
	return held, true
}

func (d *stopCore) startStopMirror() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	kv, err := d.controlBucket(ctx)
	cancel()
	if err != nil || kv == nil || d.nc.IsClosed() {
		return // answers read the bucket instead
	}
	life, stop := context.WithCancel(context.Background())
	closed := d.nc.StatusChanged(nats.CLOSED)
	go func() {
		<-closed
		stop()
	}()
	d.stops = groundstop.StartMirror(life, kv, d.log, nil)
}

// flipped tells the mirror about a switch this dispatcher just flipped.
func (d *stopCore) flipped(key string, rec groundstop.Record, on bool) {
	d.stopsOnce.Do(d.startStopMirror)
	if d.stops != nil {
		d.stops.Flipped(key, rec, on)
	}
}
