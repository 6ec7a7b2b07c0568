package script_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"jetway/pkg/llm"
	"jetway/pkg/llm/script"
)

// docExample is the script RUNNER.md shows under its script-example
// marker: the format's documentation is only worth having if it parses and
// plays as it says.
func docExample(t *testing.T) []byte {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/RUNNER.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "<!-- script-example:")
	if !ok {
		t.Fatal("docs/RUNNER.md: no <!-- script-example: --> marker")
	}
	_, block, ok := strings.Cut(after, "```json\n")
	if !ok {
		t.Fatal("docs/RUNNER.md: no ```json block after the script-example marker")
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		t.Fatal("docs/RUNNER.md: the script example's block does not end")
	}
	return []byte(block)
}

func TestThe_documented_script_example_uses_only_real_fields(t *testing.T) {
	dec := json.NewDecoder(bytes.NewReader(docExample(t)))
	dec.DisallowUnknownFields()
	var f script.File
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("RUNNER.md's script example: %v", err)
	}
	if len(f.Turns) == 0 {
		t.Fatal("RUNNER.md's script example has no turns")
	}
}

func TestThe_documented_script_example_plays_as_described(t *testing.T) {
	p, err := script.Parse(docExample(t))
	if err != nil {
		t.Fatalf("RUNNER.md's script example: %v", err)
	}
	notice := func(line, last string) llm.Message {
		text := "[background job notice] " + line + "\nLast output:\n" + last + "\nTell the user the result."
		return llm.Message{Role: llm.RoleUser, Kind: llm.KindNotice, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: text}}}
	}
	for _, tc := range []struct{ notice, last, want string }{
		{"job 1 (go) exited 0 after 4s.", "ok  	jetway/pkg/events", "The tests passed: job 1 (go) exited 0 after 4s."},
		{"job 1 (go) exited 1 after 4s.", "FAIL", `The tests did not pass: job 1 (go) exited 1 after 4s. The last line was "FAIL".`},
	} {
		h := []llm.Message{llm.UserText("run the tests")}
		m1, stop := stream(t, p, h)
		if stop != llm.StopToolUse || len(m1.ToolUses()) != 1 || m1.ToolUses()[0].Name != "shell" {
			t.Fatalf("turn 1: %q %+v", stop, m1)
		}
		h = append(h, m1, results(m1, "started job 1 (go) in the background"))
		m2, stop := stream(t, p, h)
		if stop != llm.StopEndTurn || !strings.Contains(m2.Text(), "running") {
			t.Fatalf("turn 2: %q %+v", stop, m2)
		}
		h = append(h, m2, notice(tc.notice, tc.last))
		m3, _ := stream(t, p, h)
		if m3.Text() != tc.want {
			t.Fatalf("after %q:\n got %q\nwant %q", tc.notice, m3.Text(), tc.want)
		}
	}
}
