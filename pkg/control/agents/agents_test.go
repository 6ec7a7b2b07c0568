package agents_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/control/agents"
	"jetway/pkg/dispatcherapi"
)

// bucket is the agents bucket as provisioning makes it, on a real server.
func bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	s := bustest.StartServer(t)
	_, js := bustest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, kc := range bus.BucketConfigs(bus.ProvisionConfig{}) {
		if kc.Bucket == bus.BucketAgents {
			kv, err := js.CreateKeyValue(ctx, kc)
			if err != nil {
				t.Fatal(err)
			}
			return kv
		}
	}
	t.Fatalf("provisioning has no bucket %s", bus.BucketAgents)
	return nil
}

func TestThe_default_profile_exists_when_none_is_stored(t *testing.T) {
	kv := bucket(t)
	ctx := context.Background()
	p, err := agents.Get(ctx, kv, "acme", agents.DefaultName)
	if err != nil || p.Name != "default" || p.Version != 0 || p.Instructions != "" {
		t.Fatalf("default = %+v, %v", p, err)
	}
	list, err := agents.List(ctx, kv, "acme")
	if err != nil || len(list) != 1 || list[0].Name != "default" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if got := agents.InstructionFiles(p); len(got) != 1 || got[0] != "AGENTS.md" {
		t.Fatalf("default instruction files = %q", got)
	}
	if got := agents.InstructionFiles(agents.Profile{InstructionFiles: []string{}}); len(got) != 0 {
		t.Fatalf("an empty list must mean no files, got %q", got)
	}
}

func TestAn_update_is_a_new_version_and_the_old_one_stays_readable(t *testing.T) {
	kv := bucket(t)
	ctx := context.Background()
	v1, err := agents.Put(ctx, kv, "acme", "reviewer", agents.Profile{Instructions: "review v1", Limits: dispatcherapi.AgentLimits{MaxDuration: "30m"}})
	if err != nil {
		t.Fatal(err)
	}
	v2, err := agents.Put(ctx, kv, "acme", "reviewer", agents.Profile{Instructions: "review v2"})
	if err != nil {
		t.Fatal(err)
	}
	if v1.Version == 0 || v2.Version <= v1.Version {
		t.Fatalf("versions %d then %d", v1.Version, v2.Version)
	}
	cur, err := agents.Get(ctx, kv, "acme", "reviewer")
	if err != nil || cur.Instructions != "review v2" || cur.Version != v2.Version || cur.Name != "reviewer" {
		t.Fatalf("current = %+v, %v", cur, err)
	}
	old, err := agents.GetVersion(ctx, kv, "acme", "reviewer", v1.Version)
	if err != nil || old.Instructions != "review v1" || agents.MaxDuration(old) != 30*time.Minute {
		t.Fatalf("version %d = %+v, %v", v1.Version, old, err)
	}

	// Deleted, it is gone for new runs, and its versions stay for old ones.
	if ok, err := agents.Delete(ctx, kv, "acme", "reviewer"); !ok || err != nil {
		t.Fatalf("delete = %v, %v", ok, err)
	}
	if _, err := agents.Get(ctx, kv, "acme", "reviewer"); !errors.Is(err, agents.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if old, err := agents.GetVersion(ctx, kv, "acme", "reviewer", v2.Version); err != nil || old.Instructions != "review v2" {
		t.Fatalf("version %d after delete = %+v, %v", v2.Version, old, err)
	}
	if ok, err := agents.Delete(ctx, kv, "acme", "reviewer"); ok || err != nil {
		t.Fatalf("second delete = %v, %v", ok, err)
	}
}

func TestProfiles_belong_to_their_tenant(t *testing.T) {
	kv := bucket(t)
	ctx := context.Background()
	if _, err := agents.Put(ctx, kv, "acme", "reviewer", agents.Profile{Instructions: "acme's"}); err != nil {
		t.Fatal(err)
	}
	if _, err := agents.Put(ctx, kv, "acme", "default", agents.Profile{Instructions: "acme's default"}); err != nil {
		t.Fatal(err)
	}
	if _, err := agents.Get(ctx, kv, "globex", "reviewer"); !errors.Is(err, agents.ErrNotFound) {
		t.Fatalf("globex reads acme's profile: %v", err)
	}
	list, err := agents.List(ctx, kv, "acme")
	if err != nil || len(list) != 2 || list[0].Name != "default" || list[0].Instructions != "acme's default" || list[1].Name != "reviewer" {
		t.Fatalf("acme's list = %+v, %v", list, err)
	}
	list, err = agents.List(ctx, kv, "globex")
	if err != nil || len(list) != 1 || list[0].Version != 0 {
		t.Fatalf("globex's list = %+v, %v", list, err)
	}
}

func TestA_bad_profile_is_refused_naming_its_field_and_nothing_is_stored(t *testing.T) {
	kv := bucket(t)
	ctx := context.Background()
	ok := agents.Profile{Instructions: "x"}
	with := func(f func(p *agents.Profile)) agents.Profile { p := ok; f(&p); return p }
	for _, c := range []struct {
		name, field string
		p           agents.Profile
	}{
		{"bad name", "name", ok},
		{"reviewer", "instructions", agents.Profile{}},
		{"reviewer", "model.provider", with(func(p *agents.Profile) { p.Model.Provider = "gemini" })},
		{"reviewer", "model.provider", with(func(p *agents.Profile) { p.Model.Name = "gpt-5" })},
		{"reviewer", "model.endpoint", with(func(p *agents.Profile) { p.Model = dispatcherapi.AgentModel{Provider: "openai", Endpoint: "http://x"} })},
		{"reviewer", "tools.allow[1]", with(func(p *agents.Profile) { p.Tools.Allow = []string{"shell", "rm -rf"} })},
		{"reviewer", "tools.deny[0]", with(func(p *agents.Profile) { p.Tools.Deny = []string{"shell(rm *"} })},
		{"reviewer", "tools.ask[1]", with(func(p *agents.Profile) { p.Tools.Ask = []string{"shell(git push*)", "shell("} })},
		{"reviewer", "approvers", with(func(p *agents.Profile) { p.Approvers = "everyone" })},
		{"reviewer", "approval_timeout", with(func(p *agents.Profile) { p.ApprovalTimeout = "forever" })},
		{"reviewer", "approval_timeout", with(func(p *agents.Profile) { p.ApprovalTimeout = "1000h" })},
		{"reviewer", "limits.max_turns", with(func(p *agents.Profile) { p.Limits.MaxTurns = -1 })},
		{"reviewer", "limits.max_duration", with(func(p *agents.Profile) { p.Limits.MaxDuration = "soon" })},
		{"reviewer", "limits.fuel", with(func(p *agents.Profile) { p.Limits.Fuel = -5 })},
		{"reviewer", "limits.runs_per_hour", with(func(p *agents.Profile) { p.Limits.RunsPerHour = -1 })},
		{"reviewer", "limits.max_subagent_depth", with(func(p *agents.Profile) { p.Limits.MaxSubagentDepth = -1 })},
		{"reviewer", "limits.max_subagent_depth", with(func(p *agents.Profile) { p.Limits.MaxSubagentDepth = agents.MaxSubagentDepth + 1 })},
		{"reviewer", "limits.max_subagents", with(func(p *agents.Profile) { p.Limits.MaxSubagents = -2 })},
		{"reviewer", "limits.max_subagents", with(func(p *agents.Profile) { p.Limits.MaxSubagents = 1000 })},
		{"reviewer", "recovery", with(func(p *agents.Profile) { p.Recovery = "sometimes" })},
		{"reviewer", "context_window", with(func(p *agents.Profile) { p.ContextWindow = 10 })},
		{"reviewer", "instruction_files[0]", with(func(p *agents.Profile) { p.InstructionFiles = []string{"../secrets"} })},
		{"reviewer", "instruction_files[0]", with(func(p *agents.Profile) { p.InstructionFiles = []string{"/etc/passwd"} })},
		{"reviewer", "network", with(func(p *agents.Profile) { p.Network = "everything" })},
	} {
		_, err := agents.Put(ctx, kv, "acme", c.name, c.p)
		var fe *agents.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s %+v: err %v, want a field error naming %s", c.name, c.p, err, c.field)
		}
	}
	if _, err := agents.Get(ctx, kv, "acme", "reviewer"); !errors.Is(err, agents.ErrNotFound) {
		t.Fatalf("a refused profile was stored: %v", err)
	}
	full := agents.Profile{
		Instructions: "Review.", Description: "reviews",
		Model:    dispatcherapi.AgentModel{Provider: "openai", Name: "gpt-4.1", Endpoint: "local-vllm"},
		Tools:    dispatcherapi.AgentTools{Allow: []string{"shell", "read_file"}, Deny: []string{"shell(rm *)"}},
		Limits:   dispatcherapi.AgentLimits{MaxTurns: 20, MaxDuration: "2h", Fuel: 100000, RunsPerHour: 6, MaxSubagentDepth: 3, MaxSubagents: 8},
		Recovery: "manual", ContextWindow: 128000, InstructionFiles: []string{"docs/AGENTS.md"}, Network: "outbound",
	}
	if err := agents.Validate("reviewer", full); err != nil {
		t.Fatalf("a full, good profile refused: %v", err)
	}
	for _, mode := range []string{"", "none", "outbound", "all"} {
		if err := agents.Validate("reviewer", with(func(p *agents.Profile) { p.Network = mode })); err != nil {
			t.Errorf("network %q refused: %v", mode, err)
		}
	}
}

func TestSubagentLimits_fill_in_the_defaults_a_profile_leaves_out(t *testing.T) {
	if d, f := agents.SubagentLimits(agents.Profile{}); d != agents.DefaultSubagentDepth || f != agents.DefaultSubagents {
		t.Errorf("defaults: depth %d fan-out %d", d, f)
	}
	p := agents.Profile{Limits: dispatcherapi.AgentLimits{MaxSubagentDepth: 1, MaxSubagents: 7}}
	if d, f := agents.SubagentLimits(p); d != 1 || f != 7 {
		t.Errorf("set: depth %d fan-out %d", d, f)
	}
}

func TestApproval_rules_validate_and_the_timeout_defaults_to_a_day(t *testing.T) {
	p := agents.Profile{Instructions: "x", Tools: dispatcherapi.AgentTools{Ask: []string{"shell(git push*)", "mcp__tickets__*"}},
		Approvers: agents.ApproversAdmins, ApprovalTimeout: "2h"}
	if err := agents.Validate("release", p); err != nil {
		t.Fatal(err)
	}
	if got := agents.ApprovalTimeout(p); got != 2*time.Hour {
		t.Fatalf("timeout %s, want 2h", got)
	}
	if got := agents.ApprovalTimeout(agents.Profile{}); got != agents.DefaultApprovalTimeout {
		t.Fatalf("default timeout %s, want %s", got, agents.DefaultApprovalTimeout)
	}
}
