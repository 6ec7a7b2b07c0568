package bench

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A failed figure carries the server's last warnings, the newest
// serverWarningsKept of them, and stays the error it wraps.
func TestA_failed_create_says_what_the_server_last_warned_of(t *testing.T) {
	w := &serverWarnings{}
	for i := range serverWarningsKept + 2 {
		w.Warnf("warning %d", i)
	}
	w.Noticef("not kept")
	w.Errorf("Stream create failed for %q: %v", "JETWAY > S", "open dir: too many open files")
	e := &env{srvLog: w}
	base := errors.New("create shard S: error creating store for stream")
	err := e.withServerSaid(base)
	if !errors.Is(err, base) {
		t.Fatalf("%v does not wrap the create's error", err)
	}
	msg := err.Error()
	for _, want := range []string{"[ERR] Stream create failed", "too many open files", fmt.Sprintf("warning %d", serverWarningsKept+1)} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	for _, gone := range []string{"warning 0;", "warning 1;", "warning 2;", "not kept"} {
		if strings.Contains(msg, gone) {
			t.Errorf("%q still holds %q", msg, gone)
		}
	}
	if err := (&env{}).withServerSaid(base); err != base {
		t.Errorf("with no server log: %v, want the error as it was", err)
	}
}
