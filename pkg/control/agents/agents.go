// Package agents is the agent profiles: per tenant, a named description of
// what a session's agent is — instructions, model, tools, limits — stored
// in the agents bucket under <tenant>.<name>, whose revision is the
// profile's version. The dispatcher writes profiles (tenant admins manage
// them); runners read the version a run starts with, and a recovered run
// reads the same version again, which is why the bucket keeps history.
//
// It is its own small package so the dispatcher, the runner and the CLI
// share one validation and one storage without importing each other.
package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/tasks/proctree/confspec"
)

// DefaultName is the profile every tenant has: when not stored it is the
// runner as configured (no instructions, its model, all its tools, its
// limits). A tenant may store its own default to change that.
const DefaultName = "default"

// DefaultInstructionFile is the workspace file sent after the instructions
// when a profile names none (the AGENTS.md convention).
const DefaultInstructionFile = "AGENTS.md"

// Model providers a profile may name.
const (
	ProviderAnthropic = "anthropic"
	ProviderOpenAI    = "openai"
	ProviderScript    = "script"
)

// Size bounds of a profile's fields: a profile is a KV value and a system
// prompt, not a document store.
const (
	MaxInstructions     = 64 << 10
	MaxDescription      = 1 << 10
	MaxListItems        = 64
	MaxInstructionFiles = 8
	minContextWindow    = 1000
)

// FieldError says which field of a profile is wrong and why.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("agent profile: %s: %s", e.Field, e.Reason) }

// ErrNotFound means the tenant has no profile of that name (or no such
// version of it).
var ErrNotFound = errors.New("agent profile not found")

var (
	namePattern     = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	toolNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.*-]{1,128}$`)
)

// ValidName reports whether name may name a profile: 1–64 of
// [A-Za-z0-9_-], like a session, so it is safe in a KV key.
func ValidName(name string) bool { return namePattern.MatchString(name) }

// Default is the implicit default profile: empty fields all through, so a
// run bound to it is configured exactly as the runner is.
func Default() Profile { return Profile{Name: DefaultName} }

// Validate checks p as stored under name and returns the first wrong field
// as a *FieldError.
func Validate(name string, p Profile) error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case !ValidName(name):
		return bad("name", "%q is not 1–64 of A-Z a-z 0-9 _ -", name)
	case strings.TrimSpace(p.Instructions) == "" && name != DefaultName:
		return bad("instructions", "required: the agent's system prompt")
	case len(p.Instructions) > MaxInstructions:
		return bad("instructions", "%d bytes, at most %d", len(p.Instructions), MaxInstructions)
	case len(p.Description) > MaxDescription:
		return bad("description", "%d bytes, at most %d", len(p.Description), MaxDescription)
	case p.ContextWindow < 0 || (p.ContextWindow > 0 && p.ContextWindow < minContextWindow):
		return bad("context_window", "%d: 0 (the runner's) or at least %d tokens", p.ContextWindow, minContextWindow)
	case !confspec.ValidNetwork(p.Network):
		return bad("network", "%q: one of none (the default), outbound, all", p.Network)
	}
	if err := validateRecovery(p.Recovery); err != nil {
		return err
	}
	for _, check := range []func(Profile) error{validateModel, validateTools, validateApprovals, validateLimits, validateFiles, validateMCP} {
		if err := check(p); err != nil {
			return err
		}
	}
	return nil
}

func validateRecovery(r string) error {
	switch r {
	case "", "automatic", "manual", "never":
		return nil
	}
	return &FieldError{Field: "recovery", Reason: fmt.Sprintf("%q: one of automatic, manual, never", r)}
}

func validateModel(p Profile) error {
	m := p.Model
	switch m.Provider {
	case "":
		if m.Name != "" || m.Endpoint != "" {
			return &FieldError{Field: "model.provider", Reason: "required when model.name or model.endpoint is set: anthropic, openai or script"}
		}
	case ProviderAnthropic, ProviderOpenAI, ProviderScript:
	default:
		return &FieldError{Field: "model.provider", Reason: fmt.Sprintf("%q: one of anthropic, openai, script", m.Provider)}
	}
	if len(m.Name) > 256 {
		return &FieldError{Field: "model.name", Reason: "longer than 256 bytes"}
	}
	if m.Endpoint != "" && !ValidName(m.Endpoint) {
		return &FieldError{Field: "model.endpoint", Reason: fmt.Sprintf("%q is not 1–64 of A-Z a-z 0-9 _ - (it names runner-side configuration)", m.Endpoint)}
	}
	return nil
}

func validateTools(p Profile) error {
	if len(p.Tools.Allow) > MaxListItems || len(p.Tools.Deny) > MaxListItems || len(p.Tools.Ask) > MaxListItems {
		return &FieldError{Field: "tools", Reason: fmt.Sprintf("at most %d entries in allow, in deny and in ask", MaxListItems)}
	}
	for i, name := range p.Tools.Allow {
		if !toolNamePattern.MatchString(name) {
			return &FieldError{Field: fmt.Sprintf("tools.allow[%d]", i), Reason: fmt.Sprintf("%q is not a tool name (A-Z a-z 0-9 _ . - or *)", name)}
		}
	}
	for i, rule := range p.Tools.Deny {
		if err := validateRule(rule); err != "" {
			return &FieldError{Field: fmt.Sprintf("tools.deny[%d]", i), Reason: fmt.Sprintf("%q: %s", rule, err)}
		}
	}
	for i, rule := range p.Tools.Ask {
		if err := validateRule(rule); err != "" {
			return &FieldError{Field: fmt.Sprintf("tools.ask[%d]", i), Reason: fmt.Sprintf("%q: %s", rule, err)}
		}
	}
	return nil
}

// Who may decide a profile's approvals (Profile.Approvers).
const (
	ApproversTenant = "tenant"
	ApproversAdmins = "admins"
)

// Approval timeouts: the default a profile that sets none gets, and the
// bounds of one it sets (shorter is a race with the person, longer a
// forgotten session).
const (
	DefaultApprovalTimeout = 24 * time.Hour
	MinApprovalTimeout     = time.Second
	MaxApprovalTimeout     = 30 * 24 * time.Hour
)

func validateApprovals(p Profile) error {
	switch p.Approvers {
	case "", ApproversTenant, ApproversAdmins:
	default:
		return &FieldError{Field: "approvers", Reason: fmt.Sprintf("%q: one of tenant (the default), admins", p.Approvers)}
	}
	if p.ApprovalTimeout == "" {
		return nil
	}
	d, err := time.ParseDuration(p.ApprovalTimeout)
	if err != nil || d < MinApprovalTimeout || d > MaxApprovalTimeout {
		return &FieldError{Field: "approval_timeout", Reason: fmt.Sprintf("%q is not a duration from %s to %s, such as 30m or 24h", p.ApprovalTimeout, MinApprovalTimeout, MaxApprovalTimeout)}
	}
	return nil
}

// ApprovalTimeout is how long p's approvals wait, the default filled in.
func ApprovalTimeout(p Profile) time.Duration {
	if d, err := time.ParseDuration(p.ApprovalTimeout); err == nil && d > 0 {
		return d
	}
	return DefaultApprovalTimeout
}

// validateRule checks a permission rule's shape: a tool name, optionally
// with a pattern in parentheses ("shell(rm *)").
func validateRule(rule string) string {
	tool, rest, hasArg := strings.Cut(strings.TrimSpace(rule), "(")
	switch {
	case !toolNamePattern.MatchString(tool):
		return "a rule is a tool name, optionally with a pattern: shell(rm *)"
	case hasArg && (!strings.HasSuffix(rest, ")") || len(rest) < 2):
		return "the pattern must be closed with ) and not empty"
	case len(rule) > 512:
		return "longer than 512 bytes"
	}
	return ""
}

// Sub-agent limits: the defaults a profile that sets none gets, and the
// most a profile may set (a deeper or wider tree is a runaway, not a plan).
const (
	DefaultSubagentDepth = 2
	MaxSubagentDepth     = 8
	DefaultSubagents     = 4
	MaxSubagents         = 32
)

// SubagentLimits are prof's depth and fan-out limits, defaults filled in.
func SubagentLimits(prof Profile) (depth, fanOut int) {
	depth, fanOut = prof.Limits.MaxSubagentDepth, prof.Limits.MaxSubagents
	if depth == 0 {
		depth = DefaultSubagentDepth
	}
	if fanOut == 0 {
		fanOut = DefaultSubagents
	}
	return depth, fanOut
}

func validateLimits(p Profile) error {
	l := p.Limits
	switch {
	case l.MaxTurns < 0:
		return &FieldError{Field: "limits.max_turns", Reason: "negative"}
	case l.Fuel < 0:
		return &FieldError{Field: "limits.fuel", Reason: "negative"}
	case l.RunsPerHour < 0:
		return &FieldError{Field: "limits.runs_per_hour", Reason: "negative"}
	case l.MaxSubagentDepth < 0 || l.MaxSubagentDepth > MaxSubagentDepth:
		return &FieldError{Field: "limits.max_subagent_depth", Reason: fmt.Sprintf("%d is not between 0 (the default, %d) and %d", l.MaxSubagentDepth, DefaultSubagentDepth, MaxSubagentDepth)}
	case l.MaxSubagents < 0 || l.MaxSubagents > MaxSubagents:
		return &FieldError{Field: "limits.max_subagents", Reason: fmt.Sprintf("%d is not between 0 (the default, %d) and %d", l.MaxSubagents, DefaultSubagents, MaxSubagents)}
	}
	if l.MaxDuration != "" {
		d, err := time.ParseDuration(l.MaxDuration)
		if err != nil || d <= 0 {
			return &FieldError{Field: "limits.max_duration", Reason: fmt.Sprintf("%q is not a positive duration such as 30m or 2h", l.MaxDuration)}
		}
	}
	return nil
}

func validateFiles(p Profile) error {
	if len(p.InstructionFiles) > MaxInstructionFiles {
		return &FieldError{Field: "instruction_files", Reason: fmt.Sprintf("at most %d files", MaxInstructionFiles)}
	}
	for i, f := range p.InstructionFiles {
		if f == "" || strings.HasPrefix(f, "/") || strings.Contains(f, "\\") || len(f) > 256 || escapes(f) {
			return &FieldError{Field: fmt.Sprintf("instruction_files[%d]", i), Reason: fmt.Sprintf("%q is not a path inside the workspace, relative to its root", f)}
		}
	}
	return nil
}

func escapes(path string) bool {
	for part := range strings.SplitSeq(path, "/") {
		if part == ".." {
			return true
		}
	}
	return false
}

// InstructionFiles are the workspace files a run of p reads: the default
// AGENTS.md unless p says otherwise (an empty list: none).
func InstructionFiles(p Profile) []string {
	if p.InstructionFiles == nil {
		return []string{DefaultInstructionFile}
	}
	return p.InstructionFiles
}

// MaxDuration is p's max run duration (0: the runner's). Validate has
// checked it parses.
func MaxDuration(p Profile) time.Duration {
	d, _ := time.ParseDuration(p.Limits.MaxDuration)
	return d
}

// Key is a profile's key in the agents bucket.
func Key(tenant, name string) string { return tenant + "." + name }

// Get reads the tenant's current profile name. The default profile always
// exists: not stored, it is Default().
func Get(ctx context.Context, kv jetstream.KeyValue, tenant, name string) (Profile, error) {
	e, err := kv.Get(ctx, Key(tenant, name))
	return fromEntry(tenant, name, e, err)
}

// GetVersion reads the profile as it was at version (a KV revision), so a
// recovered or steered run goes on as it began. Version 0 is the implicit
// default.
func GetVersion(ctx context.Context, kv jetstream.KeyValue, tenant, name string, version uint64) (Profile, error) {
	if version == 0 {
		if name == DefaultName {
			return Default(), nil
		}
		return Profile{}, fmt.Errorf("%w: %s/%s has no version 0", ErrNotFound, tenant, name)
	}
	e, err := kv.GetRevision(ctx, Key(tenant, name), version)
	return fromEntry(tenant, name, e, err)
}

func fromEntry(tenant, name string, e jetstream.KeyValueEntry, err error) (Profile, error) {
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		if name == DefaultName {
			return Default(), nil
		}
		return Profile{}, fmt.Errorf("%w: %s/%s", ErrNotFound, tenant, name)
	case err != nil:
		return Profile{}, fmt.Errorf("agent profile %s/%s: %w", tenant, name, err)
	case e.Operation() != jetstream.KeyValuePut:
		return fromEntry(tenant, name, nil, jetstream.ErrKeyDeleted)
	}
	var p Profile
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return Profile{}, fmt.Errorf("agent profile %s/%s: unreadable: %w", tenant, name, err)
	}
	p.Name, p.Version, p.Updated = name, e.Revision(), e.Created()
	return p, nil
}

// Put validates p and stores it as the tenant's profile name, returning
// it with its new version. A profile change applies from the next run.
func Put(ctx context.Context, kv jetstream.KeyValue, tenant, name string, p Profile) (Profile, error) {
	if err := Validate(name, p); err != nil {
		return Profile{}, err
	}
	p.Name, p.Version, p.Updated = name, 0, time.Time{}
	data, err := json.Marshal(p)
	if err != nil {
		return Profile{}, err
	}
	rev, err := kv.Put(ctx, Key(tenant, name), data)
	if err != nil {
		return Profile{}, fmt.Errorf("store agent profile %s/%s: %w", tenant, name, err)
	}
	p.Version, p.Updated = rev, time.Now().UTC()
	return p, nil
}

// Delete removes the tenant's profile name; its old versions stay readable
// for runs that started with them. Deleting the default profile brings the
// implicit one back. It reports whether there was a profile to delete.
func Delete(ctx context.Context, kv jetstream.KeyValue, tenant, name string) (bool, error) {
	if _, err := kv.Get(ctx, Key(tenant, name)); err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return false, nil
		}
		return false, fmt.Errorf("agent profile %s/%s: %w", tenant, name, err)
	}
	if err := kv.Delete(ctx, Key(tenant, name)); err != nil {
		return false, fmt.Errorf("delete agent profile %s/%s: %w", tenant, name, err)
	}
	return true, nil
}

// List returns the tenant's profiles sorted by name, the default one
// always among them.
func List(ctx context.Context, kv jetstream.KeyValue, tenant string) ([]Profile, error) {
	out := []Profile{}
	hasDefault := false
	lister, err := kv.ListKeysFiltered(ctx, tenant+".*")
	switch {
	case errors.Is(err, jetstream.ErrNoKeysFound):
	case err != nil:
		return nil, fmt.Errorf("list agent profiles: %w", err)
	default:
		for key := range lister.Keys() {
			name := strings.TrimPrefix(key, tenant+".")
			p, err := Get(ctx, kv, tenant, name)
			if errors.Is(err, ErrNotFound) {
				continue // deleted since listed
			}
			if err != nil {
				return nil, err
			}
			hasDefault = hasDefault || name == DefaultName
			out = append(out, p)
		}
	}
	if !hasDefault {
		out = append(out, Default())
	}
	slices.SortFunc(out, func(a, b Profile) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
