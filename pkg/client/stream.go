package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Event is one Server-Sent Event of a session's stream: ID is the
// JETWAY_OUT stream sequence, Type the CloudEvents type (io.jetway.headline,
// io.jetway.run.text, …) and Data its JSON.
type Event struct {
	ID   string
	Type string
	Data []byte
}

// StreamOptions say where a stream starts.
type StreamOptions struct {
	// LastEventID resumes after this event (sent as Last-Event-ID).
	LastEventID string
	// FromNew starts with the next message instead of what the stream still
	// holds for the session. Ignored when LastEventID is set.
	FromNew bool
}

// Stream is an open SSE connection. Next reads one event at a time; Close
// ends it.
type Stream struct {
	body   io.ReadCloser
	r      *bufio.Reader
	lastID string
}

// Stream opens GET /v1/sessions/{session}/stream.
func (c *Client) Stream(ctx context.Context, session string, o StreamOptions) (*Stream, error) {
	var q url.Values
	var hdr []string
	if o.LastEventID != "" {
		hdr = []string{"Last-Event-ID", o.LastEventID}
	} else if o.FromNew {
		q = url.Values{"from": {"new"}}
	}
	resp, err := c.send(ctx, http.MethodGet, sessionPath(session, "stream"), q, "", nil, "text/event-stream", hdr...)
	if err != nil {
		return nil, err
	}
	return &Stream{body: resp.Body, r: bufio.NewReaderSize(resp.Body, 64<<10), lastID: o.LastEventID}, nil
}

// LastEventID is the id of the last event read, to resume from.
func (s *Stream) LastEventID() string { return s.lastID }

// Close ends the stream.
func (s *Stream) Close() error { return s.body.Close() }

// Next reads the next event, skipping comments (heartbeats). It returns
// io.EOF when the server ends the stream.
func (s *Stream) Next() (Event, error) {
	var ev Event
	var data []string
	seen := false
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && line == "" {
				return Event{}, io.EOF
			}
			if !errors.Is(err, io.EOF) {
				return Event{}, fmt.Errorf("client: read stream: %w", err)
			}
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if err != nil {
				return Event{}, io.EOF
			}
			if !seen {
				continue
			}
			ev.Data = []byte(strings.Join(data, "\n"))
			if ev.ID != "" {
				s.lastID = ev.ID
			}
			return ev, nil
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			ev.ID, seen = value, true
		case "event":
			ev.Type, seen = value, true
		case "data":
			data, seen = append(data, value), true
		}
		if err != nil {
			return Event{}, io.EOF
		}
	}
}

// Follow streams a session's events into fn until ctx is done or fn
// returns an error. A dropped connection is reopened with Last-Event-ID, so
// nothing is missed or seen twice; a refused token or a bad session name
// ends it at once. onReconnect, if set, is told each time the connection is
// lost, with why.
func (c *Client) Follow(ctx context.Context, session string, o StreamOptions, fn func(Event) error, onReconnect func(error)) error {
	backoff := 100 * time.Millisecond
	last := o.LastEventID
	for {
		s, err := c.Stream(ctx, session, StreamOptions{LastEventID: last, FromNew: o.FromNew && last == ""})
		if err == nil {
			backoff = 100 * time.Millisecond
			for {
				ev, rerr := s.Next()
				if rerr != nil {
					err = rerr
					break
				}
				if ferr := fn(ev); ferr != nil {
					_ = s.Close() // fn's error is the one to report
					return ferr
				}
			}
			last = s.LastEventID()
			_ = s.Close() // it failed already; the next one resumes after last
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ae *APIError
		if errors.As(err, &ae) && ae.Status/100 == 4 && ae.Status != http.StatusTooManyRequests {
			return err
		}
		if onReconnect != nil {
			onReconnect(err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
