package retry_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"jetway/pkg/llm/retry"
)

var errFlaky = errors.New("overloaded")

func retryAll(error) retry.Verdict { return retry.Verdict{Retry: true} }

var fast = retry.Policy{BaseDelay: time.Microsecond, MaxDelay: time.Microsecond}

// A stream that fails before it yields anything is tried again; one that
// fails after is not, since the caller has seen part of it.
func TestStream_retries_only_before_the_first_event(t *testing.T) {
	var got []int
	attempts := 0
	err := retry.Stream(t.Context(), fast, retryAll, func(ev int) bool { got = append(got, ev); return true },
		func(_ context.Context, emit func(int), _ func() bool) error {
			attempts++
			if attempts == 1 {
				return errFlaky
			}
			emit(attempts)
			return nil
		})
	if err != nil || attempts != 2 || !slices.Equal(got, []int{2}) {
		t.Fatalf("err %v after %d attempts, events %v; want the second attempt's event", err, attempts, got)
	}

	attempts = 0
	err = retry.Stream(t.Context(), fast, retryAll, func(int) bool { return true },
		func(_ context.Context, emit func(int), _ func() bool) error {
			attempts++
			emit(1)
			return errFlaky
		})
	if !errors.Is(err, errFlaky) || attempts != 1 {
		t.Fatalf("err %v after %d attempts; want the failure after one", err, attempts)
	}
}

// A caller that stops is told nothing more: no further event, no error.
func TestStream_a_stopped_caller_gets_no_more_events_and_no_error(t *testing.T) {
	var got []int
	err := retry.Stream(t.Context(), fast, retryAll, func(ev int) bool { got = append(got, ev); return false },
		func(_ context.Context, emit func(int), stopped func() bool) error {
			emit(1)
			if !stopped() {
				t.Error("stopped() is false after yield returned false")
			}
			emit(2)
			return errFlaky
		})
	if err != nil || !slices.Equal(got, []int{1}) {
		t.Fatalf("err %v, events %v; want nil and only the first", err, got)
	}
}
