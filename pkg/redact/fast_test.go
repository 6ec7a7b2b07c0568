package redact

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// rulesOnly is Secrets without the fast path: every rule runs on every text.
func rulesOnly(s string, inJSON bool) string {
	if len(s) < 8 {
		return s
	}
	return applyRules(s, inJSON)
}

// checkFastPath fails when the fast path answers differently from the rules
// alone, for Secrets, for the log writer's JSON reading, and for CleanLine.
func checkFastPath(t *testing.T, in string) {
	t.Helper()
	for _, inJSON := range []bool{false, true} {
		if got, want := secrets(in, inJSON), rulesOnly(in, inJSON); got != want {
			t.Fatalf("secrets(%q, inJSON=%t):\nfast path %q\nrules     %q (suspect=%t)", in, inJSON, got, want, suspect(in))
		}
	}
	slow := cleanLine([]byte(in), func(s string) string { return rulesOnly(s, false) })
	if got := CleanLine([]byte(in)); got != slow {
		t.Fatalf("CleanLine(%q):\nfast path %q\nrules     %q", in, got, slow)
	}
	if got := string(AppendCleanLine([]byte("> "), []byte(in))); got != "> "+slow {
		t.Fatalf("AppendCleanLine(%q):\nfast path %q\nrules     %q", in, got, "> "+slow)
	}
}

func TestFastPath_agrees_with_the_rules_on_token_soup(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 4 * soupRounds {
		checkFastPath(t, soup(r))
	}
}

// runsOf is text of random runs of word and token bytes of every length
// around the fast path's thresholds, at every offset from an eight-byte
// boundary, between random separators.
func runsOf(r *rand.Rand) string {
	const (
		runBytes = "aZ9_-+/bQ7x"
		seps     = " .,:=\t@é\x00"
	)
	var b []byte
	for range r.IntN(6) + 1 {
		for range r.IntN(40) {
			b = append(b, runBytes[r.IntN(len(runBytes))])
		}
		b = append(b, seps[r.IntN(len(seps))])
	}
	return string(b[:r.IntN(len(b)+1)])
}

func TestFastPath_agrees_with_the_rules_on_runs_of_every_length(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for range 4 * soupRounds {
		checkFastPath(t, runsOf(r))
	}
}

func TestFastPath_leaves_ordinary_output_to_the_fast_path(t *testing.T) {
	// Lines like these make up nearly all of a build's or a test run's
	// output: they must not cost the rules.
	for _, line := range []string{
		"the quick brown fox jumps over the lazy dog while the build prints another ordinary line of output",
		"ok  \tjetway/pkg/redact\t0.220s",
		"main.go:12:3: undefined: foo",
		"Downloading 42% [=====>      ] 1.2 MB/s",
		"Step 3/7 : RUN go build ./...",
		"time=2026-11-30T22:08:37Z level=info msg=\"listening\" addr=127.0.0.1:8080",
	} {
		if suspect(line) {
			t.Errorf("suspect(%q) = true; ordinary output should take the fast path", line)
		}
		checkFastPath(t, line)
	}
}

func TestFastPath_sends_every_credential_shape_to_the_rules(t *testing.T) {
	for _, line := range []string{
		"key sk-proj-" + fake(24),
		"GITHUB_TOKEN=abc",
		"password: letmein",
		"Authorization: Basic dXNlcjpwdw==",
		"curl -H 'Bearer abc123'",
		"https://user:pw@example.com/",
		"token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
		"xoxb-1234567890",
		"AKIA" + "ABCDEFGHIJKLMNOP",
		"id " + fake(40),
	} {
		if !suspect(line) {
			t.Errorf("suspect(%q) = false; the rules must see it", line)
		}
		checkFastPath(t, line)
	}
}

// FuzzFastPath holds the fast path to the rules alone on any input.
func FuzzFastPath(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 64 {
		f.Add(soup(r))
	}
	for _, s := range []string{
		"the quick brown fox", "a\\nsk-" + fake(30), "x \"api_key\" : v", "u:p@h://",
		"Bearer\t1", "eyJ" + fake(12) + "." + fake(4) + ".", "h1:" + fake(44), "a/b+" + fake(40),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		checkFastPath(t, in)
	})
}

// BenchmarkCleanLine_ordinary is the common case: a printable line with
// nothing to strip or redact.
func BenchmarkCleanLine_ordinary(b *testing.B) {
	line := []byte("the quick brown fox jumps over the lazy dog while the build prints another ordinary line of output")
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		_ = CleanLine(line)
	}
}

func BenchmarkAppendCleanLine_ordinary(b *testing.B) {
	line := []byte("the quick brown fox jumps over the lazy dog while the build prints another ordinary line of output")
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	buf := make([]byte, 0, 256)
	for b.Loop() {
		buf = AppendCleanLine(buf[:0], line)
	}
}

// checkUnchanged fails when Unchanged says a block is unchanged while
// CleanLine changes one of its lines.
func checkUnchanged(t *testing.T, lines []string) {
	t.Helper()
	text := strings.Join(lines, "\n")
	if !Unchanged([]byte(text)) {
		return
	}
	for _, l := range strings.Split(text, "\n") {
		if got := CleanLine([]byte(l)); got != l {
			t.Fatalf("Unchanged(%q) = true, but CleanLine(%q) = %q", text, l, got)
		}
	}
}

func TestUnchanged_agrees_with_CleanLine_line_by_line(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	gens := []func(*rand.Rand) string{soup, runsOf}
	for range 4 * soupRounds {
		var lines []string
		for range r.IntN(4) + 1 {
			lines = append(lines, gens[r.IntN(len(gens))](r))
		}
		checkUnchanged(t, lines)
	}
	ordinary := []string{
		"the quick brown fox jumps over the lazy dog while the build prints another ordinary line of output",
		"ok  \tjetway/pkg/redact\t0.220s",
		"main.go:12:3: undefined: foo",
		"",
	}
	if !Unchanged([]byte(strings.Join(ordinary, "\n") + "\n")) {
		t.Errorf("a block of ordinary lines is not Unchanged")
	}
	for _, bad := range []string{"a\r\nb\n", "x\n\x1b[1mred\n", "token=abc\n", "caf\xe9\n", "user@h\nhttps://x\n"} {
		if Unchanged([]byte(bad)) {
			t.Errorf("Unchanged(%q) = true", bad)
		}
	}
}

// FuzzUnchanged holds the block fast path to CleanLine on any input.
func FuzzUnchanged(f *testing.F) {
	r := rand.New(rand.NewPCG(13, 14))
	for range 32 {
		f.Add(soup(r) + "\n" + runsOf(r))
	}
	f.Fuzz(func(t *testing.T, text string) {
		checkUnchanged(t, strings.Split(text, "\n"))
	})
}

// BenchmarkUnchanged_block is the block fast path on what capture reads:
// 256 KiB of ordinary lines, copied whole when Unchanged says so.
func BenchmarkUnchanged_block(b *testing.B) {
	block := []byte(strings.Repeat("the quick brown fox jumps over the lazy dog while the build prints another ordinary line of output\n", 2600))
	b.SetBytes(int64(len(block)))
	for b.Loop() {
		if !Unchanged(block) {
			b.Fatal("a block of ordinary lines is not Unchanged")
		}
	}
}
