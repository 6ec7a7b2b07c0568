// Package permission decides whether the agent may run a tool call: a mode
// (default, accept-all, plan, deny), allow and deny rules on tool names and
// arguments such as `shell(git *)`, and a CanUseTool callback for what the
// rules leave open.
package permission

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Mode is the overall permission policy of a run.
type Mode string

const (
	// Default runs read-only calls and calls an allow rule matches; anything
	// else is asked of CanUseTool, and denied when there is no one to ask.
	Default Mode = "default"
	// AcceptAll runs every call no deny rule matches.
	AcceptAll Mode = "accept_all"
	// Bypass is another name for AcceptAll.
	Bypass Mode = "bypass"
	// Plan runs read-only calls only: the agent may look, not change.
	Plan Mode = "plan"
	// Deny runs nothing.
	Deny Mode = "deny"
)

// ParseMode reads a mode name; "" is Default.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return Default, nil
	case Default, AcceptAll, Bypass, Plan, Deny:
		return m, nil
	case "read_only", "read-only":
		return Plan, nil
	}
	return "", fmt.Errorf("unknown permission mode %q (want default, accept_all, bypass, plan or deny)", s)
}

// Decision is the verdict on one call.
type Decision struct {
	Allow bool
	// Reason is what the model reads when the call is denied.
	Reason string
	// Input, when set on an allowed call, replaces the call's input.
	Input json.RawMessage
}

// CanUseTool is asked about a call the mode and rules leave open (a
// non-read-only call in Default mode with no matching rule).
type CanUseTool func(ctx context.Context, name string, input json.RawMessage) (Decision, error)

// Policy is a run's permission configuration.
type Policy struct {
	Mode Mode
	// ModeFunc, when set, is asked for the mode on every call instead of
	// Mode, so a host can switch modes during a run.
	ModeFunc func() Mode
	// Allow and Deny are rules: a tool name (`read_file`), a name with an
	// argument pattern (`shell(git *)`, where * matches any run of
	// characters), or `*` for every tool. Deny wins over everything.
	Allow      []string
	Deny       []string
	CanUseTool CanUseTool
}

// Check decides whether name may run with input; readOnly is the tool's own
// claim that this call only reads.
func (p Policy) Check(ctx context.Context, name string, input json.RawMessage, readOnly bool) Decision {
	for _, r := range p.Deny {
		if Match(r, name, input) {
			return Decision{Reason: fmt.Sprintf("permission denied: %s is denied by the rule %q", name, r)}
		}
	}
	mode := p.Mode
	if p.ModeFunc != nil {
		mode = p.ModeFunc()
	}
	switch mode {
	case Deny:
		return Decision{Reason: fmt.Sprintf("permission denied: tools are switched off in this session (%s not run)", name)}
	case Plan:
		if readOnly {
			return Decision{Allow: true}
		}
		return Decision{Reason: fmt.Sprintf("permission denied: plan mode runs only read-only tools; %s changes things", name)}
	case AcceptAll, Bypass:
		return Decision{Allow: true}
	}
	if readOnly {
		return Decision{Allow: true}
	}
	for _, r := range p.Allow {
		if Match(r, name, input) {
			return Decision{Allow: true}
		}
	}
	if p.CanUseTool == nil {
		return Decision{Reason: fmt.Sprintf("permission denied: %s needs permission and no rule allows it", name)}
	}
	d, err := p.CanUseTool(ctx, name, input)
	if err != nil {
		return Decision{Reason: fmt.Sprintf("permission denied: asking whether %s may run failed: %v", name, err)}
	}
	if !d.Allow && d.Reason == "" {
		d.Reason = fmt.Sprintf("permission denied: %s was refused", name)
	}
	return d
}

// Match reports whether rule covers a call of name with input. A rule's
// argument pattern is matched against the call's main argument: the first
// of command, path, file_path, url, pattern that is a string, else the whole
// input JSON.
func Match(rule, name string, input json.RawMessage) bool {
	rule = strings.TrimSpace(rule)
	tool, pattern, hasArg := strings.Cut(rule, "(")
	if !hasArg {
		return glob(rule, name)
	}
	if !strings.HasSuffix(pattern, ")") || !glob(tool, name) {
		return false
	}
	return glob(strings.TrimSuffix(pattern, ")"), mainArgument(input))
}

func mainArgument(input json.RawMessage) string {
	var obj map[string]any
	if json.Unmarshal(input, &obj) == nil {
		for _, k := range []string{"command", "path", "file_path", "url", "pattern"} {
			if s, ok := obj[k].(string); ok {
				return s
			}
		}
	}
	return string(input)
}

// glob matches s against a pattern where * is any run of characters.
func glob(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, last)
}
