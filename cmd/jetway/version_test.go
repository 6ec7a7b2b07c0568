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

func TestRunner_refuses_an_idle_eviction_of_zero_before_connecting(t *testing.T) {
	// No NATS server listens on this port: the refusal must come first.
	cmd := exec.Command(jetwayBinary(t), "runner", "--idle-evict", "0s", "--nats", "nats://127.0.0.1:1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("jetway runner accepted --idle-evict 0s: %s", out)
	}
	if !strings.Contains(string(out), "--idle-evict 0s") {
		t.Errorf("error does not name the bad flag and value: %s", out)
	}
}
