package mcptest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
	buildOut  []byte
)

// Build compiles the mcptestserver program once per test binary and
// returns its path, in a directory of its own (a worker's confined
// servers need it among their read-only paths). The directory is in the
// user's cache, and each build replaces the program there by a rename, so
// test binaries running at once each find a whole program and nothing is
// left behind in /tmp.
func Build(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		var cache string
		if cache, buildErr = os.UserCacheDir(); buildErr != nil {
			return
		}
		dir := filepath.Join(cache, "jetway-mcptest")
		if buildErr = os.MkdirAll(dir, 0o755); buildErr != nil {
			return
		}
		buildPath = filepath.Join(dir, "mcptestserver")
		tmp := fmt.Sprintf("%s.%d.tmp", buildPath, os.Getpid())
		cmd := exec.Command("go", "build", "-o", tmp, "jetway/internal/mcptest/mcptestserver")
		if buildOut, buildErr = cmd.CombinedOutput(); buildErr != nil {
			return
		}
		buildErr = os.Rename(tmp, buildPath)
	})
	if buildErr != nil {
		t.Fatalf("build the MCP test server: %v\n%s", buildErr, buildOut)
	}
	return buildPath
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
