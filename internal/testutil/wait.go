// Package testutil holds what the tests of many packages share. It is
// imported only by tests, so nothing here reaches a production binary.
package testutil

import (
	"testing"
	"time"
)

// maxPoll bounds the pause between two looks at a condition: short enough
// that a test waits little past the moment it holds, long enough that a
// long wait does not spin on two shared cores.
const maxPoll = 20 * time.Millisecond

// Eventually polls cond until it holds and fails the test, saying what it
// waited for and how long, when it does not within d. The first looks come
// quickly (from 1 ms, doubling), since most conditions hold at once.
// Call it from the test's goroutine: it stops the test with t.Fatalf.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyNil(t, d, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// EventuallyNil polls check until it returns nil and fails the test with
// the last error it returned when that does not happen within d, so the
// failure says not only what was awaited but what was seen instead.
func EventuallyNil(t testing.TB, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	poll := time.Millisecond
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("timed out after %s waiting for %s", d, what)
			}
			t.Fatalf("timed out after %s waiting for %s: last %v", d, what, err)
		}
		time.Sleep(poll)
		poll = min(2*poll, maxPoll)
	}
}

// errNotYet is what Eventually's condition reports while it does not hold.
var errNotYet = notYet{}

type notYet struct{}

func (notYet) Error() string { return "condition not met" }
