package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/events"
)

// handleStream serves a session's output and headlines as Server-Sent
// Events from JETWAY_OUT (sessionsCore.follow). Each event's id is its
// stream sequence, so a client that reconnects with Last-Event-ID gets
// exactly what came after.
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
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.URL.Query().Get("last_event_id")
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	it, err := d.sessions.follow(ctx, p, session, last, r.URL.Query().Get("from"))
	if err != nil {
		d.fail(w, r, err)
		return
	}
	defer it.Stop()
	msgs := pump(ctx, it)

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
	d.relay(ctx, w, rc, msgs)
}

// pump hands the messages of it to a channel, so the relay can wait for
// a message, a heartbeat and the client's going at once. The channel
// closes when it stops or the connection is gone.
func pump(ctx context.Context, it jetstream.MessagesContext) <-chan jetstream.Msg {
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
	return msgs
}

// relay writes each message as an SSE event, and a comment line on every
// heartbeat so an idle stream is told from a dead one, until the client
// goes or the messages end.
func (d *httpAPI) relay(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, msgs <-chan jetstream.Msg) {
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
