package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"jetway/pkg/client"
)

// fakeAPI is a stand-in dispatcher for the client commands: it checks the
// bearer token like the real one and records what it was sent.
type fakeAPI struct {
	mu       sync.Mutex
	requests []string // "METHOD /path?query body"
}

const fakeToken = "jw_good"

func newFakeAPI(t *testing.T) (*fakeAPI, string) {
	t.Helper()
	f := &fakeAPI{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+fakeToken {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"type":"urn:jetway:problem:unauthorized","title":"Unknown token","status":401,"detail":"the bearer token is not valid"}`)
		return
	}
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, strings.TrimSpace(r.Method+" "+r.URL.RequestURI()+" "+string(b)))
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/input"),
		r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/steer"):
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"0b6f6c1e-1111-4222-8333-444455556666","duplicate":false}`)
	case r.URL.Path == "/v1/sessions":
		io.WriteString(w, `{"sessions":[{"session":"s1","revision":4,"updated":"2026-11-30T10:00:00Z","record":{"state":"idle"}}]}`)
	case strings.HasSuffix(r.URL.Path, "/jobs"):
		io.WriteString(w, `{"jobs":[{"job":"3","revision":2,"updated":"2026-11-30T10:00:00Z","record":{"program":"gh","status":"exited"}}]}`)
	case r.URL.Path == "/v1/stop":
		on := r.Method == http.MethodPost
		fmt.Fprintf(w, `{"ground_stop":%v,"scope":"default/s1","reason":"incident","by":"default"}`, on)
	default:
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"title":"Not found","status":404,"detail":"no route"}`)
	}
}

func (f *fakeAPI) last() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		return ""
	}
	return f.requests[len(f.requests)-1]
}

// runCLI runs the jetway root command in-process and returns what it printed.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCLIWithInput(t, "", args...)
}

// runCLIWithInput is runCLI with in as the command's standard input.
func runCLIWithInput(t *testing.T, in string, args ...string) (string, error) {
	t.Helper()
	return prepareCLI(in, args...)()
}

// prepareCLI makes the root command now and returns what runs it. Making
// one sets the package's flag variables (jetway dev's among them), so two
// made at once race; two made one after the other may run at once.
func prepareCLI(in string, args ...string) func() (string, error) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetIn(strings.NewReader(in))
	root.SetArgs(args)
	return func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
}

func TestSend_json_prints_the_dispatchers_answer(t *testing.T) {
	api, url := newFakeAPI(t)
	out, err := runCLI(t, "send", "--url", url, "--token", fakeToken, "--json", "s1", "run", "the", "tests")
	if err != nil {
		t.Fatalf("send: %v\n%s", err, out)
	}
	var acc struct {
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
	}
	if err := json.Unmarshal([]byte(out), &acc); err != nil || acc.ID != "0b6f6c1e-1111-4222-8333-444455556666" {
		t.Fatalf("output is not the answer as JSON: %q (%v)", out, err)
	}
	if got := api.last(); got != `POST /v1/sessions/s1/input {"text":"run the tests"}` {
		t.Errorf("request = %s", got)
	}
}

func TestSend_without_json_says_sent_and_the_id(t *testing.T) {
	_, url := newFakeAPI(t)
	out, err := runCLI(t, "send", "--url", url, "--token", fakeToken, "s1", "hi")
	if err != nil || out != "sent 0b6f6c1e-1111-4222-8333-444455556666\n" {
		t.Fatalf("send = %q, %v", out, err)
	}
}

func TestSend_to_an_unreachable_dispatcher_asks_whether_jetway_dev_is_running(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = runCLI(t, "send", "--url", "http://"+addr, "--token", fakeToken, "s1", "hi")
	want := "cannot reach jetway at http://" + addr + ": connection refused — is `jetway dev` running?"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
}

func TestSend_with_a_wrong_token_shows_the_refusal_and_its_detail(t *testing.T) {
	_, url := newFakeAPI(t)
	_, err := runCLI(t, "send", "--url", url, "--token", "jw_wrong", "s1", "hi")
	if err == nil || err.Error() != "the token was refused (401): the bearer token is not valid" {
		t.Fatalf("error = %v", err)
	}
}

func TestSteer_sessions_jobs_and_stop_talk_to_their_endpoints(t *testing.T) {
	api, url := newFakeAPI(t)
	for _, tc := range []struct {
		args    []string
		request string
		output  string
	}{
		{[]string{"steer", "s1", "only", "the", "docs"}, `POST /v1/sessions/s1/steer {"note":"only the docs"}`, "steered 0b6f6c1e"},
		{[]string{"sessions"}, `GET /v1/stop`, `s1       idle`},
		{[]string{"sessions", "--json"}, `GET /v1/sessions`, `"session": "s1"`},
		// jobs reads the jobs, then the session's detail for its sub-agents.
		{[]string{"jobs", "s1"}, `GET /v1/sessions/s1`, `3    exited`},
		{[]string{"stop", "--session", "s1", "--reason", "incident"}, `POST /v1/stop?session=s1 {"reason":"incident"}`, "Ground Stop is ON (default/s1): incident — set by default"},
		{[]string{"stop", "--session", "s1", "--off"}, `DELETE /v1/stop?session=s1`, "Ground Stop is off (default/s1)"},
		{[]string{"stop", "--status", "--json"}, `GET /v1/stop`, `"ground_stop": false`},
		{[]string{"stop", "--global", "--reason", "incident"}, `POST /v1/stop?scope=global {"reason":"incident"}`, "Ground Stop is ON"},
		{[]string{"stop", "--tenant", "acme", "--status"}, `GET /v1/stop?tenant=acme`, "Ground Stop is off"},
	} {
		args := append(tc.args, "--url", url, "--token", fakeToken)
		out, err := runCLI(t, args...)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if got := api.last(); got != tc.request {
			t.Errorf("%v: request %q, want %q", tc.args, got, tc.request)
		}
		if !strings.Contains(out, tc.output) {
			t.Errorf("%v: output %q lacks %q", tc.args, out, tc.output)
		}
	}
}

func TestStop_status_of_a_tenant_shows_its_sessions_and_the_global_switch_without_its_reason(t *testing.T) {
	on := true
	var b strings.Builder
	err := printStop(&b, client.StopState{Scope: "acme/*", GlobalStop: &on, Sessions: []client.StopState{
		{GroundStop: true, Scope: "acme/s1", Reason: "looks wrong", By: "acme"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := "Ground Stop is off (acme/*)\n" +
		"  the global Ground Stop is ON too (an operator's; ask them why)\n" +
		"  Ground Stop is ON (acme/s1): looks wrong — set by acme\n"
	if b.String() != want {
		t.Fatalf("printStop =\n%s\nwant\n%s", b.String(), want)
	}
}
