package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v4"
)

// ParseAgentFile reads an agent profile file, YAML or JSON (JSON is YAML),
// as docs/PROFILES.md describes it. It is strict: a field the profile does
// not have is an error naming it, as the dispatcher would refuse it, rather
// than a setting that quietly takes the runner's default.
func ParseAgentFile(data []byte) (Agent, error) {
	var tree any
	if err := yaml.Unmarshal(data, &tree); err != nil {
		return Agent{}, fmt.Errorf("agent file: %w", err)
	}
	if tree == nil {
		return Agent{}, errors.New(`agent file: empty; it needs at least "instructions"`)
	}
	if _, ok := tree.(map[string]any); !ok {
		return Agent{}, fmt.Errorf("agent file: the top level is a %T, want a mapping of the profile's fields", tree)
	}
	js, err := json.Marshal(tree)
	if err != nil {
		return Agent{}, fmt.Errorf("agent file: %w", err)
	}
	var a Agent
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return Agent{}, fmt.Errorf("agent file: %s: want a %s, not a %s", te.Field, te.Type, te.Value)
		}
		return Agent{}, fmt.Errorf("agent file: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return a, nil
}
