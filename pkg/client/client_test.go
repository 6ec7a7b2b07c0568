package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"jetway/pkg/auth"
	"jetway/pkg/events"
)

const testToken = "jw_test"

func newClient(t *testing.T, h http.Handler) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestInput_posts_text_with_the_bearer_token(t *testing.T) {
	var gotAuth, gotPath string
	var gotBody map[string]string
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotPath = r.Header.Get("Authorization"), r.URL.Path
		json.NewDecoder(r.Body).Decode(&gotBody)
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"e1","duplicate":false}`)
	}))
	acc, err := c.Input(ctxT(t), "s1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if acc.ID != "e1" {
		t.Errorf("id = %q, want e1", acc.ID)
	}
	if gotAuth != "Bearer "+testToken || gotPath != "/v1/sessions/s1/input" || gotBody["text"] != "hello" {
		t.Errorf("request: auth %q path %q body %v", gotAuth, gotPath, gotBody)
	}
}

func TestUnreachable_dispatcher_asks_whether_jetway_dev_is_running(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c, err := New(Config{BaseURL: "http://" + addr, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Sessions(ctxT(t))
	want := fmt.Sprintf("cannot reach jetway at http://%s: connection refused — is `jetway dev` running?", addr)
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant   %s", err, want)
	}
	var ue *UnreachableError
	if !errors.As(err, &ue) {
		t.Errorf("error is %T, want *UnreachableError", err)
	}
}

func TestRefused_token_shows_the_problem_detail(t *testing.T) {
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"type":"urn:jetway:problem:unauthorized","title":"Unknown token","status":401,"detail":"the bearer token is not valid"}`)
	}))
	_, err := c.Steer(ctxT(t), "s1", "stop that")
	if err == nil || err.Error() != "the token was refused (401): the bearer token is not valid" {
		t.Fatalf("error = %v", err)
	}
	if !IsUnauthorized(err) {
		t.Error("IsUnauthorized = false")
	}
}

func TestOther_problems_name_the_request_title_and_detail(t *testing.T) {
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"title":"Invalid session name","status":400,"detail":"session \"a.b\": may contain only A-Z a-z 0-9 _ -"}`)
	}))
	_, err := c.Jobs(ctxT(t), "a.b")
	want := `GET /v1/sessions/a.b/jobs: Invalid session name (400): session "a.b": may contain only A-Z a-z 0-9 _ -`
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
}

func TestStop_on_and_off_use_the_session_query(t *testing.T) {
	var calls []string
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls = append(calls, r.Method+" "+r.URL.RequestURI()+" "+string(b))
		on := r.Method == http.MethodPost
		json.NewEncoder(w).Encode(StopState{GroundStop: on, Scope: "default/s1"})
	}))
	st, err := c.SetStop(ctxT(t), "s1", "incident")
	if err != nil || !st.GroundStop {
		t.Fatalf("SetStop = %+v, %v", st, err)
	}
	st, err = c.ClearStop(ctxT(t), "s1")
	if err != nil || st.GroundStop {
		t.Fatalf("ClearStop = %+v, %v", st, err)
	}
	want := []string{`POST /v1/stop?session=s1 {"reason":"incident"}`, `DELETE /v1/stop?session=s1 `}
	if strings.Join(calls, "|") != strings.Join(want, "|") {
		t.Errorf("calls = %q, want %q", calls, want)
	}
}

func TestPublish_sends_a_structured_cloudevent(t *testing.T) {
	var ct string
	var body map[string]any
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct = r.Header.Get("Content-Type")
		json.NewDecoder(r.Body).Decode(&body)
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"x"}`)
	}))
	e, err := events.New("default", "s1", "test/client", events.External{Type: "com.example.ping", Data: []byte(`{"n":1}`), DataContentType: "application/json"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctxT(t), e); err != nil {
		t.Fatal(err)
	}
	if ct != events.ContentTypeStructured || body["type"] != "com.example.ping" || body["subject"] != "default/s1" {
		t.Errorf("content type %q, body %v", ct, body)
	}
}

func TestResolve_prefers_flag_then_env_then_the_dev_tokens_file(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.json")
	b, _ := json.Marshal(auth.File{Tokens: []auth.Grant{
		{Token: "jw_user", Tenant: "default"},
		{Token: "jw_admin", Tenant: "default", Admin: true},
		{Token: "jw_op", Tenant: "default", Role: auth.RoleOperator},
	}})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	cfg, err := Resolve(Options{TokensFile: path, Getenv: getenv})
	if err != nil || cfg.Token != "jw_user" || cfg.BaseURL != DefaultURL {
		t.Fatalf("from file: %+v, %v", cfg, err)
	}
	cfg, err = Resolve(Options{TokensFile: path, Admin: true, Getenv: getenv})
	if err != nil || cfg.Token != "jw_admin" {
		t.Fatalf("admin from file: %+v, %v", cfg, err)
	}
	cfg, err = Resolve(Options{TokensFile: path, Operator: true, Getenv: getenv})
	if err != nil || cfg.Token != "jw_op" {
		t.Fatalf("operator from file: %+v, %v", cfg, err)
	}
	env[EnvToken], env[EnvURL] = "jw_env", "http://h:1"
	cfg, err = Resolve(Options{TokensFile: path, Getenv: getenv})
	if err != nil || cfg.Token != "jw_env" || cfg.BaseURL != "http://h:1" {
		t.Fatalf("from env: %+v, %v", cfg, err)
	}
	cfg, err = Resolve(Options{Token: "jw_flag", URL: "http://f:2", TokensFile: path, Getenv: getenv})
	if err != nil || cfg.Token != "jw_flag" || cfg.BaseURL != "http://f:2" {
		t.Fatalf("from flags: %+v, %v", cfg, err)
	}
}

func TestResolve_without_any_token_says_how_to_get_one(t *testing.T) {
	_, err := Resolve(Options{TokensFile: filepath.Join(t.TempDir(), "none.json"), Getenv: func(string) string { return "" }})
	if err == nil || !strings.Contains(err.Error(), EnvToken) || !strings.Contains(err.Error(), "jetway dev") {
		t.Fatalf("error = %v", err)
	}
}

// sseServer serves a session stream from a fixed list of events; each
// connection sends the events after Last-Event-ID, and the first connection
// is cut after cutAfter events so the client has to resume.
type sseServer struct {
	mu       sync.Mutex
	lastIDs  []string
	events   []Event
	cutAfter int
}

func (s *sseServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.lastIDs = append(s.lastIDs, r.Header.Get("Last-Event-ID"))
	first := len(s.lastIDs) == 1
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, ": hello\n\n")
	sent := 0
	for _, ev := range s.events {
		if last := r.Header.Get("Last-Event-ID"); last != "" && ev.ID <= last {
			continue
		}
		if first && sent == s.cutAfter {
			return // drop the connection mid-stream
		}
		fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n: heartbeat\n\n", ev.ID, ev.Type, ev.Data)
		w.(http.Flusher).Flush()
		sent++
	}
	<-r.Context().Done()
}

func TestFollow_resumes_with_Last_Event_ID_after_a_dropped_connection(t *testing.T) {
	srv := &sseServer{cutAfter: 2}
	for i := 1; i <= 4; i++ {
		srv.events = append(srv.events, Event{ID: fmt.Sprint(i), Type: "io.jetway.headline", Data: []byte(fmt.Sprintf(`{"text":"h%d"}`, i))})
	}
	c := newClient(t, srv)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var got []string
	reconnects := 0
	err := c.Follow(ctx, "s1", StreamOptions{}, func(ev Event) error {
		got = append(got, ev.ID+" "+ev.Type+" "+string(ev.Data))
		if len(got) == 4 {
			cancel()
		}
		return nil
	}, func(error) { reconnects++ })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow = %v", err)
	}
	want := []string{
		`1 io.jetway.headline {"text":"h1"}`, `2 io.jetway.headline {"text":"h2"}`,
		`3 io.jetway.headline {"text":"h3"}`, `4 io.jetway.headline {"text":"h4"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.lastIDs) < 2 || srv.lastIDs[0] != "" || srv.lastIDs[1] != "2" {
		t.Errorf("Last-Event-ID per connection = %q, want [\"\" \"2\" …]", srv.lastIDs)
	}
	if reconnects < 1 {
		t.Error("onReconnect was not called")
	}
}

func TestFollow_stops_at_once_when_the_token_is_refused(t *testing.T) {
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"title":"Unknown token","status":401,"detail":"the bearer token is not valid"}`)
	}))
	err := c.Follow(ctxT(t), "s1", StreamOptions{}, func(Event) error { return nil }, nil)
	if !IsUnauthorized(err) {
		t.Fatalf("Follow = %v, want a 401", err)
	}
}
