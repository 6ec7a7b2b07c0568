package providers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
	"jetway/pkg/llm/providers"
)

// clearEnv empties every variable FromEnv reads, for this test only.
func clearEnv(t *testing.T) {
	for _, k := range []string{"JETWAY_SCRIPT", "ANTHROPIC_API_KEY", "ANTHROPIC_MODEL", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"} {
		t.Setenv(k, "")
	}
}

func TestWithout_keys_the_demo_script_answers(t *testing.T) {
	clearEnv(t)
	t.Chdir(t.TempDir()) // the demo is built in, not read from the working directory
	p, err := providers.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "script demo.json (deterministic, no model)" {
		t.Fatalf("name %q", p.Name())
	}
	m, stop, _, err := p.Complete(context.Background(), llm.CompletionRequest{Messages: []llm.Message{llm.UserText("build")}})
	if err != nil || stop != llm.StopToolUse || m.ToolUses()[0].Name != "shell" {
		t.Fatalf("demo first turn: %q %+v %v", stop, m, err)
	}
}

func TestAnthropic_key_picks_Anthropic_with_its_model_and_base_url(t *testing.T) {
	clearEnv(t)
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "from anthropic"})
	t.Setenv("ANTHROPIC_API_KEY", "k")
	t.Setenv("ANTHROPIC_MODEL", "claude-x")
	t.Setenv("ANTHROPIC_BASE_URL", s.URL())
	t.Setenv("OPENAI_API_KEY", "also set, but Anthropic comes first")
	p, err := providers.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	m, _, _, err := p.Complete(context.Background(), llm.CompletionRequest{Messages: []llm.Message{llm.UserText("hi")}})
	if err != nil || m.Text() != "from anthropic" || p.Name() != "anthropic claude-x" {
		t.Fatalf("%q %q %v", p.Name(), m.Text(), err)
	}
	if got := s.Requests()[0].JSON()["model"]; got != "claude-x" {
		t.Fatalf("model sent %v", got)
	}
}

func TestOpenAI_base_url_picks_a_compatible_server_and_needs_a_model(t *testing.T) {
	clearEnv(t)
	s := llmtest.NewOpenAI(t, llmtest.Reply{Text: "from vllm"})
	t.Setenv("OPENAI_BASE_URL", s.URL())
	if _, err := providers.FromEnv(); err == nil || !strings.Contains(err.Error(), "OPENAI_MODEL") {
		t.Fatalf("want an error naming OPENAI_MODEL, got %v", err)
	}
	t.Setenv("OPENAI_MODEL", "qwen")
	p, err := providers.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	m, _, _, err := p.Complete(context.Background(), llm.CompletionRequest{Messages: []llm.Message{llm.UserText("hi")}})
	if err != nil || m.Text() != "from vllm" || !strings.HasPrefix(p.Name(), "openai-compatible qwen at ") {
		t.Fatalf("%q %q %v", p.Name(), m.Text(), err)
	}
}

func TestJETWAY_SCRIPT_loads_a_script_file(t *testing.T) {
	clearEnv(t)
	path := filepath.Join(t.TempDir(), "mine.json")
	if err := os.WriteFile(path, []byte(`[{"text":"scripted hello"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JETWAY_SCRIPT", path)
	t.Setenv("ANTHROPIC_API_KEY", "ignored: the explicit script wins")
	p, err := providers.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "script mine.json (deterministic, no model)" {
		t.Fatalf("name %q", p.Name())
	}
}

// waves holds each request until n have arrived, so n calls are at the
// server at once however the client schedules them.
type waves struct {
	n       int
	mu      sync.Mutex
	arrived int
	full    []chan struct{}
}

func (w *waves) hold(t *testing.T) {
	w.mu.Lock()
	k := w.arrived / w.n
	for len(w.full) <= k {
		w.full = append(w.full, make(chan struct{}))
	}
	w.arrived++
	if w.arrived%w.n == 0 {
		close(w.full[k])
	}
	full := w.full[k]
	w.mu.Unlock()
	select {
	case <-full:
	case <-time.After(10 * time.Second):
		t.Errorf("wave %d: %d of %d calls arrived in 10 s", k+1, w.arrived-k*w.n, w.n)
	}
}

// callAtOnce makes n calls of p at once and waits for them all.
func callAtOnce(t *testing.T, p llm.Provider, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, _, _, err := p.Complete(ctx, llm.CompletionRequest{Messages: []llm.Message{llm.UserText("hi")}}); err != nil {
				t.Errorf("call: %v", err)
			}
		})
	}
	wg.Wait()
}

// Many runs call the model at once; the connections their calls opened
// must serve the next wave, not be closed and opened again (Go keeps two
// per host unless told otherwise): over HTTP/1.1, each new one is a TCP
// and often a TLS handshake.
func TestCalls_at_once_reuse_their_connections_for_the_next_calls(t *testing.T) {
	const n = 16
	for _, kind := range []string{"anthropic", "openai"} {
		t.Run(kind, func(t *testing.T) {
			clearEnv(t)
			w := &waves{n: n}
			route := func([]byte) (llmtest.Reply, bool) {
				w.hold(t)
				return llmtest.Reply{Text: "ok"}, true
			}
			var conns func() int
			if kind == "anthropic" {
				s := llmtest.NewAnthropic(t)
				s.SetRouter(route)
				conns = s.Conns
				t.Setenv("ANTHROPIC_API_KEY", "k")
				t.Setenv("ANTHROPIC_BASE_URL", s.URL())
			} else {
				s := llmtest.NewOpenAI(t)
				s.SetRouter(route)
				conns = s.Conns
				t.Setenv("OPENAI_BASE_URL", s.URL())
				t.Setenv("OPENAI_MODEL", "qwen")
			}
			p, err := providers.FromEnv()
			if err != nil {
				t.Fatal(err)
			}
			callAtOnce(t, p, n)
			if got := conns(); got != n {
				t.Fatalf("first wave of %d calls at once opened %d connections", n, got)
			}
			callAtOnce(t, p, n)
			callAtOnce(t, p, n)
			if got := conns(); got != n {
				t.Fatalf("three waves of %d calls at once opened %d connections, want the first wave's %d reused", n, got, n)
			}
		})
	}
}
