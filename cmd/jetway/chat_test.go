package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"jetway/pkg/events"
)

// sseAPI serves session s1's stream from a channel and records inputs.
type sseAPI struct {
	frames  chan string
	opened  chan struct{}
	inputCh chan string
}

func newSSEAPI(t *testing.T) (*sseAPI, string) {
	t.Helper()
	a := &sseAPI{frames: make(chan string, 16), opened: make(chan struct{}, 4), inputCh: make(chan string, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sessions/s1/stream", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+fakeToken {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"title":"Unknown token","status":401,"detail":"the bearer token is not valid"}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, ": jetway stream for default/s1\n\n")
		w.(http.Flusher).Flush()
		a.opened <- struct{}{}
		for {
			select {
			case <-r.Context().Done():
				return
			case f := <-a.frames:
				io.WriteString(w, f)
				w.(http.Flusher).Flush()
			}
		}
	})
	mux.HandleFunc("POST /v1/sessions/s1/input", func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Text string }
		json.NewDecoder(r.Body).Decode(&in)
		a.inputCh <- in.Text
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"e1"}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return a, srv.URL
}

// ptyScreen accumulates what a program writes to its terminal.
type ptyScreen struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	more chan struct{}
}

func (s *ptyScreen) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.buf.Write(p)
	s.mu.Unlock()
	select {
	case s.more <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (s *ptyScreen) until(t *testing.T, what string, cond func(string) bool) string {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		out := s.buf.String()
		s.mu.Unlock()
		if cond(out) {
			return out
		}
		select {
		case <-s.more:
		case <-deadline.C:
			t.Fatalf("terminal never showed %s; it shows:\n%q", what, out)
		}
	}
}

func TestChat_in_a_real_terminal_shows_a_headline_while_typing_and_redraws_the_typed_text(t *testing.T) {
	api, url := newSSEAPI(t)
	cmd := exec.Command(jetwayBinary(t), "chat", "--url", url, "--token", fakeToken, "s1")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 100})
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		ptmx.Close()
	})
	scr := &ptyScreen{more: make(chan struct{}, 1)}
	go io.Copy(scr, ptmx)

	scr.until(t, "the prompt", func(s string) bool { return strings.Contains(s, "s1> ") })
	select {
	case <-api.opened:
	case <-time.After(20 * time.Second):
		t.Fatal("chat never opened the stream")
	}
	io.WriteString(ptmx, "deploy to sta")
	scr.until(t, "the typed text", func(s string) bool { return strings.Contains(s, "s1> deploy to sta") })

	b, _ := json.Marshal(events.HeadlineNote{Text: "job 3 (gh) exited 0 after 21m", About: events.TypeJobExited})
	api.frames <- fmt.Sprintf("id: 7\nevent: %s\ndata: %s\n\n", events.TypeHeadline, b)
	scr.until(t, "the headline, then the prompt redrawn with the typed text", func(s string) bool {
		i := strings.Index(s, "» job 3 (gh) exited 0 after 21m")
		return i >= 0 && strings.Contains(s[i:], "s1> deploy to sta")
	})
	select {
	case in := <-api.inputCh:
		t.Fatalf("input %q sent before Enter", in)
	default:
	}

	io.WriteString(ptmx, "ging\r")
	select {
	case in := <-api.inputCh:
		if in != "deploy to staging" {
			t.Fatalf("input = %q", in)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("input not sent on Enter")
	}
	io.WriteString(ptmx, "/quit\r")
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("chat exited with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("/quit did not end chat")
	}
}

func TestChat_with_a_wrong_token_fails_with_the_refusal(t *testing.T) {
	_, url := newSSEAPI(t)
	_, err := runCLI(t, "chat", "--url", url, "--token", "jw_wrong", "s1")
	if err == nil || err.Error() != "the token was refused (401): the bearer token is not valid" {
		t.Fatalf("error = %v", err)
	}
}
