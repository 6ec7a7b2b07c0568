package dispatcher

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/client"
	"jetway/pkg/events"
)

// Tokens every fixture knows.
const (
	tokUser  = "tok-default"
	tokAdmin = "tok-admin"
	tokAcme  = "tok-acme" // tenant acme, may publish com.github.* and io.jetway.input only
	// tokAcmeAdmin is acme's tenant admin: it stops acme, never anyone else.
	tokAcmeAdmin = "tok-acme-admin"
	// tokOperator is the installation's operator, of no tenant.
	tokOperator = "tok-operator"
)

// waitFor bounds every wait in these tests.
const waitFor = 10 * time.Second

type fixture struct {
	t   testing.TB
	nc  *nats.Conn
	js  jetstream.JetStream
	d   *Dispatcher
	srv *httptest.Server
}

// newFixture starts a real JetStream server, provisions jetway's streams
// and buckets, and serves a real Dispatcher over a real HTTP server.
func newFixture(t testing.TB, tweak ...func(*Config)) *fixture {
	t.Helper()
	s := bustest.StartServerWith(t, 1)
	nc, js := bustest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: 1}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	store, err := auth.New(
		auth.Grant{Token: tokUser, Tenant: "default"},
		auth.Grant{Token: tokAdmin, Tenant: "default", Admin: true},
		auth.Grant{Token: tokAcme, Tenant: "acme", EventTypes: []string{"com.github.*", "io.jetway.input"}},
		auth.Grant{Token: tokAcmeAdmin, Tenant: "acme", Role: auth.RoleAdmin},
		auth.Grant{Token: tokOperator, Role: auth.RoleOperator},
	)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Conn: nc, Auth: store, RatePerSecond: -1, Heartbeat: 50 * time.Millisecond}
	for _, f := range tweak {
		f(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	return &fixture{t: t, nc: nc, js: js, d: d, srv: srv}
}

// do sends one request; body may be a string, []byte or a value to marshal.
func (f *fixture) do(method, path, token string, body any, header ...string) *http.Response {
	f.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			f.t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	f.t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, method, f.srv.URL+path, r)
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil && len(header) == 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	f.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// decode reads a JSON response with the wanted status.
func decode[T any](t testing.TB, resp *http.Response, status int) T {
	t.Helper()
	var v T
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, status, b)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, b, err)
	}
	return v
}

// problemOf reads a problem+json body and checks its status.
func problemOf(t testing.TB, resp *http.Response, status int) Problem {
	t.Helper()
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != ContentTypeProblem {
		t.Fatalf("Content-Type %q, want %s", resp.Header.Get("Content-Type"), ContentTypeProblem)
	}
	p := decode[Problem](t, resp, status)
	if p.Status != status || !strings.HasPrefix(p.Type, ProblemTypePrefix) || p.Title == "" {
		t.Fatalf("problem %+v: want status %d, a %s type and a title", p, status, ProblemTypePrefix)
	}
	return p
}

// lastSeq is JETWAY_EVENTS's last sequence number, once the log has
// copied what the shards stored.
func (f *fixture) lastSeq() uint64 {
	f.t.Helper()
	bustest.WaitLogged(f.t, f.js)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, err := f.js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	return info.State.LastSeq
}

// eventsOn returns every message stored on subject in the log of record,
// decoded through pkg/events the way a runner decodes them.
func (f *fixture) eventsOn(subject string) ([]events.HostEvent, []*jetstream.RawStreamMsg) {
	f.t.Helper()
	bustest.WaitLogged(f.t, f.js)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, err := f.js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		f.t.Fatal(err)
	}
	var hs []events.HostEvent
	var raws []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil || m.Subject != subject {
			continue
		}
		h, err := events.Decode(m.Subject, nats.Header(m.Header), m.Data)
		if err != nil {
			f.t.Fatalf("stored message %d on %s does not decode: %v", seq, subject, err)
		}
		hs = append(hs, h)
		raws = append(raws, m)
	}
	return hs, raws
}

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct {
	ID, Event, Data string
}

// sseReader parses an SSE body; comments (heartbeats) are counted.
type sseReader struct {
	r        *bufio.Reader
	comments int
}

// next returns the next event; the request's context bounds the wait.
func (s *sseReader) next(t *testing.T) sseEvent {
	t.Helper()
	var ev sseEvent
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatalf("read SSE: %v (so far %+v)", err, ev)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if ev.ID != "" || ev.Data != "" {
				return ev
			}
		case strings.HasPrefix(line, ":"):
			s.comments++
		case strings.HasPrefix(line, "id: "):
			ev.ID = line[len("id: "):]
		case strings.HasPrefix(line, "event: "):
			ev.Event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			ev.Data += line[len("data: "):]
		}
	}
}

// nextComment reads until a comment line and fails on any event before it.
func (s *sseReader) nextComment(t *testing.T) {
	t.Helper()
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatalf("read SSE: %v", err)
		}
		if strings.HasPrefix(line, ":") {
			return
		}
		if strings.HasPrefix(line, "id: ") || strings.HasPrefix(line, "data: ") {
			t.Fatalf("unexpected event line %q", line)
		}
	}
}

// client is the Go client (pkg/client) on the fixture's dispatcher.
func (f *fixture) client(t testing.TB, token string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{BaseURL: f.srv.URL, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serveNATS starts the dispatcher's NATS API until the test ends.
func (f *fixture) serveNATS(t testing.TB) {
	t.Helper()
	svc, err := f.d.StartNATS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
}
