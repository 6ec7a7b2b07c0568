package redact

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCleanLine_shows_what_a_terminal_shows(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "hello world", "hello world"},
		{"tab kept", "a\tb", "a\tb"},
		{"colours", "\x1b[1;31merror\x1b[0m: boom", "error: boom"},
		{"256 colours", "\x1b[38;5;196mred\x1b[m", "red"},
		{"private mode", "\x1b[?25lhidden cursor\x1b[?25h", "hidden cursor"},
		{"osc title bel", "\x1b]0;my title\x07prompt$", "prompt$"},
		{"osc title st", "\x1b]2;title\x1b\\text", "text"},
		{"osc 8 hyperlink keeps text", "see \x1b]8;;https://example.com\x1b\\the docs\x1b]8;;\x1b\\ now", "see the docs now"},
		{"unterminated osc", "text\x1b]0;never ends", "text"},
		{"dcs string", "\x1bPq#0;2;0;0;0\x1b\\after", "after"},
		{"charset escape", "\x1b(Bplain\x1b)0", "plain"},
		{"single char escape", "\x1b7saved\x1b8", "saved"},
		{"lone esc at end", "abc\x1b", "abc"},
		{"progress bar", "  0%\r 50%\r100%", "100%"},
		{"cr overwrites prefix", "abcdef\rXY", "XYcdef"},
		{"crlf line end", "windows line\r", "windows line"},
		{"erase line then text", "Downloading 42%\x1b[2K\rDone", "Done"},
		{"cr then erase to end", "long old status\r\x1b[Knew", "new"},
		{"erase to start", "abcdef\x1b[3D\x1b[1K", "    ef"},
		{"cursor column", "abcdef\x1b[3GX", "abXdef"},
		{"cursor forward bounded", "ab\x1b[999Cc", "abc"},
		{"backspace overstrike", "b\bbo\bol\bld\bd", "bold"},
		{"backspace at start", "\b\bx", "x"},
		{"bell and nul removed", "ding\x07\x00!", "ding!"},
		{"vertical tab and form feed removed", "a\x0bb\x0cc", "abc"},
		{"newline inside removed", "a\nb", "ab"},
		{"del removed", "a\x7fb", "ab"},
		{"utf8 kept", "héllo wörld ✓ 日本", "héllo wörld ✓ 日本"},
		{"latin1 byte", "caf\xe9", "café"},
		{"c1 byte is replacement", "a\x85b", "a\ufffdb"},
		{"truncated utf8", "ok \xe2\x9c", "ok \u00e2\ufffd"},
		{"encoded c1 control removed", "a\u0085b", "ab"},
		{"encoded c1 csi", "\u009b31mred", "red"},
		{"redacts after cleaning", "\x1b[32mGITHUB_TOKEN=abc\x1b[0m", "GITHUB_TOKEN=[REDACTED]"},
		{"secret split by colour", "ghp_\x1b[1m" + fake(36) + "\x1b[0m", "ghp_[REDACTED]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CleanLine([]byte(tt.in))
			if got != tt.want {
				t.Errorf("CleanLine(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			if again := CleanLine([]byte(got)); again != got {
				t.Errorf("CleanLine not idempotent: %q then %q", got, again)
			}
		})
	}
}

func TestCleanLine_output_is_valid_utf8_without_controls(t *testing.T) {
	var raw []byte
	for b := 0; b < 256; b++ {
		raw = append(raw, byte(b), 'x')
	}
	got := CleanLine(raw)
	if !utf8.ValidString(got) {
		t.Fatalf("output is not valid UTF-8: %q", got)
	}
	if i := strings.IndexFunc(got, isControl); i >= 0 {
		t.Fatalf("output holds control %U at %d: %q", []rune(got[i:])[0], i, got)
	}
}

// isControl is a C0, DEL or C1 control other than tab.
func isControl(r rune) bool {
	return r != '\t' && (r < 0x20 || (r >= 0x7f && r < 0xa0))
}

func TestCleanLine_bounds_a_line_of_cursor_moves(t *testing.T) {
	in := []byte(strings.Repeat("\x1b[99999999999999999999C", 1000) + "x")
	if got := CleanLine(in); got != "x" {
		t.Fatalf("CleanLine = %q, want %q", got, "x")
	}
}

func TestString_cleans_each_line(t *testing.T) {
	got := String("\x1b[1mone\x1b[0m\r\ntwo TOKEN=x\n")
	if want := "one\ntwo TOKEN=[REDACTED]\n"; got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
}

func BenchmarkCleanLine(b *testing.B) {
	lines := [][]byte{
		[]byte("ok  \tjetway/pkg/redact\t0.012s\tcoverage: 91.2% of statements"),
		[]byte("\x1b[1;32m✓\x1b[0m compiled 412 modules in 3.2s \x1b[2m(cache hit)\x1b[0m"),
		[]byte("2026-11-30T12:34:56Z level=info msg=\"request done\" path=/v1/sessions status=200 token=abc123"),
		[]byte(" 45% [=========>           ] 12.3MB/s\r 46% [==========>          ] 12.4MB/s"),
	}
	var n int
	for _, l := range lines {
		n += len(l)
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		for _, l := range lines {
			_ = CleanLine(l)
		}
	}
}
