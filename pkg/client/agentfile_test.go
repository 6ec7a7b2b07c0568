package client

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"jetway/pkg/control/agents"
)

func TestAn_agent_file_reads_as_YAML_or_JSON_and_refuses_unknown_fields(t *testing.T) {
	y := "name: reviewer\ninstructions: |\n  Review the diff.\ntools:\n  allow: [read_file, shell]\n  deny: [\"shell(rm *)\"]\nlimits:\n  max_turns: 20\n  max_duration: 30m\ninstruction_files: []\n"
	a, err := ParseAgentFile([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "reviewer" || a.Instructions != "Review the diff.\n" || len(a.Tools.Allow) != 2 || a.Tools.Deny[0] != "shell(rm *)" ||
		a.Limits.MaxTurns != 20 || a.Limits.MaxDuration != "30m" || a.InstructionFiles == nil || len(a.InstructionFiles) != 0 {
		t.Fatalf("YAML read as %+v", a)
	}
	j, err := ParseAgentFile([]byte(`{"instructions": "x", "model": {"provider": "openai", "name": "gpt-4.1"}}`))
	if err != nil || j.Model.Provider != "openai" || j.InstructionFiles != nil {
		t.Fatalf("JSON read as %+v, %v", j, err)
	}
	for _, c := range []struct{ file, want string }{
		{"instructions: x\nlimits:\n  max_turn: 3\n", "max_turn"},
		{"instructions: x\nlimits:\n  max_turns: many\n", "limits.max_turns"},
		{"- instructions\n", "mapping"},
		{"", "instructions"},
		{"instructions: [unclosed\n", "agent file"},
	} {
		if _, err := ParseAgentFile([]byte(c.file)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error naming %q", c.file, err, c.want)
		}
	}
}

// TestThe_example_in_PROFILES_md_is_a_valid_profile holds the user guide's
// example to the parser and the validation the dispatcher applies.
func TestThe_example_in_PROFILES_md_is_a_valid_profile(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "PROFILES.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	example, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatal("docs/PROFILES.md has no ```yaml example")
	}
	a, err := ParseAgentFile([]byte(example))
	if err != nil {
		t.Fatalf("the example does not parse: %v", err)
	}
	if err := agents.Validate(a.Name, a); err != nil {
		t.Fatalf("the example is refused: %v", err)
	}
	if a.Name != "reviewer" || a.Instructions == "" || a.Model.Provider == "" || len(a.Tools.Allow) == 0 ||
		len(a.Tools.Deny) == 0 || a.Limits.MaxDuration == "" || a.Recovery == "" || len(a.InstructionFiles) == 0 {
		t.Fatalf("the example does not show every field: %+v", a)
	}
}
