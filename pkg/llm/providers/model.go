package providers

import (
	"fmt"
	"strings"

	"jetway/pkg/llm"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/openai"
	"jetway/pkg/llm/script"
)

// Model names a model the way an agent profile does: a provider kind, a
// model name and an endpoint name. It carries no key and no URL: those
// are the runner's configuration, so a profile (which tenants write) can
// point a run only at what the operator configured.
type Model struct {
	Provider string // anthropic, openai or script
	Name     string
	Endpoint string
}

// Endpoint variables: an endpoint NAME is configured on the runner by
// JETWAY_ENDPOINT_<NAME>_BASE_URL and JETWAY_ENDPOINT_<NAME>_KEY_ENV, the
// *name* of the variable that holds its key (NAME upper-cased, - as _), or
// for the script provider JETWAY_ENDPOINT_<NAME>_SCRIPT, a script file.
const endpointPrefix = "JETWAY_ENDPOINT_"

// EndpointVar is the variable that configures part ("BASE_URL",
// "KEY_ENV", "SCRIPT") of the endpoint name.
func EndpointVar(name, part string) string {
	return endpointPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_" + part
}

// ForModel builds the provider m names, reading its endpoint and key from
// getenv (os.Getenv in a runner). Without an endpoint a provider takes its
// usual variables (ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL, OPENAI_API_KEY
// and OPENAI_BASE_URL); the script provider is the built-in demo.
func ForModel(m Model, getenv func(string) string) (llm.Provider, error) {
	base, key, err := endpoint(m, getenv)
	if err != nil {
		return nil, err
	}
	switch m.Provider {
	case "anthropic":
		if key == "" {
			return nil, fmt.Errorf("providers: model %s: no key (%s)", describe(m), keyWhere(m, "ANTHROPIC_API_KEY"))
		}
		name := m.Name
		if name == "" {
			name = DefaultAnthropicModel
		}
		return wrap(anthropic.New(anthropic.Config{APIKey: key, BaseURL: base, Model: name, HTTPClient: HTTPClient()}))
	case "openai":
		if key == "" && base == "" {
			return nil, fmt.Errorf("providers: model %s: no key (%s)", describe(m), keyWhere(m, "OPENAI_API_KEY"))
		}
		name := m.Name
		if name == "" && base != "" {
			return nil, fmt.Errorf("providers: model %s: name the model the server at its base URL serves (model.name)", describe(m))
		}
		if name == "" {
			name = DefaultOpenAIModel
		}
		if key == "" {
			key = "none" // local servers take any key
		}
		return wrap(openai.New(openai.Config{APIKey: key, BaseURL: base, Model: name, HTTPClient: HTTPClient()}))
	case "script":
		if m.Endpoint != "" {
			return script.Load(getenv(EndpointVar(m.Endpoint, "SCRIPT")))
		}
		return script.Demo()
	}
	return nil, fmt.Errorf("providers: model %s: unknown provider %q (anthropic, openai or script)", describe(m), m.Provider)
}

// endpoint reads m's base URL and key. A named endpoint must be
// configured: a profile never falls back to somewhere its author did not
// mean.
func endpoint(m Model, getenv func(string) string) (base, key string, err error) {
	if m.Endpoint == "" {
		switch m.Provider {
		case "anthropic":
			return getenv("ANTHROPIC_BASE_URL"), getenv("ANTHROPIC_API_KEY"), nil
		case "openai":
			return getenv("OPENAI_BASE_URL"), getenv("OPENAI_API_KEY"), nil
		}
		return "", "", nil
	}
	if m.Provider == "script" {
		if getenv(EndpointVar(m.Endpoint, "SCRIPT")) == "" {
			return "", "", fmt.Errorf("providers: model %s: endpoint %q is not configured on this runner (%s)", describe(m), m.Endpoint, EndpointVar(m.Endpoint, "SCRIPT"))
		}
		return "", "", nil
	}
	base = getenv(EndpointVar(m.Endpoint, "BASE_URL"))
	if base == "" {
		return "", "", fmt.Errorf("providers: model %s: endpoint %q is not configured on this runner (%s)", describe(m), m.Endpoint, EndpointVar(m.Endpoint, "BASE_URL"))
	}
	if v := getenv(EndpointVar(m.Endpoint, "KEY_ENV")); v != "" {
		key = getenv(v)
	}
	return base, key, nil
}

func keyWhere(m Model, def string) string {
	if m.Endpoint != "" {
		return "the variable " + EndpointVar(m.Endpoint, "KEY_ENV") + " names is empty or unset"
	}
	return def + " is not set"
}

func describe(m Model) string {
	s := m.Provider
	if m.Name != "" {
		s += " " + m.Name
	}
	if m.Endpoint != "" {
		s += " at endpoint " + m.Endpoint
	}
	return s
}

func wrap[P llm.Provider](p P, err error) (llm.Provider, error) {
	if err != nil {
		return nil, fmt.Errorf("providers: %w", err)
	}
	return p, nil
}

// Served lists the models ForModel can build from this environment
// (environ as os.Environ gives it, getenv reading it): each provider
// without an endpoint whose usual variables are set, the script demo, and
// each provider on each endpoint JETWAY_ENDPOINT_<NAME>_* configures, the
// endpoint spelt as its variables spell it. A runner advertises them in
// its heartbeat (agents.ServingKey), so the dispatcher can refuse a send
// whose model no runner can call. It builds nothing over the network.
func Served(environ []string, getenv func(string) string) []Model {
	endpoints := map[string]bool{"": true}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(name, endpointPrefix)
		if !ok {
			continue
		}
		for _, part := range []string{"_BASE_URL", "_SCRIPT"} {
			if ep, ok := strings.CutSuffix(rest, part); ok && ep != "" {
				endpoints[ep] = true
			}
		}
	}
	var out []Model
	for ep := range endpoints {
		for _, prov := range []string{"anthropic", "openai", "script"} {
			m := Model{Provider: prov, Name: "probe", Endpoint: ep}
			if _, err := ForModel(m, getenv); err == nil {
				out = append(out, Model{Provider: prov, Endpoint: ep})
			}
		}
	}
	return out
}
