package testutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ProcessesWith lists the pids of this machine whose command line holds
// s: how a test finds the processes of a command it gave a unique marker.
func ProcessesWith(s string) []string {
	var pids []string
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), s) {
			pids = append(pids, filepath.Base(filepath.Dir(f)))
		}
	}
	return pids
}

// GoneWithin waits up to d until no process's command line holds any of
// markers, fails the test if one still does, and returns how long that
// took from since: a figure to log, not to assert.
func GoneWithin(t testing.TB, d time.Duration, since time.Time, markers ...string) time.Duration {
	t.Helper()
	Eventually(t, d, "no process left of "+strings.Join(markers, ", "), func() bool {
		for _, m := range markers {
			if len(ProcessesWith(m)) > 0 {
				return false
			}
		}
		return true
	})
	return time.Since(since)
}

// Heartbeat is a shell command that appends a line to file every 20 ms
// until it is killed. Its command line carries a marker of the test and
// file, so HeartbeatsGone can tell when its shell, the file's only writer
// (echo is built in), is gone.
func Heartbeat(t testing.TB, file string) string {
	return "while :; do echo beat >> " + file + "; sleep 0.02; done # " + HeartbeatMarker(t, file)
}

// HeartbeatMarker is what the command line of t's Heartbeat of file holds.
func HeartbeatMarker(t testing.TB, file string) string {
	return "jw-beat:" + t.Name() + ":" + file
}

// HeartbeatsGone waits until t's heartbeats of files have no shell left
// and logs how long that took from at (a switch's write, a kill): a figure
// to read, not a wall-clock assertion a loaded machine could break.
func HeartbeatsGone(t testing.TB, at time.Time, files ...string) {
	t.Helper()
	markers := make([]string, len(files))
	for k, f := range files {
		markers[k] = HeartbeatMarker(t, f)
	}
	took := GoneWithin(t, 10*time.Second, at, markers...)
	t.Logf("the heartbeats %v were gone %s after %s", files, took.Round(time.Millisecond), at.Format("15:04:05.000"))
}

// FileSize is the size of the file at path, -1 while there is none.
func FileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return st.Size()
}
