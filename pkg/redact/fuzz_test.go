package redact

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCleanLine holds CleanLine's promises for any input: no panic, valid
// UTF-8, no control character but tab, and a second cleaning changes nothing.
func FuzzCleanLine(f *testing.F) {
	for _, s := range []string{
		"",
		"plain text",
		"\x1b[1;31mred\x1b[0m",
		"\x1b]8;;https://x\x1b\\link\x1b]8;;\x1b\\",
		"50%\r100%",
		"abc\b\bX\x1b[K",
		"caf\xe9 \x85 \xff",
		"GITHUB_TOKEN=abc password: x",
		`{"api_key":"v","n":1}`,
		"Bearer abc123",
		"https://u:p@h/",
		"sk-ant-api03-" + fake(40),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		got := CleanLine(line)
		if !utf8.ValidString(got) {
			t.Fatalf("CleanLine(%q) = %q: not valid UTF-8", line, got)
		}
		if i := strings.IndexFunc(got, isControl); i >= 0 {
			t.Fatalf("CleanLine(%q) = %q: control at %d", line, got, i)
		}
		if again := CleanLine([]byte(got)); again != got {
			t.Fatalf("CleanLine not idempotent on %q:\n once %q\ntwice %q", line, got, again)
		}
	})
}
