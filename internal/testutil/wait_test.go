package testutil

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of stopping the
// goroutine's test, so the helpers' failures can be tested.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r)
}

// run calls f with a recorder and returns what it failed with, if anything.
func run(t *testing.T, f func(tb testing.TB)) (failed string) {
	r := &recorder{TB: t}
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
		failed = r.failed
	}()
	f(r)
	return ""
}

func TestEventually_returns_once_the_condition_holds(t *testing.T) {
	n := 0
	if msg := run(t, func(tb testing.TB) {
		Eventually(tb, 5*time.Second, "the third look", func() bool { n++; return n == 3 })
	}); msg != "" {
		t.Fatalf("failed: %s", msg)
	}
	if n != 3 {
		t.Fatalf("looked %d times, want 3", n)
	}
}

func TestEventually_fails_after_the_deadline_saying_what_it_waited_for(t *testing.T) {
	start := time.Now()
	msg := run(t, func(tb testing.TB) {
		Eventually(tb, 50*time.Millisecond, "the moon", func() bool { return false })
	})
	if took := time.Since(start); took < 50*time.Millisecond || took > 2*time.Second {
		t.Fatalf("gave up after %s, want just past 50ms", took)
	}
	if msg != "timed out after 50ms waiting for the moon" {
		t.Fatalf("message %q", msg)
	}
}

func TestEventuallyNil_fails_with_the_last_error_seen(t *testing.T) {
	n := 0
	msg := run(t, func(tb testing.TB) {
		EventuallyNil(tb, 30*time.Millisecond, "three records", func() error {
			n++
			return errors.New("have " + fmt.Sprint(min(n, 2)))
		})
	})
	if !strings.HasPrefix(msg, "timed out after 30ms waiting for three records: last have 2") {
		t.Fatalf("message %q", msg)
	}
}
