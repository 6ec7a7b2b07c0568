package mcptest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// The noisy server announces tools/list_changed while it starts, as
// published servers do (@modelcontextprotocol/server-everything sends one
// right after initializing): during its initialize (before the answer),
// right after the client's notifications/initialized, and before the
// answers to its first two tools/list. Its list never actually changes,
// so a client that offers fewer than NoisyTools after connecting lost a
// listing to the announcements. It speaks JSON-RPC by hand rather than
// through the SDK so the order of its messages on the wire is exactly
// this one (the SDK's server debounces and schedules its notifications).

// NoisyTools are the noisy server's tools: echo and twelve more, as many
// as server-everything has.
var NoisyTools = func() []string {
	out := []string{"echo"}
	for i := 1; i <= 12; i++ {
		out = append(out, fmt.Sprintf("tool%02d", i))
	}
	return out
}()

// noisyAnnouncedListings is how many tools/list answers are preceded by
// an announcement.
const noisyAnnouncedListings = 2

var listChanged = json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)

// noisySession is one client's session with the noisy server.
type noisySession struct {
	mu       sync.Mutex
	listings int
}

type rpcMessage struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
}

// handle answers one message: what to send back, in order, and what to
// send right after (unprompted, on the server's own stream).
func (s *noisySession) handle(raw []byte) (reply, after []json.RawMessage) {
	var m rpcMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil, nil
	}
	result := func(v any) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": v})
		return b
	}
	switch m.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(m.Params, &p)
		version := "2025-06-18"
		switch p.ProtocolVersion {
		case "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25":
			version = p.ProtocolVersion
		}
		return []json.RawMessage{listChanged, result(map[string]any{
			"protocolVersion": version,
			"capabilities":    map[string]any{"tools": map[string]any{"listChanged": true}},
			"serverInfo":      map[string]any{"name": "jetway-mcptest-noisy", "version": "1"},
		})}, nil
	case "notifications/initialized":
		return nil, []json.RawMessage{listChanged}
	case "tools/list":
		s.mu.Lock()
		s.listings++
		announce := s.listings <= noisyAnnouncedListings
		s.mu.Unlock()
		var tools []map[string]any
		for _, name := range NoisyTools {
			tools = append(tools, map[string]any{"name": name, "description": "A tool of the noisy server.",
				"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}})
		}
		reply = []json.RawMessage{result(map[string]any{"tools": tools})}
		if announce {
			reply = append([]json.RawMessage{listChanged}, reply...)
		}
		return reply, nil
	case "tools/call":
		var p struct {
			Name      string `json:"name"`
			Arguments struct {
				Text string `json:"text"`
			} `json:"arguments"`
		}
		_ = json.Unmarshal(m.Params, &p)
		return []json.RawMessage{result(map[string]any{"content": []map[string]any{{"type": "text", "text": p.Name + ": " + p.Arguments.Text}}})}, nil
	case "ping":
		return []json.RawMessage{result(map[string]any{})}, nil
	}
	if len(m.ID) == 0 {
		return nil, nil // a notification it does not care about
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "method not found: " + m.Method}})
	return []json.RawMessage{b}, nil
}

// ServeNoisyStdio serves the noisy server on r and w, one message a line,
// until r ends.
func ServeNoisyStdio(r io.Reader, w io.Writer) error {
	s := &noisySession{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		reply, after := s.handle(sc.Bytes())
		for _, m := range append(reply, after...) {
			if _, err := fmt.Fprintf(w, "%s\n", m); err != nil {
				return fmt.Errorf("noisy server: write: %w", err)
			}
		}
	}
	return sc.Err()
}

// noisyHTTP serves the noisy server over streamable HTTP: a request's
// answer comes as a server-sent event stream carrying the announcement
// before the answer; what follows initialized goes down the session's GET
// stream.
type noisyHTTP struct {
	mu       sync.Mutex
	seq      int
	sessions map[string]*noisyHTTPSession
}

type noisyHTTPSession struct {
	noisySession
	events chan json.RawMessage // for the GET stream
}

// ServeNoisyHTTP serves the noisy server over streamable HTTP until the
// test ends.
func ServeNoisyHTTP(t testing.TB) *httptest.Server {
	t.Helper()
	h := &noisyHTTP{sessions: map[string]*noisyHTTPSession{}}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func (h *noisyHTTP) session(r *http.Request, create bool) (string, *noisyHTTPSession) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if create {
		h.seq++
		id := fmt.Sprintf("noisy-%d", h.seq)
		s := &noisyHTTPSession{events: make(chan json.RawMessage, 16)}
		h.sessions[id] = s
		return id, s
	}
	id := r.Header.Get("Mcp-Session-Id")
	return id, h.sessions[id]
}

func (h *noisyHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		h.post(w, r)
	case http.MethodGet:
		h.get(w, r)
	case http.MethodDelete:
		h.mu.Lock()
		delete(h.sessions, r.Header.Get("Mcp-Session-Id"))
		h.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func (h *noisyHTTP) post(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var m rpcMessage
	if err := json.Unmarshal(body, &m); err != nil {
		http.Error(w, "one JSON-RPC message a request", http.StatusBadRequest)
		return
	}
	id, s := h.session(r, m.Method == "initialize")
	if s == nil {
		http.Error(w, "no such session", http.StatusNotFound)
		return
	}
	reply, after := s.handle(body)
	for _, a := range after {
		select {
		case s.events <- a:
		default:
		}
	}
	w.Header().Set("Mcp-Session-Id", id)
	if len(reply) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for _, msg := range reply {
		writeEvent(w, msg)
	}
}

// get is the session's own stream: the announcements that come
// unprompted, until the client goes.
func (h *noisyHTTP) get(w http.ResponseWriter, r *http.Request) {
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		w.WriteHeader(http.StatusNotAcceptable)
		return
	}
	_, s := h.session(r, false)
	if s == nil {
		http.Error(w, "no such session", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	writeEvent(w, nil)
	for {
		select {
		case msg := <-s.events:
			writeEvent(w, msg)
		case <-r.Context().Done():
			return
		}
	}
}

// writeEvent writes msg as one server-sent event and flushes it (nil
// flushes the headers only).
func writeEvent(w http.ResponseWriter, msg json.RawMessage) {
	if msg != nil {
		_, _ = fmt.Fprintf(w, "event: message\ndata: %s\n\n", msg) // a client gone: the test sees the missing answer
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}
