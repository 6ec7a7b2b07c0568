package providers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
