package client

import (
	"regexp"
	"strings"
	"testing"

	"jetway/pkg/dispatcherapi"
)

func TestWriteChildren_prints_each_sub_agent_s_number_session_profile_and_state(t *testing.T) {
	var b strings.Builder
	err := WriteChildren(&b, []dispatcherapi.ChildSummary{
		{Session: "p1-a1", Agent: "reviewer", State: "running", Run: "r-9", Number: 1, Runs: 1},
		{Session: "p1-a2", Agent: "default", State: "idle", Number: 2, Runs: 0},
		{Session: "p1-a3", Agent: "default", State: "idle", Number: 3, Runs: 2, Reason: "completed"},
		{Session: "p1-a4", Agent: "default", State: "idle", Number: 4, Runs: 0, Reason: "prompt not sent: timeout"},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	for i, re := range []string{
		`^AGENT\s+SESSION\s+PROFILE\s+STATE\s+RUNS$`,
		`^1\s+p1-a1\s+reviewer\s+running \(run r-9\)\s+1$`,
		`^2\s+p1-a2\s+default\s+starting\s+0$`,
		`^3\s+p1-a3\s+default\s+idle\s+2$`,
		`^4\s+p1-a4\s+default\s+not started \(prompt not sent: timeout\)\s+0$`,
	} {
		if i >= len(lines) || !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("line %d does not match %s:\n%s", i, re, b.String())
		}
	}
}
