package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/events"
)

// handleStream serves a session's output and headlines as Server-Sent
// Events from JETWAY_OUT. Each event's id is its stream sequence, so a
// client that reconnects with Last-Event-ID gets exactly what came after;
// an ordered consumer gives gap-free, in-order delivery and needs no cleanup.
//
// Without Last-Event-ID the stream starts with what JETWAY_OUT still holds
// for the session (?from=new starts with the next message instead).
func (d *httpAPI) handleStream(w http.ResponseWriter, r *http.Request) {
	p, err := d.principal(r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	session := r.PathValue("session")
	out, err := events.OutSubject(p.Tenant, session)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	notify, err := events.NotifySubject(p.Tenant, session)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	cc := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{out, notify},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.URL.Query().Get("last_event_id")
	}
	switch {
	case last != "":
		seq, err := strconv.ParseUint(last, 10, 64)
		// The stream is read from seq+1: the largest uint64 would wrap to 0,
		// which JetStream refuses; it is no sequence a stream ever had.
		if err == nil && seq == math.MaxUint64 {
			err = strconv.ErrRange
		}
		if err != nil {
			d.fail(w, r, problemf(http.StatusBadRequest, "bad-request", "Invalid Last-Event-ID",
				"Last-Event-ID %q is not a stream sequence number", shortenQ(last)))
			return
		}
		cc.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cc.OptStartSeq = seq + 1
	case r.URL.Query().Get("from") == "new":
		cc.DeliverPolicy = jetstream.DeliverNewPolicy
	}

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	cons, err := d.store.js.OrderedConsumer(ctx, bus.StreamOut, cc)
	if err != nil {
		d.fail(w, r, unavailable("follow "+bus.StreamOut, err))
		return
	}
	it, err := cons.Messages()
	if err != nil {
		d.fail(w, r, unavailable("follow "+bus.StreamOut, err))
		return
	}
	defer it.Stop()

	msgs := make(chan jetstream.Msg)
	go func() {
		defer close(msgs)
		for {
			m, err := it.Next()
			if err != nil {
				return // stopped, or the connection is gone
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if _, err := fmt.Fprint(w, ": jetway stream for ", p.Tenant, "/", session, "\n\n"); err != nil {
		return
	}
	if rc.Flush() != nil {
		return
	}
	d.metrics.streams.Inc()
	defer d.metrics.streams.Dec()

	beat := time.NewTicker(d.cfg.Heartbeat)
	defer beat.Stop()
	var buf bytes.Buffer
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return
			}
		case m, ok := <-msgs:
			if !ok {
				return
			}
			buf.Reset()
			if err := writeSSE(&buf, m); err != nil {
				d.log.Warn().Err(err).Str("subject", m.Subject()).Msg("skipping unreadable output message")
				continue
			}
			if _, err := w.Write(buf.Bytes()); err != nil {
				return
			}
		}
		if rc.Flush() != nil {
			return
		}
	}
}

// writeSSE renders one JETWAY_OUT message as an SSE event: id = stream
// sequence, event = the message's type, data = its JSON on one line.
func writeSSE(buf *bytes.Buffer, m jetstream.Msg) error {
	md, err := m.Metadata()
	if err != nil {
		return fmt.Errorf("message metadata: %w", err)
	}
	typ, data := sseBody(m)
	fmt.Fprintf(buf, "id: %d\nevent: %s\ndata: %s\n\n", md.Sequence.Stream, typ, data)
	return nil
}

// sseBody finds a message's type — the CloudEvents type in binary or
// structured mode, else the subject's kind (out, notify) — and its data as
// one line of JSON. Data that is not JSON travels as a JSON string.
func sseBody(m jetstream.Msg) (typ string, data []byte) {
	body := m.Data()
	if t := m.Headers().Get("ce-type"); t != "" {
		typ = t
	} else if json.Valid(body) {
		var probe struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(body, &probe) == nil {
			typ = probe.Type
		}
	}
	if typ == "" {
		if sub, err := events.ParseSubject(m.Subject()); err == nil {
			typ = string(sub.Kind)
		} else {
			typ = "message"
		}
	}
	typ = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, typ)
	var c bytes.Buffer
	if err := json.Compact(&c, body); err == nil && c.Len() > 0 {
		return typ, c.Bytes()
	}
	q, err := json.Marshal(string(body))
	if err != nil {
		return typ, []byte(`""`)
	}
	return typ, q
}
