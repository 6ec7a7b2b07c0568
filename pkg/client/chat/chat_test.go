package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"jetway/pkg/client"
	"jetway/pkg/events"
)

const waitFor = 10 * time.Second

// fakeDispatcher serves one session's SSE stream from a channel and
// records what is sent into the session.
type fakeDispatcher struct {
	push    chan string // SSE frames to send
	mu      sync.Mutex
	inputs  []string
	steers  []string
	onInput func(text string)
	streams chan struct{} // one per opened stream
	// entries is the session's transcript, served after ?after=.
	entries []client.TranscriptEntry
}

func newFake(t *testing.T) (*fakeDispatcher, *client.Client) {
	t.Helper()
	f := &fakeDispatcher{push: make(chan string, 100), streams: make(chan struct{}, 10)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sessions/s1/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, ": jetway stream\n\n")
		w.(http.Flusher).Flush()
		f.streams <- struct{}{}
		for {
			select {
			case <-r.Context().Done():
				return
			case frame := <-f.push:
				io.WriteString(w, frame)
				w.(http.Flusher).Flush()
			}
		}
	})
	mux.HandleFunc("POST /v1/sessions/s1/input", func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Text string }
		json.NewDecoder(r.Body).Decode(&in)
		f.mu.Lock()
		f.inputs = append(f.inputs, in.Text)
		cb := f.onInput
		f.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"e1"}`)
		if cb != nil {
			cb(in.Text)
		}
	})
	mux.HandleFunc("POST /v1/sessions/s1/steer", func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Note string }
		json.NewDecoder(r.Body).Decode(&in)
		f.mu.Lock()
		f.steers = append(f.steers, in.Note)
		f.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"e2"}`)
	})
	mux.HandleFunc("GET /v1/sessions/s1", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"session":"s1","state":"idle","record":{"state":"idle","run":"r1"},"pending_events":0,"jobs":[]}`)
	})
	mux.HandleFunc("GET /v1/sessions/s1/transcript", func(w http.ResponseWriter, r *http.Request) {
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		page := client.TranscriptPage{Session: "s1", Entries: []client.TranscriptEntry{}, Next: after}
		f.mu.Lock()
		for _, e := range f.entries {
			if e.ID > after {
				page.Entries = append(page.Entries, e)
				page.Next = e.ID
			}
		}
		f.mu.Unlock()
		json.NewEncoder(w).Encode(page)
	})
	mux.HandleFunc("POST /v1/sessions/s1/jobs/3/kill", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"id":"3","program":"gh","status":"killed","exit_code":-1,"line":"t3 killed after 1s"}`)
	})
	mux.HandleFunc("GET /v1/sessions/s1/jobs", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"jobs":[{"job":"3","revision":1,"record":{"program":"gh","status":"running"}}]}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := client.New(client.Config{BaseURL: srv.URL, Token: "jw_test"})
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

var seq int

func frame(typ string, data any) string {
	b, _ := json.Marshal(data)
	seq++
	return fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", seq, typ, b)
}

func (f *fakeDispatcher) sent() ([]string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.inputs...), append([]string(nil), f.steers...)
}

// screen collects everything the terminal shows.
type screen struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	more chan struct{}
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.buf.Write(p)
	s.mu.Unlock()
	select {
	case s.more <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitUntil waits until cond holds for what the screen shows.
func (s *screen) waitUntil(t *testing.T, what string, cond func(string) bool) string {
	t.Helper()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	for {
		out := s.String()
		if cond(out) {
			return out
		}
		select {
		case <-s.more:
		case <-deadline.C:
			t.Fatalf("screen never showed %s; it shows:\n%q", what, out)
		}
	}
}

func TestHeadline_shows_while_typing_and_the_typed_text_is_redrawn(t *testing.T) {
	f, c := newFake(t)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	if err := pty.Setsize(tty, &pty.Winsize{Rows: 24, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	scr := &screen{more: make(chan struct{}, 1)}
	go io.Copy(scr, ptmx)

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Config{Client: c, Session: "s1", In: tty, Out: tty}) }()

	scr.waitUntil(t, "the prompt", func(s string) bool { return strings.Contains(s, "s1> ") })
	io.WriteString(ptmx, "hel")
	scr.waitUntil(t, "the typed text", func(s string) bool { return strings.Contains(s, "s1> hel") })

	f.push <- frame(events.TypeHeadline, events.HeadlineNote{Text: "job 3 (gh) exited 0 after 21m", About: events.TypeJobExited})
	out := scr.waitUntil(t, "the headline and the prompt redrawn after it", func(s string) bool {
		i := strings.Index(s, "» job 3 (gh) exited 0 after 21m")
		return i >= 0 && strings.Contains(s[i:], "s1> hel")
	})
	if i := strings.Index(out, "» job 3"); !strings.Contains(out[:i], "\x1b[K") && !strings.Contains(out[:i], "\r") {
		t.Errorf("the prompt line was not cleared before the headline: %q", out)
	}
	if inputs, _ := f.sent(); len(inputs) != 0 {
		t.Fatalf("input sent before Enter: %q", inputs)
	}

	io.WriteString(ptmx, "lo\r")
	deadline := time.After(waitFor)
	for {
		inputs, _ := f.sent()
		if len(inputs) == 1 {
			if inputs[0] != "hello" {
				t.Fatalf("input = %q, want hello", inputs[0])
			}
			break
		}
		select {
		case <-scr.more:
		case <-deadline:
			t.Fatal("input never sent")
		case <-time.After(20 * time.Millisecond): // re-check the fake's record
		}
	}

	io.WriteString(ptmx, "/quit\r")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("/quit did not end the chat")
	}
}

func TestLine_mode_sends_lines_runs_slash_commands_and_shows_the_run(t *testing.T) {
	f, c := newFake(t)
	f.onInput = func(text string) {
		if text != "hello" {
			return
		}
		f.push <- frame(events.TypeRunText, events.RunText{Run: "r1", Text: "Hi th"})
		f.push <- frame(events.TypeRunText, events.RunText{Run: "r1", Text: "ere.\nDone"})
		f.push <- frame(events.TypeRunEnded, events.RunEnded{Run: "r1", Reason: "completed", Turns: 1})
		f.push <- frame(events.TypeHeadline, events.HeadlineNote{Text: "run r1 completed after 1 turn in 0s", About: events.TypeRunEnded})
	}
	var out bytes.Buffer
	in := strings.NewReader("/steer be brief\n/jobs\n/kill 3\n/bogus\nhello\n")
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := Run(ctx, Config{Client: c, Session: "s1", In: in, Out: &out}); err != nil {
		t.Fatalf("Run: %v", err)
	}
	inputs, steers := f.sent()
	if len(steers) != 1 || steers[0] != "be brief" {
		t.Errorf("steers = %q", steers)
	}
	if len(inputs) != 1 || inputs[0] != "hello" {
		t.Errorf("inputs = %q", inputs)
	}
	text := out.String()
	for _, want := range []string{
		"JOB  STATE    EXIT  JOB LINE\n3    running  -     -",
		"job 3 killed: t3 killed after 1s",
		"! unknown command /bogus",
		"Hi there.\nDone\n» run r1 completed after 1 turn in 0s",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}

func TestUnreachable_dispatcher_fails_before_the_prompt(t *testing.T) {
	c, err := client.New(client.Config{BaseURL: "http://127.0.0.1:1", Token: "jw_x"})
	if err != nil {
		t.Fatal(err)
	}
	err = Run(context.Background(), Config{Client: c, Session: "s1", In: os.Stdin, Out: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "cannot reach jetway at http://127.0.0.1:1") {
		t.Fatalf("Run = %v", err)
	}
}
