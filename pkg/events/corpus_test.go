package events

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestFuzzCorpus_seeds_are_accepted_or_refused_as_named keeps the committed
// seed corpus meaningful: FuzzDecode only checks properties, so this test
// checks that each "refused_*" seed is refused and every other is accepted.
func TestFuzzCorpus_seeds_are_accepted_or_refused_as_named(t *testing.T) {
	files, err := filepath.Glob("testdata/fuzz/FuzzDecode/*")
	if err != nil || len(files) < 10 {
		t.Fatalf("seed corpus: %d files, %v", len(files), err)
	}
	for _, file := range files {
		name := filepath.Base(file)
		if strings.HasPrefix(name, "seed#") || len(name) == 16 && !strings.Contains(name, "_") {
			continue // a fuzzer-found input, not a named seed
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		args := readCorpusFile(t, name, string(b))
		_, err = Decode(args[0], parseHeaderBlob(args[1]), []byte(args[2]))
		if refused := strings.HasPrefix(name, "refused_"); refused != (err != nil) {
			t.Errorf("%s: Decode error %v", name, err)
		}
	}
}

// readCorpusFile reads a "go test fuzz v1" file of (string, string, []byte).
func readCorpusFile(t *testing.T, name, text string) [3]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != 4 || lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a 3-value fuzz corpus file", name)
	}
	var out [3]string
	for i, l := range lines[1:] {
		_, lit, ok := strings.Cut(l, "(")
		if !ok || !strings.HasSuffix(lit, ")") {
			t.Fatalf("%s: line %q", name, l)
		}
		s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
		if err != nil {
			t.Fatalf("%s: line %q: %v", name, l, err)
		}
		out[i] = s
	}
	return out
}
