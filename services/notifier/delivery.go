package notifier

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus/kvmirror"
	"jetway/pkg/events"
)

// Delivery states. Only pending records are worked on; the others stay
// until DeliveryRetention so a redelivered source event is not posted again.
const (
	statePending   = "pending"
	stateDelivered = "delivered"
	stateDead      = "dead"
)

// delivery is one webhook POST of one headline, as stored in
// BucketDeliveries under <tenant>.<session>.<id>. It holds the exact body to
// send (so a retry signs the same bytes) but not the secret, which is read
// from the configuration at each try.
type delivery struct {
	ID       string          `json:"id"`
	Tenant   string          `json:"tenant"`
	Session  string          `json:"session"`
	URL      string          `json:"url"`
	Event    string          `json:"event"` // the headline's CE id
	About    string          `json:"about"`
	Headline string          `json:"headline"`
	Body     json.RawMessage `json:"body"`

	State      string    `json:"state"`
	Attempts   int       `json:"attempts"`
	NextAt     time.Time `json:"next_at"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	LeaseBy    string    `json:"lease_by,omitempty"`
	LastError  string    `json:"last_error,omitempty"`
	Created    time.Time `json:"created"`
}

func (d delivery) key() string { return d.Tenant + "." + d.Session + "." + d.ID }

// due is when the delivery may next be tried: its retry time, or the end
// of another notifier's claim on it.
func (d delivery) due() time.Time {
	if d.LeaseUntil.After(d.NextAt) {
		return d.LeaseUntil
	}
	return d.NextAt
}

// enqueue stores a pending delivery of headline e to hook, unless one for
// the same headline and URL exists already (a redelivered source event).
func (n *Notifier) enqueue(ctx context.Context, hl Headline, e event.Event, hook Webhook) error {
	body, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("notifier: encode webhook body: %w", err)
	}
	now := time.Now().UTC()
	d := delivery{
		ID:       derivedID("delivery", e.ID(), hook.URL),
		Tenant:   hl.Tenant,
		Session:  hl.Session,
		URL:      hook.URL,
		Event:    e.ID(),
		About:    hl.Note.About,
		Headline: hl.Note.Text,
		Body:     body,
		State:    statePending,
		NextAt:   now,
		Created:  now,
	}
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("notifier: encode delivery: %w", err)
	}
	_, err = n.deliveries.Create(ctx, d.key(), b)
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		return nil
	case err != nil:
		return fmt.Errorf("notifier: queue webhook delivery to %s: %w", hook.URL, err)
	}
	n.poke()
	return nil
}

// poke wakes the delivery loop without waiting for its watcher.
func (n *Notifier) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

type indexed struct {
	rev uint64
	d   delivery
}

// pending is the index of pending deliveries, kept by the bucket's mirror
// and read by the delivery loop.
type pending struct {
	mu sync.Mutex
	m  map[string]indexed
}

func (p *pending) snapshot() map[string]indexed {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]indexed, len(p.m))
	for k, it := range p.m {
		out[k] = it
	}
	return out
}

// runDeliveries keeps an index of pending deliveries from a mirror of the
// bucket and works on each when it is due, at most Concurrency at a time.
// The bucket is the only state: a notifier that restarts finds every
// pending delivery in the mirror's initial copy, and a watch that ends is
// restarted by the mirror without losing a change.
func (n *Notifier) runDeliveries(ctx context.Context) error {
	idx := &pending{m: map[string]indexed{}}
	kvmirror.Start(ctx, kvmirror.Config{
		Name: "webhook deliveries",
		KV:   n.deliveries,
		// Delivered and dead records stay in the bucket for a while; only
		// pending ones are worked on, so only they are held.
		Keep: func(e jetstream.KeyValueEntry) bool {
			var d delivery
			return json.Unmarshal(e.Value(), &d) == nil && d.State == statePending
		},
		Log:      n.log,
		OnChange: func(c kvmirror.Change) { n.apply(idx, c); n.poke() },
	})

	inflight := map[string]bool{}
	done := make(chan string, n.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()

	for {
		// Start what is due, and find when the next one is.
		now := time.Now()
		var next time.Time
		for key, it := range idx.snapshot() {
			if inflight[key] {
				continue
			}
			if len(inflight) >= n.cfg.Concurrency {
				break // a finishing delivery wakes the loop
			}
			if due := it.d.due(); due.After(now) {
				if next.IsZero() || due.Before(next) {
					next = due
				}
				continue
			}
			rev, d, ok := n.claim(ctx, it)
			if !ok {
				continue // someone else has it; the watch will tell
			}
			inflight[key] = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				n.attempt(ctx, rev, d)
				select {
				case done <- key:
				case <-ctx.Done():
				}
			}()
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), time.Millisecond))
		}

		select {
		case <-ctx.Done():
			return nil
		case key := <-done:
			delete(inflight, key)
		case <-n.wake:
		case <-timer.C:
		}
	}
}

// apply folds one mirrored change into the index of pending deliveries.
func (n *Notifier) apply(idx *pending, c kvmirror.Change) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	if c.Deleted {
		delete(idx.m, c.Key)
		return
	}
	var d delivery
	if err := json.Unmarshal(c.Entry.Value(), &d); err != nil {
		n.log.Warn().Err(err).Str("key", c.Key).Msg("unreadable delivery record, skipped")
		delete(idx.m, c.Key)
		return
	}
	if d.State != statePending {
		delete(idx.m, c.Key)
		return
	}
	idx.m[c.Key] = indexed{rev: c.Entry.Revision(), d: d}
}

// leaseFor is how long a claim lasts: well past one POST's timeout.
func (n *Notifier) leaseFor() time.Duration { return 2*n.cfg.HTTPTimeout + time.Second }

// claim takes a delivery for this notifier with a compare-and-set on its
// record, so two notifiers never post the same delivery at once.
func (n *Notifier) claim(ctx context.Context, it indexed) (uint64, delivery, bool) {
	d := it.d
	d.LeaseUntil = time.Now().Add(n.leaseFor()).UTC()
	d.LeaseBy = n.id
	b, err := json.Marshal(d)
	if err != nil {
		return 0, d, false
	}
	rev, err := n.deliveries.Update(ctx, d.key(), b, it.rev)
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
			n.log.Debug().Err(err).Str("key", d.key()).Msg("claim delivery")
		}
		return 0, d, false
	}
	return rev, d, true
}

// attempt posts one delivery and records the outcome: delivered, pending
// with the next retry time, or dead after the last attempt. A notifier
// shutting down mid-POST gives the delivery back untouched.
func (n *Notifier) attempt(ctx context.Context, rev uint64, d delivery) {
	hook, configured := n.cfg.Webhooks.find(d.Tenant, d.URL)
	var err error
	if configured {
		err = n.post(ctx, hook, d)
	} else {
		err = fmt.Errorf("webhook %s is no longer configured for tenant %s", d.URL, d.Tenant)
	}
	// Record the outcome even while shutting down.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	d.LeaseUntil, d.LeaseBy = time.Time{}, ""
	switch {
	case err != nil && ctx.Err() != nil:
		// Interrupted, not failed: release the claim, keep the count.
	case err == nil:
		d.Attempts++
		d.State, d.LastError = stateDelivered, ""
		n.metrics.attempts.WithLabelValues("ok").Inc()
		n.log.Info().Str("url", d.URL).Str("event", d.Event).Int("attempt", d.Attempts).Msg("webhook delivered")
	default:
		d.Attempts++
		d.LastError = err.Error()
		n.metrics.attempts.WithLabelValues("failed").Inc()
		if !configured || d.Attempts >= n.cfg.Retry.Attempts {
			if derr := n.bury(rctx, d); derr != nil {
				n.log.Error().Err(derr).Str("key", d.key()).Msg("dead letter not stored; will try again")
				d.NextAt = time.Now().Add(n.cfg.Retry.Delay(d.Attempts)).UTC()
				break
			}
			d.State = stateDead
			n.log.Warn().Str("url", d.URL).Str("event", d.Event).Int("attempts", d.Attempts).Str("error", d.LastError).Msg("webhook dead letter")
			break
		}
		d.NextAt = time.Now().Add(n.cfg.Retry.Delay(d.Attempts)).UTC()
		n.log.Info().Str("url", d.URL).Int("attempt", d.Attempts).Time("next", d.NextAt).Str("error", d.LastError).Msg("webhook failed, will retry")
	}
	b, merr := json.Marshal(d)
	if merr != nil {
		return
	}
	if _, uerr := n.deliveries.Update(rctx, d.key(), b, rev); uerr != nil {
		// Our claim was taken over (we ran past the lease) or the bus is
		// away: the record stays as it is and is tried again.
		n.log.Warn().Err(uerr).Str("key", d.key()).Msg("delivery outcome not recorded")
	}
}

// post sends the headline CloudEvent in structured mode with its signature.
func (n *Notifier) post(ctx context.Context, hook Webhook, d delivery) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.HTTPTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.URL, bytes.NewReader(d.Body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", events.ContentTypeStructured+"; charset=utf-8")
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set(TimestampHeader, ts)
	req.Header.Set(SignatureV1Header, SignV1(hook.Secret, ts, d.Body))
	if n.cfg.LegacySignature {
		req.Header.Set(SignatureHeader, Sign(hook.Secret, d.Body))
	}
	req.Header.Set("X-Jetway-Delivery", d.ID)
	req.Header.Set("X-Jetway-Attempt", strconv.Itoa(d.Attempts+1))
	req.Header.Set("User-Agent", "jetway-notifier/"+n.cfg.Version)
	resp, err := n.http.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", hook.URL, err)
	}
	defer func() { _ = resp.Body.Close() }() // read: a failed close loses nothing
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 3 {
		return fmt.Errorf("POST %s: %s to %q: %w; configure the final URL", hook.URL, resp.Status,
			resp.Header.Get("Location"), errRedirect)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s", hook.URL, resp.Status)
	}
	return nil
}
