package providers_test

import (
	"context"
	"strings"
	"testing"

	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
	"jetway/pkg/llm/providers"
)

func TestA_profile_model_reaches_the_endpoint_the_runner_configured_under_its_name(t *testing.T) {
	a := llmtest.NewAnthropic(t, llmtest.Reply{Text: "from anthropic"})
	o := llmtest.NewOpenAI(t, llmtest.Reply{Text: "from openai"})
	env := map[string]string{
		"JETWAY_ENDPOINT_TEAM_A_BASE_URL": a.URL(),
		"JETWAY_ENDPOINT_TEAM_A_KEY_ENV":  "TEAM_A_KEY",
		"TEAM_A_KEY":                      "sk-team-a",
		"JETWAY_ENDPOINT_LOCAL_BASE_URL":  o.URL(),
	}
	getenv := func(k string) string { return env[k] }
	for _, c := range []struct {
		m    providers.Model
		want string
	}{
		{providers.Model{Provider: "anthropic", Name: "claude-x", Endpoint: "team-a"}, "from anthropic"},
		{providers.Model{Provider: "openai", Name: "qwen", Endpoint: "local"}, "from openai"},
	} {
		p, err := providers.ForModel(c.m, getenv)
		if err != nil {
			t.Fatalf("%+v: %v", c.m, err)
		}
		m, _, _, err := p.Complete(context.Background(), llm.CompletionRequest{Messages: []llm.Message{llm.UserText("hi")}})
		if err != nil || m.Text() != c.want {
			t.Fatalf("%+v answered %q, %v", c.m, m.Text(), err)
		}
	}
	if h := a.Requests()[0].Header; h.Get("x-api-key") != "sk-team-a" && h.Get("Authorization") != "Bearer sk-team-a" {
		t.Fatalf("the anthropic endpoint was not sent the key its KEY_ENV names: %v", h)
	}
	if got := a.Requests()[0].JSON()["model"]; got != "claude-x" {
		t.Fatalf("model sent %v", got)
	}

	// An endpoint the runner does not configure is refused naming the
	// variable, never a fallback; a missing key is named, not shown.
	if _, err := providers.ForModel(providers.Model{Provider: "openai", Name: "x", Endpoint: "elsewhere"}, getenv); err == nil || !strings.Contains(err.Error(), "JETWAY_ENDPOINT_ELSEWHERE_BASE_URL") {
		t.Fatalf("unconfigured endpoint: %v", err)
	}
	env["JETWAY_ENDPOINT_TEAM_A_KEY_ENV"] = "UNSET_KEY"
	if _, err := providers.ForModel(providers.Model{Provider: "anthropic", Endpoint: "team-a"}, getenv); err == nil || !strings.Contains(err.Error(), "JETWAY_ENDPOINT_TEAM_A_KEY_ENV") {
		t.Fatalf("endpoint without its key: %v", err)
	}
	if p, err := providers.ForModel(providers.Model{Provider: "script"}, getenv); err != nil || !strings.Contains(p.Name(), "demo") {
		t.Fatalf("script without an endpoint is the demo: %v", err)
	}
}

func TestAn_endpoint_name_becomes_its_variables_upper_cased_with_underscores(t *testing.T) {
	for part, want := range map[string]string{
		"BASE_URL": "JETWAY_ENDPOINT_TEAM_GPU_BASE_URL",
		"KEY_ENV":  "JETWAY_ENDPOINT_TEAM_GPU_KEY_ENV",
		"SCRIPT":   "JETWAY_ENDPOINT_TEAM_GPU_SCRIPT",
	} {
		if got := providers.EndpointVar("team-gpu", part); got != want {
			t.Errorf("EndpointVar(team-gpu, %s) = %s, want %s", part, got, want)
		}
	}
}
