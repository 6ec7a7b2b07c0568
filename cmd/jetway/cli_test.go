package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestArgument_errors_name_the_arguments_the_command_takes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"send", "s1"}, "usage: jetway send SESSION TEXT..."},
		{[]string{"chat"}, "usage: jetway chat SESSION"},
		{[]string{"jobs"}, "usage: jetway jobs SESSION"},
	} {
		_, err := runCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to say %q", tc.args, err, tc.want)
		}
	}
}

func TestService_version_is_SemVer_that_still_names_an_untagged_build(t *testing.T) {
	for v, want := range map[string]string{
		"v1.4.2":              "1.4.2",
		"v1.4.2-3-gabc1234":   "1.4.2-3-gabc1234",
		"48b7dc1":             "0.0.0-g48b7dc1",
		"0123456-dirty":       "0.0.0-g0123456-dirty",
		"dev":                 "0.0.0-gdev",
		"v1.2.3-rc.1+build.5": "1.2.3-rc.1+build.5",
	} {
		got := semverOf(v)
		if got != want {
			t.Errorf("semverOf(%q) = %q, want %q", v, got, want)
		}
		if !semverRE.MatchString(got) {
			t.Errorf("semverOf(%q) = %q is not SemVer", v, got)
		}
	}
}

// waitCLI runs a client command until its output satisfies cond.
func waitCLI(t *testing.T, what string, cond func(string) bool, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := runCLI(t, args...)
		if err == nil && cond(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v never showed %s; last: %v\n%s", args, what, err, out)
		}
		<-time.After(100 * time.Millisecond)
	}
}

func TestJobs_and_sessions_print_sorted_tables_with_state_columns_and_json_gives_the_records(t *testing.T) {
	d := startDev(t)
	cf := []string{"--url", d.url, "--tokens-file", d.tokens}
	for _, s := range []string{"zulu", "alpha"} {
		if out, err := runCLI(t, append([]string{"send", s, "build the project"}, cf...)...); err != nil {
			t.Fatalf("send %s: %v\n%s", s, err, out)
		}
	}
	// The demo script starts two jobs; wait until both have exited.
	exitedRow := regexp.MustCompile(`(?m)^\d+\s+exited\s`)
	out := waitCLI(t, "two exited jobs", func(s string) bool { return len(exitedRow.FindAllString(s, -1)) == 2 },
		append([]string{"jobs", "alpha"}, cf...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !regexp.MustCompile(`^JOB\s+STATE\s+EXIT\s+JOB LINE$`).MatchString(lines[0]) {
		t.Errorf("jobs header %q", lines[0])
	}
	if len(lines) != 3 ||
		!regexp.MustCompile(`^1\s+exited\s+0\s+t1 exited \(exit 0\) after \d+s · .* · sleep 3; echo build ok · out:alpha:`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^2\s+exited\s+0\s+t2 exited `).MatchString(lines[2]) {
		t.Errorf("jobs table is not job 1 then job 2 with state, exit and line:\n%s", out)
	}
	raw, err := runCLI(t, append([]string{"jobs", "alpha", "--json"}, cf...)...)
	if err != nil {
		t.Fatal(err)
	}
	var recs []struct {
		Job    string          `json:"job"`
		Record json.RawMessage `json:"record"`
	}
	if err := json.Unmarshal([]byte(raw), &recs); err != nil || len(recs) != 2 || !strings.Contains(string(recs[0].Record), `"line"`) {
		t.Errorf("jobs --json is not the records as JSON (%v):\n%s", err, raw)
	}
	if strings.Contains(raw, `"path"`) || strings.Contains(raw, d.data) {
		t.Errorf("jobs --json shows the output file's host path:\n%s", raw)
	}

	// dev's /metrics has the runner's and the jobs' side too.
	code, metrics := get(t, d.p, d.url+"/metrics")
	for _, want := range []string{"jetway_runner_work_pending ", `jetway_runner_sessions{state="idle"} `, `jetway_jobs{status="exited"} `} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}

	if out, err := runCLI(t, append([]string{"stop", "--session", "alpha", "--reason", "table test"}, cf...)...); err != nil {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	out = waitCLI(t, "both sessions idle", func(s string) bool {
		return strings.Count(s, " idle ") >= 2 || strings.Count(s, "stopped") >= 1 && strings.Count(s, " idle ") >= 1
	},
		append([]string{"sessions"}, cf...)...)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if !regexp.MustCompile(`^SESSION\s+STATE\s+GROUND STOP\s+LAST ACTIVITY$`).MatchString(lines[0]) {
		t.Errorf("sessions header %q", lines[0])
	}
	if len(lines) != 3 ||
		!regexp.MustCompile(`^alpha\s+(idle|stopped)\s+on \(session\)\s+\d+s ago$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^zulu\s+idle\s+off\s+\d+s ago$`).MatchString(lines[2]) {
		t.Errorf("sessions table is not alpha (stopped) then zulu with state, Ground Stop and activity:\n%s", out)
	}
	raw, err = runCLI(t, append([]string{"sessions", "--json"}, cf...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(raw), &recs); err != nil || len(recs) != 2 {
		t.Errorf("sessions --json is not the records as JSON (%v):\n%s", err, raw)
	}
}
