// Package providers chooses the model provider from the environment. It
// sits apart from package llm because it imports every provider, and the
// providers import llm.
package providers

import (
	"errors"
	"fmt"
	"os"

	"jetway/pkg/llm"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/openai"
	"jetway/pkg/llm/script"
)

// Default models when the environment names none.
const (
	DefaultAnthropicModel = "claude-sonnet-4-5"
	DefaultOpenAIModel    = "gpt-4.1"
)

// FromEnv returns the provider the environment asks for, in this order:
//
//   - JETWAY_SCRIPT: the script file at that path (an explicit choice wins);
//   - ANTHROPIC_API_KEY: Anthropic, with ANTHROPIC_MODEL and
//     ANTHROPIC_BASE_URL;
//   - OPENAI_API_KEY or OPENAI_BASE_URL: an OpenAI-compatible server, with
//     OPENAI_MODEL (required when OPENAI_BASE_URL points elsewhere than
//     OpenAI, as local servers name their own models; a local server
//     without a key gets a placeholder);
//   - otherwise the built-in demo script, so the host runs without keys.
func FromEnv() (llm.Provider, error) {
	if path := os.Getenv("JETWAY_SCRIPT"); path != "" {
		return script.Load(path)
	}
	if key := os.Getenv("ANTHROPIC_API_KEY"); key != "" {
		p, err := anthropic.New(anthropic.Config{
			APIKey:     key,
			BaseURL:    os.Getenv("ANTHROPIC_BASE_URL"),
			Model:      envOr("ANTHROPIC_MODEL", DefaultAnthropicModel),
			HTTPClient: HTTPClient(),
		})
		if err != nil {
			return nil, fmt.Errorf("providers: %w", err)
		}
		return p, nil
	}
	key, base := os.Getenv("OPENAI_API_KEY"), os.Getenv("OPENAI_BASE_URL")
	if key != "" || base != "" {
		model := os.Getenv("OPENAI_MODEL")
		if model == "" {
			if base != "" {
				return nil, errors.New("providers: OPENAI_BASE_URL is set but OPENAI_MODEL is not: name the model the server serves")
			}
			model = DefaultOpenAIModel
		}
		if key == "" {
			key = "none" // local servers (vLLM, Ollama, llama.cpp) take any key
		}
		p, err := openai.New(openai.Config{APIKey: key, BaseURL: base, Model: model, HTTPClient: HTTPClient()})
		if err != nil {
			return nil, fmt.Errorf("providers: %w", err)
		}
		return p, nil
	}
	return script.Demo()
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
