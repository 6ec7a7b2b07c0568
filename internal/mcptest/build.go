package mcptest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"jetway/internal/testutil"
)

// Build returns the mcptestserver program built from this checkout, in a
// directory of its own (a worker's confined servers need it among their
// read-only paths): the one build every package's tests share, made again
// only when its sources change (testutil.Binary).
func Build(t testing.TB) string {
	t.Helper()
	return testutil.Binary(t, "jetway/internal/mcptest/mcptestserver", "")
}

// HTTPServer is the test server over streamable HTTP.
type HTTPServer struct {
	*httptest.Server
	mu      sync.Mutex
	headers []http.Header
	calls   []string
}

// ServeHTTP serves NewServer over streamable HTTP until the test ends.
func ServeHTTP(t testing.TB) *HTTPServer {
	t.Helper()
	srv := NewServer()
	srv.RemoveTools("crash") // it would end the test binary
	h := &HTTPServer{}
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		h.mu.Lock()
		h.headers = append(h.headers, r.Header.Clone())
		if json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" {
			h.calls = append(h.calls, msg.Params.Name)
		}
		h.mu.Unlock()
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(h.Close)
	return h
}

// Calls are the tools the server was asked to call, in order.
func (h *HTTPServer) Calls() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.calls...)
}

// Headers are the request headers the server got so far.
func (h *HTTPServer) Headers() []http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]http.Header(nil), h.headers...)
}
