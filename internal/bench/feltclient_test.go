package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
)

// fakeFront is a dispatcher as the felt client sees it: one SSE stream
// per session, and an input that is answered 202 and then streams its
// run (started naming the event, a text carrying the input's token,
// ended). Its first input to each session is refused once for the rate.
type fakeFront struct {
	mu      sync.Mutex
	streams map[string]chan string
	limited map[string]bool
	seq     int
}

func (f *fakeFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	session := r.PathValue("session")
	if r.Header.Get("Authorization") != "Bearer tok-"+session {
		http.Error(w, "unknown token", http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	ch := f.streams[session]
	if ch == nil {
		ch = make(chan string, 16)
		f.streams[session] = ch
	}
	f.mu.Unlock()
	if r.Method == http.MethodGet {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		for {
			select {
			case ev := <-ch:
				_, _ = io.WriteString(w, ev)
				_ = rc.Flush()
			case <-r.Context().Done():
				return
			}
		}
	}
	var in struct{ Text string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	first := !f.limited[session]
	f.limited[session] = true
	f.seq++
	id, run := fmt.Sprintf("ev%d", f.seq), fmt.Sprintf("run%d", f.seq)
	f.mu.Unlock()
	if first {
		w.Header().Set("Retry-After", "0")
		http.Error(w, "over the rate", http.StatusTooManyRequests)
		return
	}
	tok := in.Text[strings.LastIndex(in.Text, "["):]
	w.WriteHeader(http.StatusAccepted)
	_, _ = fmt.Fprintf(w, `{"id":%q}`, id)
	// The run's output, as the dispatcher relays it; a stale text of
	// another token first, which the client must pass over.
	ch <- fmt.Sprintf("event: %s\ndata: {\"text\":\"old [x]\"}\n\n", events.TypeRunText)
	ch <- fmt.Sprintf("event: %s\ndata: {\"run\":%q,\"events\":[%q]}\n\n", events.TypeRunStarted, run, id)
	ch <- fmt.Sprintf("event: %s\ndata: {\"text\":\"answer %s\"}\n\n", events.TypeRunText, tok)
	ch <- fmt.Sprintf("event: %s\ndata: {\"run\":%q}\n\n", events.TypeRunEnded, run)
}

func TestFeltClient_times_each_stage_of_a_probe_and_a_direct_call_in_order(t *testing.T) {
	front := &fakeFront{streams: map[string]chan string{}, limited: map[string]bool{}}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/sessions/{session}/stream", front)
	mux.Handle("POST /v1/sessions/{session}/input", front)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	model := llmtest.NewAnthropic(t)
	model.SetFallback(llmtest.Reply{Text: "direct answer", Chunks: 1})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- FeltClient(ctx, inR, outW)
		_ = outW.Close()
	}()
	answers := bufio.NewScanner(outR)
	send := func(v any) feltAnswer {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inW.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
		if !answers.Scan() {
			t.Fatalf("no answer to %s: %v", b, answers.Err())
		}
		var a feltAnswer
		if err := json.Unmarshal(answers.Bytes(), &a); err != nil {
			t.Fatalf("answer %q: %v", answers.Bytes(), err)
		}
		return a
	}
	setup := feltSetup{Base: srv.URL, Model: model.URL(), Patience: 10 * time.Second,
		Sessions: map[string]string{"s1": "tok-s1", "s2": "tok-s2"}}
	if a := send(setup); a.Error != "" {
		t.Fatalf("setup: %s", a.Error)
	}
	for i, session := range []string{"s1", "s2", "s1"} {
		tok := fmt.Sprintf("[felt-%d]", i)
		a := send(feltCommand{Op: "probe", Session: session, Text: "question " + tok, Token: tok})
		if a.Error != "" {
			t.Fatalf("probe %s: %s", session, a.Error)
		}
		// run.started may come before the 202 is read; the text and the
		// end come after it, in order.
		if a.T0 == 0 || a.Posted <= 0 || a.Started <= 0 || a.Text < a.Started || a.Ended < a.Text {
			t.Errorf("probe %s: stages out of order or missing: %+v", session, a)
		}
		if want := map[bool]int{true: 1, false: 0}[i < 2]; a.Limited != want {
			t.Errorf("probe %s: %d POSTs refused for the rate noted, want %d", session, a.Limited, want)
		}
	}
	if a := send(feltCommand{Op: "direct"}); a.Error != "" || a.TTFT <= 0 {
		t.Errorf("direct call: %+v", a)
	}
	if a := send(feltCommand{Op: "probe", Session: "nowhere", Text: "q", Token: "[q]"}); a.Error == "" {
		t.Error("a probe of a session without a stream came back without an error")
	}
	if err := inW.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the client did not end cleanly on the end of its input: %v", err)
	}
}
