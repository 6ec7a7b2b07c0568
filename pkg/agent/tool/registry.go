package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"sync"

	"jetway/pkg/llm"
)

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Registry holds the tools of a run by name. It is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	tools   map[string]Tool
	schemas map[string]schema
	order   []string
}

// NewRegistry returns a registry holding ts.
func NewRegistry(ts ...Tool) (*Registry, error) {
	r := &Registry{tools: map[string]Tool{}, schemas: map[string]schema{}}
	for _, t := range ts {
		if err := r.Register(t); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Register adds t. Its name must be 1–64 of [A-Za-z0-9_-] (what every
// provider accepts), unique, and its schema a JSON object schema.
func (r *Registry) Register(t Tool) error {
	spec := t.Spec()
	if !validName.MatchString(spec.Name) {
		return fmt.Errorf("register tool %q: name must be 1-64 of [A-Za-z0-9_-]", spec.Name)
	}
	var s schema
	if err := json.Unmarshal(spec.InputSchema, &s); err != nil {
		return fmt.Errorf("register tool %q: input schema: %w", spec.Name, err)
	}
	if s.Type != "object" {
		return fmt.Errorf("register tool %q: input schema type is %q, want \"object\"", spec.Name, s.Type)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.tools[spec.Name]; dup {
		return fmt.Errorf("register tool %q: already registered", spec.Name)
	}
	r.tools[spec.Name] = t
	r.schemas[spec.Name] = s
	r.order = append(r.order, spec.Name)
	return nil
}

// Unregister removes the tool called name, reporting whether it was
// there: a tool set that changes during a run (an MCP server's
// tools/list_changed) is offered as it is now from the next model call.
func (r *Registry) Unregister(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tools[name]; !ok {
		return false
	}
	delete(r.tools, name)
	delete(r.schemas, name)
	r.order = slices.DeleteFunc(r.order, func(n string) bool { return n == name })
	return true
}

// Get returns the tool called name.
func (r *Registry) Get(name string) (Tool, bool) {
	if r == nil {
		return nil, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.tools[name]
	return t, ok
}

// Names returns the registered names in registration order.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]string(nil), r.order...)
}

// Specs returns the specs offered to the model, in registration order,
// leaving out the tools hide names (deferred or disabled ones).
func (r *Registry) Specs(hide func(name string) bool) []llm.ToolSpec {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []llm.ToolSpec
	for _, n := range r.order {
		if hide != nil && hide(n) {
			continue
		}
		out = append(out, r.tools[n].Spec())
	}
	return out
}

// Validate checks input against the tool's schema: an object, with every
// required property, each declared property of its declared type. It is a
// guard against malformed calls, not a full JSON Schema validator.
func (r *Registry) Validate(name string, input json.RawMessage) error {
	r.mu.RLock()
	s, ok := r.schemas[name]
	r.mu.RUnlock()
	if !ok {
		return fmt.Errorf("unknown tool %q", name)
	}
	return s.validate(input)
}

type schema struct {
	Type       string                     `json:"type"`
	Properties map[string]json.RawMessage `json:"properties"`
	Required   []string                   `json:"required"`
}

func (s schema) validate(input json.RawMessage) error {
	input = bytes.TrimSpace(input)
	if len(input) == 0 || bytes.Equal(input, []byte("null")) {
		input = []byte("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(input, &obj); err != nil {
		return fmt.Errorf("input is not a JSON object: %w", err)
	}
	var missing []string
	for _, k := range s.Required {
		if _, ok := obj[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing required %q", missing)
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		raw, declared := s.Properties[k]
		if !declared {
			continue
		}
		var p struct {
			Type any `json:"type"`
		}
		if json.Unmarshal(raw, &p) != nil {
			continue
		}
		want, _ := p.Type.(string)
		if want == "" {
			continue
		}
		if err := checkType(want, obj[k]); err != nil {
			return fmt.Errorf("property %q: %w", k, err)
		}
	}
	return nil
}

var errType = errors.New("wrong type")

func checkType(want string, v json.RawMessage) error {
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		return err
	}
	ok := false
	switch want {
	case "string":
		_, ok = x.(string)
	case "number":
		_, ok = x.(float64)
	case "integer":
		f, isNum := x.(float64)
		ok = isNum && f == math.Trunc(f)
	case "boolean":
		_, ok = x.(bool)
	case "array":
		_, ok = x.([]any)
	case "object":
		_, ok = x.(map[string]any)
	case "null":
		ok = x == nil
	default:
		ok = true
	}
	if !ok {
		return fmt.Errorf("%w: want %s, got %s", errType, want, string(v))
	}
	return nil
}
