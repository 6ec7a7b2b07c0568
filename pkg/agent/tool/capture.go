package tool

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"unicode/utf8"
)

// DefaultMaxOutputChars is the per-call output budget when none is set.
const DefaultMaxOutputChars = 30000

var unsafeFile = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// Capture fits a tool's output into the model's budget of max characters
// (0 = DefaultMaxOutputChars). Output over the budget keeps its head in the
// result; with dir set the whole output is first written to a file there and
// the result names it, so the model can read the rest or pass the path on
// instead of the output being lost.
func Capture(dir, id string, max int, out string) (string, error) {
	if max <= 0 {
		max = DefaultMaxOutputChars
	}
	if len(out) <= max {
		return out, nil
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut-- // do not cut a character in half
	}
	head := out[:cut]
	if dir == "" {
		return fmt.Sprintf("%s\n\n[output truncated: %d of %d characters shown]", head, len(head), len(out)), nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("spill tool output: %w", err)
	}
	path := filepath.Join(dir, "tool-"+unsafeFile.ReplaceAllString(id, "_")+".txt")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		return "", fmt.Errorf("spill tool output: %w", err)
	}
	return fmt.Sprintf("%s\n\n[output truncated: %d of %d characters shown; the full output is in %s]", head, len(head), len(out), path), nil
}
