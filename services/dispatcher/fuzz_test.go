package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/events"
)

// FuzzIngest throws random routes, session names, headers and bodies at the
// HTTP ingest of a real dispatcher on a real JetStream server. Whatever
// comes in, the handler must not panic, must answer a refusal as a problem
// with nothing published, and every event it does publish must be one the
// runner's decoder accepts, in the caller's tenant and never a job event.
func FuzzIngest(f *testing.F) {
	seeds := []struct {
		route   uint8
		session string
		headers string
		body    string
	}{
		{0, "", "Content-Type: application/cloudevents+json",
			`{"specversion":"1.0","id":"f1","source":"s","type":"com.example.x","subject":"default/s1","data":{"a":1}}`},
		{0, "", "ce-specversion: 1.0\nce-id: f2\nce-source: s\nce-type: io.jetway.input\nce-subject: default/s1\nContent-Type: application/json",
			`{"text":"hi"}`},
		{0, "", "ce-specversion: 1.0\nce-id: f3\nce-source: s\nce-type: io.jetway.job.exited\nce-subject: default/s1\nContent-Type: application/json",
			`{"id":3,"program":"gh","exit_status":0}`},
		{0, "", "Content-Type: application/cloudevents-batch+json",
			`[{"specversion":"1.0","id":"f4","source":"s","type":"com.example.x","subject":"default/s2"}]`},
		{0, "", "Content-Type: application/cloudevents+json",
			`{"specversion":"0.3","id":"f5","source":"s","type":"x","subject":"default/s1"}`},
		{0, "", "Content-Type: application/cloudevents+json",
			`{"specversion":"1.0","id":"f6","source":"s","type":"x","subject":"acme/s1"}`},
		{0, "", "Content-Type: application/cloudevents+json",
			`{"specversion":"1.0","id":"f7","source":"s","type":"io.jetway.resume","subject":"default/s1","data":{"booked_by":"r","booked_at":"2026-01-01T00:00:00Z"}}`},
		{0, "", "ce-specversion: 1.0\nce-id: %ZZ\nce-source: %00\nce-type: x\nce-subject: default/s1", "\x00\xff"},
		{0, "", "Content-Type: application/cloudevents+json", `{"specversion":"1.0","id":"f8","source":"s","type":"x","subject":"default/s1","data_base64":"!!"}`},
		{0, "", "Content-Type: text/plain", "hello"},
		{0, "", "", ""},
		{1, "s1", "Content-Type: application/json", `{"text":"hello"}`},
		{1, "a.b", "Content-Type: application/json", `{"text":"hello"}`},
		{1, strings.Repeat("x", 65), "", `{"text":"x"}`},
		{1, "s1", "", `{"text":""}`},
		{1, "s1", "", `{"text":"x","id":"has space"}`},
		{2, "s1", "", `{"note":"left"}`},
		{2, "*", "", `{"note":"left"}`},
		{3, "s1", "", `{"text":"acme input"}`},
	}
	for _, s := range seeds {
		f.Add(s.route, s.session, s.headers, []byte(s.body))
	}
	fx := newFixture(f)
	h := fx.d.Handler()
	f.Fuzz(func(t *testing.T, route uint8, session, headers string, body []byte) {
		token := tokUser
		var path string
		switch route % 4 {
		case 0:
			path = "/v1/events"
		case 1:
			path = "/v1/sessions/" + url.PathEscape(session) + "/input"
		case 2:
			path = "/v1/sessions/" + url.PathEscape(session) + "/steer"
		case 3:
			path, token = "/v1/sessions/"+url.PathEscape(session)+"/input", tokAcme
		}
		req := httptest.NewRequest(http.MethodPost, "http://dispatcher"+path, bytes.NewReader(body))
		for _, line := range strings.Split(headers, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
			}
		}
		req.Header.Set("Authorization", "Bearer "+token)
		before := lastSeqOf(t, fx)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		after := lastSeqOf(t, fx)

		if rec.Code == http.StatusInternalServerError {
			t.Fatalf("500 for %s: %s", path, rec.Body)
		}
		if rec.Code != http.StatusAccepted {
			if after != before {
				t.Fatalf("refused with %d but the stream moved from %d to %d", rec.Code, before, after)
			}
			var p Problem
			if rec.Header().Get("Content-Type") != ContentTypeProblem || json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Status != rec.Code {
				t.Fatalf("refusal %d is not a problem: %q %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
			}
			return
		}
		tenant := "default"
		if token == tokAcme {
			tenant = "acme"
		}
		checkStored(t, fx, before, after, tenant)
	})
}

func lastSeqOf(t *testing.T, fx *fixture) uint64 {
	t.Helper()
	bustest.WaitLogged(t, fx.js)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, err := fx.js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// checkStored decodes every message stored between two sequences as a
// runner would and holds it to the ingest's promises.
func checkStored(t *testing.T, fx *fixture, before, after uint64, tenant string) {
	t.Helper()
	bustest.WaitLogged(t, fx.js)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, err := fx.js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	for seq := before + 1; seq <= after; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("read %d: %v", seq, err)
		}
		h, err := events.Decode(m.Subject, nats.Header(m.Header), m.Data)
		if err != nil {
			t.Fatalf("published an event the decoder refuses (%s): %v", m.Subject, err)
		}
		if h.Tenant != tenant || events.IsJobType(h.Type) || m.Header.Get(events.HeaderMsgID) != h.ID {
			t.Fatalf("published %s %s for tenant %s with Nats-Msg-Id %q", h.Type, h.ID, h.Tenant, m.Header.Get(events.HeaderMsgID))
		}
	}
}
