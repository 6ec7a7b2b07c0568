package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The binary that ships links no test or bench code: the fakes answer
// like a model and the harness starts servers, neither belongs in a
// production process. The bench is its own command (cmd/jetway-bench).
func TestThe_jetway_binary_links_no_test_or_bench_packages(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to list the binary's packages: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	if !deps["jetway/services/runner"] {
		t.Fatalf("go list -deps does not list jetway/services/runner; the listing is not this binary's:\n%s", out)
	}
	for _, banned := range []string{"testing", "net/http/httptest", "jetway/pkg/llm/llmtest", "jetway/internal/bench"} {
		if deps[banned] {
			t.Errorf("cmd/jetway links %s", banned)
		}
	}
}
