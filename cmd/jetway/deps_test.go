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

// The layers import downwards only: pkg/ (the libraries and the shared
// control plane) imports nothing of services/, and services/ nothing of
// internal/ (the bench and test harnesses, which sit above both). Test
// files are left out: a service's tests may use the harnesses.
func TestPackages_import_down_the_layers_only(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to list the packages: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "jetway/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	rules := []struct{ from, banned string }{
		{"jetway/pkg/", "jetway/services/"},
		{"jetway/services/", "jetway/internal/"},
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg := fields[0]
		for _, r := range rules {
			if !strings.HasPrefix(pkg, r.from) {
				continue
			}
			checked++
			for _, imp := range fields[1:] {
				if strings.HasPrefix(imp, r.banned) {
					t.Errorf("%s imports %s", pkg, imp)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d packages checked; the listing is not this module's:\n%s", checked, out)
	}
}
