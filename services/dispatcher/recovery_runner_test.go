package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"jetway/internal/testutil"
	"jetway/pkg/handover"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/llmtest"
	"jetway/services/runner"
)

// TestRecovery_set_through_the_API_keeps_a_real_runner_from_restarting_the_work
// goes end to end: a run whose runner died is found by a real runner, which
// decides its recovery by the policy the dispatcher stored.
func TestRecovery_set_through_the_API_keeps_a_real_runner_from_restarting_the_work(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ghost := runner.SessionRecord{Tenant: "default", Session: "s1", State: runner.StateRunning, Run: "r-ghost",
		Runner: "ghost", Incarnation: "gone", Since: time.Now().UTC(), Inputs: []string{"open the pull request"}, Runs: 1}
	b, err := json.Marshal(ghost)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.sessions().Create(ctx, "default.s1", b); err != nil {
		t.Fatal(err)
	}
	decode[RecoveryState](t, f.do("PUT", "/v1/sessions/s1/recovery", tokUser, `{"policy":"manual"}`), http.StatusOK)

	model := llmtest.NewAnthropic(t)
	model.SetFallback(llmtest.Reply{Text: "recovered"})
	p, err := anthropic.New(anthropic.Config{APIKey: "test-key", BaseURL: model.URL(), Model: "claude-test"})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	r, err := runner.New(rctx, runner.Config{NC: f.nc, ID: "r1", Provider: p,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Error("runner did not stop")
		}
	})

	f.waitRecord(t, "the runner to leave the run interrupted", func(rec runner.SessionRecord) bool {
		return rec.State == runner.StateInterrupted
	})
	rec := f.asRunner("default.s1")
	if model.RequestCount() != 0 {
		t.Fatal("the runner restarted the work against the manual policy")
	}
	if rec.Policy == nil || rec.Policy.Policy == nil || *rec.Policy.Policy != handover.Manual {
		t.Fatalf("the runner's write lost the policy: %+v", rec.Policy)
	}

	// The person's word sends it on.
	decode[Accepted](t, f.do("POST", "/v1/sessions/s1/resume", tokUser, nil), http.StatusAccepted)
	f.waitRecord(t, "the resumed run to end", func(rec runner.SessionRecord) bool {
		return rec.State == runner.StateIdle && rec.Cause == "steered"
	})
	if model.RequestCount() != 1 {
		t.Fatalf("model called %d times after the resume, want once", model.RequestCount())
	}
}

// waitRecord polls the session record default.s1 until ok holds.
func (f *fixture) waitRecord(t *testing.T, what string, ok func(runner.SessionRecord) bool) {
	t.Helper()
	testutil.EventuallyNil(t, waitFor, what, func() error {
		if rec := f.asRunner("default.s1"); !ok(rec) {
			return fmt.Errorf("record %+v", rec)
		}
		return nil
	})
}
