package bus

import (
	"context"
	"errors"
	"testing"
	"time"
)

// One create request that a just-formed cluster never answers must not
// hold provisioning: each attempt has its own deadline, and an unanswered
// one is tried again.
func TestAn_unanswered_create_is_tried_again_within_its_own_deadline(t *testing.T) {
	calls := 0
	err := whilePlacing(context.Background(), func(ctx context.Context) error {
		calls++
		dl, ok := ctx.Deadline()
		if !ok || time.Until(dl) > attemptTimeout {
			t.Errorf("attempt %d: deadline %v (set: %v), want one within %s", calls, dl, ok, attemptTimeout)
		}
		if calls == 1 {
			return context.DeadlineExceeded // the request went unanswered
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("whilePlacing = %v after %d calls, want success on the second", err, calls)
	}
}

// The caller's own deadline still ends it, and other errors are not retried.
func TestPlacing_stops_at_the_caller_s_deadline_and_on_other_errors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	err := whilePlacing(ctx, func(ctx context.Context) error {
		calls++
		return ctx.Err()
	})
	if err == nil || calls != 1 {
		t.Fatalf("with the caller's context done: %v after %d calls, want its error after one", err, calls)
	}
	refused := errors.New("stream name already in use with a different configuration")
	calls = 0
	err = whilePlacing(context.Background(), func(context.Context) error { calls++; return refused })
	if !errors.Is(err, refused) || calls != 1 {
		t.Fatalf("a refusal: %v after %d calls, want it returned after one", err, calls)
	}
}
