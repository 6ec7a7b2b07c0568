package main

import (
	"context"

	"github.com/nats-io/nats.go"

	"jetway/pkg/agent/tool"
	"jetway/pkg/handover"
	"jetway/pkg/llm"
	"jetway/pkg/llm/providers"
	"jetway/services/runner"
)

// modelFromEnv picks the model provider from the environment:
// ANTHROPIC_API_KEY, else OPENAI_API_KEY/OPENAI_BASE_URL, else the
// deterministic demo script (announced as such).
func modelFromEnv() (llm.Provider, error) { return providers.FromEnv() }

// runnerTools are the tools a run gets; nil until the jobs service is wired.
func runnerTools(nc *nats.Conn) func(runner.SessionRef) []tool.Tool { return nil }

// runnerChildState asks the jobs service about a run's processes; nil until
// the jobs service is wired.
func runnerChildState(nc *nats.Conn) func(context.Context, runner.SessionRef) handover.ChildState {
	return nil
}
