package groundstop_test

import (
	"slices"
	"testing"

	"jetway/pkg/control/groundstop"
)

func TestCovering_lists_global_tenant_own_then_each_ancestor_root_first(t *testing.T) {
	var got []string
	for _, s := range groundstop.Covering("acme", "s-a1-a2", []string{"s", "s-a1"}) {
		got = append(got, s.Name+" "+s.Key())
	}
	want := []string{"global groundstop", "tenant groundstop.acme", "session groundstop.acme.s-a1-a2",
		"ancestor groundstop.acme.s", "ancestor groundstop.acme.s-a1"}
	if !slices.Equal(got, want) {
		t.Fatalf("covering = %q, want %q", got, want)
	}
}

func TestChange_covers_a_sub_agent_through_its_root_s_switch_only_with_its_lineage(t *testing.T) {
	root := groundstop.Change{Key: "groundstop.acme.s", Tenant: "acme", Session: "s", On: true}
	if !root.Covers("acme", "s-a1", "s") {
		t.Error("the root's switch does not cover its sub-agent")
	}
	if root.Covers("acme", "s-a1") || root.Covers("globex", "s-a1", "s") {
		t.Error("the root's switch covers a session without that lineage, or another tenant's")
	}
}
