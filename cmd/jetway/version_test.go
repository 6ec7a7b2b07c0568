package main

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

func TestVersion_prints_the_stamped_version_and_the_Go_version(t *testing.T) {
	out, err := exec.Command(jetwayBinary(t), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("jetway version: %v\n%s", err, out)
	}
	got := strings.TrimSpace(string(out))
	if !strings.HasPrefix(got, "jetway "+testVersion+" ") || !strings.Contains(got, runtime.Version()) {
		t.Errorf("jetway version = %q, want jetway %s with %s", got, testVersion, runtime.Version())
	}
}

func TestRoot_refuses_an_unknown_log_level(t *testing.T) {
	cmd := exec.Command(jetwayBinary(t), "--log-level", "loud", "version")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("jetway accepted --log-level loud: %s", out)
	}
	if !strings.Contains(string(out), "loud") {
		t.Errorf("error does not name the bad level: %s", out)
	}
}
