package handover

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The tests in this file hold the expectations of the seed's own tests
// (layover_core/handover.rs), with the Tower restart become a runner restart.

func recovery() Recovery {
	return Recovery{Previous: "run_01ABC", Interruption: Interruption{Kind: RunnerRestart}, Attempt: 2}
}

const workItem = "implement the retry policy"

func mustContain(t *testing.T, text, want, why string) {
	t.Helper()
	if !strings.Contains(text, want) {
		t.Errorf("text does not contain %q%s\n--- text ---\n%s", want, why, text)
	}
}

func mustNotContain(t *testing.T, text, unwanted, why string) {
	t.Helper()
	if strings.Contains(text, unwanted) {
		t.Errorf("text contains %q%s\n--- text ---\n%s", unwanted, why, text)
	}
}

// wantDenied fails unless err is a *RecoveryDenied with reason want.
func wantDenied(t *testing.T, err error, want DenialReason, context string) *RecoveryDenied {
	t.Helper()
	var denied *RecoveryDenied
	if !errors.As(err, &denied) {
		t.Fatalf("%s: got %v, want a refusal %s", context, err, want)
	}
	if denied.Reason != want {
		t.Fatalf("%s: refused for %s (%q), want %s", context, denied.Reason, denied, want)
	}
	return denied
}

var retryable = []Interruption{
	{Kind: RunnerRestart},
	{Kind: LostContact},
	{Kind: Timeout},
	CrashedWithCode(1),
	{Kind: Crashed},
}

func TestBrief_is_empty_for_an_ordinary_dispatch(t *testing.T) {
	// A paragraph explaining that nothing happened would be noise in every prompt.
	h := Dispatch(workItem)
	if got := h.Brief(); got != "" {
		t.Errorf("dispatch brief = %q, want empty", got)
	}
	if h.Cause.RepeatsEarlierWork() {
		t.Error("a dispatch claims to repeat earlier work")
	}
}

func TestBrief_tells_a_recovered_run_what_happened_and_warns_about_side_effects(t *testing.T) {
	brief := Recovered(recovery(), workItem).Brief()

	mustContain(t, brief, "continuing interrupted work", "")
	mustContain(t, brief, "run_01ABC", "")
	mustContain(t, brief, "the runner restarted", "")
	mustContain(t, brief, "attempt 2", "")
	mustContain(t, brief, "Doing it twice is worse than doing it late",
		": a restarted run must be warned before repeating a side effect")
}

func TestBrief_tells_a_recovered_run_its_record_may_be_incomplete(t *testing.T) {
	brief := Recovered(recovery(), workItem).
		WithProgress("Read the work item", "Wrote the failing test").
		Brief()

	mustContain(t, brief, "- Read the work item", "")
	mustContain(t, brief, "- Wrote the failing test", "")
	mustContain(t, brief, "not necessarily everything it did",
		": an interrupted run stops mid-sentence, and the brief must say so")
}

func TestBrief_tells_a_recovered_run_with_no_record_that_too(t *testing.T) {
	brief := Recovered(recovery(), workItem).Brief()
	mustContain(t, brief, "anywhere from nowhere to almost finished", "")
}

func TestBrief_carries_a_steer_note_and_its_precedence(t *testing.T) {
	brief := Steered(Steer{
		Previous: "run_01XYZ",
		Note:     "  Use the existing retry helper, do not write a new one.  ",
		At:       time.Now(),
	}, workItem).Brief()

	mustContain(t, brief, "A human has redirected", "")
	mustContain(t, brief, "> Use the existing retry helper", "")
	mustContain(t, brief, "takes precedence",
		": steering that does not override the original request is just a suggestion")
}

func TestCause_of_steering_and_of_recovery_both_repeat_earlier_work(t *testing.T) {
	if !Recovered(recovery()).Cause.RepeatsEarlierWork() {
		t.Error("a recovered run does not repeat earlier work")
	}
	if !Steered(Steer{Previous: "run_1", Note: "stop", At: time.Now()}).Cause.RepeatsEarlierWork() {
		t.Error("a steered run does not repeat earlier work")
	}
}

func TestAuthorizeRecovery_never_restarts_through_a_ground_stop(t *testing.T) {
	// A system that restarts through its own kill switch is not one anybody can stop.
	stop := Interruption{Kind: GroundStop}
	if stop.Retryable() {
		t.Error("a Ground Stop is retryable")
	}
	err := AuthorizeRecovery(Automatic, stop, ChildGone, 0, 3)
	wantDenied(t, err, NotRetryable, "ground stop")
}

func TestAuthorizeRecovery_allows_ordinary_interruptions(t *testing.T) {
	for _, i := range retryable {
		if !i.Retryable() {
			t.Errorf("%v is not retryable", i)
		}
		if err := AuthorizeRecovery(Automatic, i, ChildGone, 0, 3); err != nil {
			t.Errorf("%v: %v, want recovery allowed", i, err)
		}
	}
}

func TestAuthorizeRecovery_does_not_recover_over_a_process_that_might_still_be_running(t *testing.T) {
	// Losing sight of a run is not the same as the run ending. Jobs workers do
	// not stop because a runner did, so a runner that finds a record still
	// marked running cannot assume the work stopped. Recovering anyway is how
	// one interrupted publisher becomes two open pull requests.
	for _, i := range []Interruption{{Kind: RunnerRestart}, {Kind: LostContact}} {
		if !i.ChildMayStillBeRunning() {
			t.Errorf("%v: child may not still be running", i)
		}
		err := AuthorizeRecovery(Automatic, i, ChildUnknown, 0, 3)
		wantDenied(t, err, ChildUnaccountedFor, i.String()+" must be checked before it is restarted")
	}
}

func TestAuthorizeRecovery_needs_no_liveness_check_for_an_interruption_that_was_watched(t *testing.T) {
	// A timeout or a crash means a runner saw the run end. Demanding a check
	// it has already effectively done would strand work for no benefit.
	for _, i := range []Interruption{{Kind: Timeout}, CrashedWithCode(1)} {
		if i.ChildMayStillBeRunning() {
			t.Errorf("%v: child may still be running", i)
		}
		if err := AuthorizeRecovery(Automatic, i, ChildUnknown, 0, 3); err != nil {
			t.Errorf("%v: %v, want recovery allowed", i, err)
		}
	}
}

func TestAuthorizeRecovery_bounds_a_crash_loop(t *testing.T) {
	err := AuthorizeRecovery(Automatic, Interruption{Kind: Timeout}, ChildGone, 3, 3)
	denied := wantDenied(t, err, OutOfAttempts, "3 of 3")
	if denied.MaxAttempts != 3 {
		t.Errorf("MaxAttempts = %d, want 3", denied.MaxAttempts)
	}
	if err := AuthorizeRecovery(Automatic, Interruption{Kind: Timeout}, ChildGone, 2, 3); err != nil {
		t.Errorf("2 of 3: %v, want recovery allowed", err)
	}
}

func TestAuthorizeRecovery_stops_for_a_policy_of_never_or_manual(t *testing.T) {
	timeout := Interruption{Kind: Timeout}
	wantDenied(t, AuthorizeRecovery(Never, timeout, ChildGone, 0, 3), PolicyForbids, "never")
	wantDenied(t, AuthorizeRecovery(Manual, timeout, ChildGone, 0, 3), NeedsAHuman, "manual")
	if !Automatic.IsAutomatic() {
		t.Error("Automatic is not automatic")
	}
	if Manual.IsAutomatic() {
		t.Error("Manual is automatic")
	}
}

func TestAuthorizeRecovery_with_a_zero_limit_never_restarts_on_its_own(t *testing.T) {
	err := AuthorizeRecovery(Automatic, Interruption{Kind: Timeout}, ChildGone, 0, 0)
	denied := wantDenied(t, err, OutOfAttempts, "limit 0")
	if denied.MaxAttempts != 0 {
		t.Errorf("MaxAttempts = %d, want 0", denied.MaxAttempts)
	}
}

func TestHandover_carries_the_inputs_the_earlier_run_received(t *testing.T) {
	// The new run remembers nothing, so it needs the work item again, not
	// just a note that one existed.
	h := Recovered(recovery(), workItem)
	if len(h.Inputs) != 1 || h.Inputs[0] != workItem {
		t.Errorf("Inputs = %q, want [%q]", h.Inputs, workItem)
	}
}

// Beyond the seed.

func TestAuthorizeRecovery_refuses_beside_a_process_found_still_running(t *testing.T) {
	// Even a watched interruption: if a check says its commands still run, a
	// restart beside them duplicates their work just the same.
	for _, i := range retryable {
		err := AuthorizeRecovery(Automatic, i, ChildAlive, 0, 3)
		wantDenied(t, err, ChildStillRunning, i.String())
	}
}

func TestAuthorizeRecovery_refuses_a_ground_stop_before_asking_anything_else(t *testing.T) {
	err := AuthorizeRecovery(Never, Interruption{Kind: GroundStop}, ChildAlive, 9, 3)
	wantDenied(t, err, NotRetryable, "ground stop under every other refusal")
}

func TestAuthorizeRecovery_asks_about_the_old_process_before_the_policy(t *testing.T) {
	// Even a manual restart needs the old run gone; saying "a human decides"
	// while the question of the old process is open would invite a human to
	// start a duplicate.
	err := AuthorizeRecovery(Manual, Interruption{Kind: LostContact}, ChildUnknown, 0, 3)
	wantDenied(t, err, ChildUnaccountedFor, "manual, lost contact, unknown child")
}

func TestAuthorizeRecovery_refuses_an_interruption_of_no_known_kind(t *testing.T) {
	wantDenied(t, AuthorizeRecovery(Automatic, Interruption{}, ChildGone, 0, 3), NotRetryable, "zero interruption")
}

func TestAuthorizeRecovery_fails_on_a_policy_of_no_known_kind(t *testing.T) {
	err := AuthorizeRecovery(RecoveryPolicy(42), Interruption{Kind: Timeout}, ChildGone, 0, 3)
	if err == nil {
		t.Fatal("unknown policy authorised a recovery")
	}
	var denied *RecoveryDenied
	if errors.As(err, &denied) {
		t.Errorf("unknown policy reported as a refusal %v; it is a bug, not a decision", denied.Reason)
	}
}

func TestRecoveryDenied_messages_are_the_seed_sentences_on_one_line(t *testing.T) {
	want := map[DenialReason]string{
		NotRetryable:        "the interruption was not retryable",
		ChildUnaccountedFor: "the previous run's process has not been confirmed gone",
		ChildStillRunning:   "the previous run's process is still running",
		PolicyForbids:       "this agent's `recovery` policy is `never`",
		NeedsAHuman:         "this agent's `recovery` policy is `manual`; a human decides",
		OutOfAttempts:       "already restarted 3 time(s); a crash loop is not resilience",
	}
	for reason, text := range want {
		d := &RecoveryDenied{Reason: reason}
		if reason == OutOfAttempts {
			d.MaxAttempts = 3
		}
		got := d.Error()
		if got != text {
			t.Errorf("%s: %q, want %q", reason, got, text)
		}
		if strings.ContainsAny(got, "\r\n") || len(got) > 80 {
			t.Errorf("%s: %q is not a short one-line headline", reason, got)
		}
	}
}

func TestRecoveryDenied_is_found_through_wrapping_with_errors_Is_and_As(t *testing.T) {
	err := fmt.Errorf("session s1: %w", AuthorizeRecovery(Automatic, Interruption{Kind: Timeout}, ChildGone, 5, 5))
	if !errors.Is(err, ErrOutOfAttempts) {
		t.Errorf("errors.Is(%v, ErrOutOfAttempts) = false", err)
	}
	if errors.Is(err, ErrNeedsAHuman) {
		t.Errorf("errors.Is(%v, ErrNeedsAHuman) = true", err)
	}
	denied := wantDenied(t, err, OutOfAttempts, "wrapped")
	if denied.MaxAttempts != 5 {
		t.Errorf("MaxAttempts = %d, want 5", denied.MaxAttempts)
	}
	mustContain(t, err.Error(), "already restarted 5 time(s)", "")
}

func TestInterruption_says_what_happened_in_words(t *testing.T) {
	cases := []struct {
		i    Interruption
		want string
	}{
		{Interruption{Kind: RunnerRestart}, "the runner restarted while it was running"},
		{Interruption{Kind: LostContact}, "contact with its runner was lost"},
		{Interruption{Kind: Timeout}, "it ran past its timeout"},
		{CrashedWithCode(2), "it exited with code 2"},
		{CrashedWithCode(0), "it exited with code 0"},
		{Interruption{Kind: Crashed}, "it exited abnormally"},
		{Interruption{Kind: GroundStop}, "a Ground Stop halted it"},
	}
	for _, c := range cases {
		if got := c.i.String(); got != c.want {
			t.Errorf("%s: %q, want %q", c.i.Kind, got, c.want)
		}
	}
}

func TestRecoverySettings_default_to_automatic_with_three_attempts(t *testing.T) {
	s := DefaultRecoverySettings()
	if s.Policy != Automatic || s.MaxAttempts != 3 {
		t.Errorf("defaults = %+v, want automatic with 3 attempts", s)
	}
	if err := s.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	var zero RecoveryPolicy
	if zero != Automatic {
		t.Errorf("zero policy = %v, want automatic", zero)
	}
}

func TestRecoverySettings_per_session_override_changes_only_what_it_sets(t *testing.T) {
	never, manual, zero := Never, Manual, 0
	base := DefaultRecoverySettings()

	if got := base.With(RecoveryOverride{}); got != base {
		t.Errorf("empty override: %+v, want %+v", got, base)
	}
	if got := base.With(RecoveryOverride{Policy: &never}); got != (RecoverySettings{Policy: Never, MaxAttempts: 3}) {
		t.Errorf("policy override: %+v", got)
	}
	got := base.With(RecoveryOverride{MaxAttempts: &zero})
	if got != (RecoverySettings{Policy: Automatic, MaxAttempts: 0}) {
		t.Errorf("zero limit override: %+v", got)
	}
	wantDenied(t, got.Authorize(Interruption{Kind: Timeout}, ChildGone, Attempts{}), OutOfAttempts,
		"a session overridden to a zero limit")
	got = base.With(RecoveryOverride{Policy: &manual})
	wantDenied(t, got.Authorize(Interruption{Kind: Timeout}, ChildGone, Attempts{}), NeedsAHuman,
		"a session overridden to manual")
}

func TestRecoverySettings_refuse_a_negative_limit(t *testing.T) {
	if err := (RecoverySettings{MaxAttempts: -1}).Validate(); err == nil {
		t.Error("a negative limit validates")
	}
}

func TestAttempts_number_the_first_restart_attempt_2_and_stop_at_the_limit(t *testing.T) {
	settings := DefaultRecoverySettings()
	var attempts Attempts
	var numbers []int
	previous := "run_1"
	for range 10 {
		i := CrashedWithCode(len(numbers) + 1)
		if err := settings.Authorize(i, ChildGone, attempts); err != nil {
			wantDenied(t, err, OutOfAttempts, "after the limit")
			break
		}
		var r Recovery
		r, attempts = attempts.Restart(previous, i)
		if r.Previous != previous || r.Interruption.String() != i.String() {
			t.Errorf("recovery %+v does not name %s and %v", r, previous, i)
		}
		numbers = append(numbers, r.Attempt)
		previous = fmt.Sprintf("run_%d", r.Attempt)
	}
	if fmt.Sprint(numbers) != "[2 3 4]" {
		t.Errorf("attempt numbers = %v, want [2 3 4]", numbers)
	}
	if attempts.Restarts != 3 || attempts.Last == nil || attempts.Last.String() != "it exited with code 3" {
		t.Errorf("attempts after the loop = %+v, want 3 restarts, last exit code 3", attempts)
	}
}

func TestAttempts_do_not_share_the_interruption_they_record(t *testing.T) {
	i := CrashedWithCode(1)
	r, a := Attempts{}.Restart("run_1", i)
	*i.ExitCode = 99
	if *r.Interruption.ExitCode != 1 || *a.Last.ExitCode != 1 {
		t.Errorf("changing the caller's interruption changed the record: %v / %v", r.Interruption, a.Last)
	}
}

func TestBrief_lists_sub_agents_still_at_work_and_the_one_the_run_waited_for(t *testing.T) {
	brief := Recovered(recovery(), workItem).WithChildren(
		Child{Number: 1, Agent: "reviewer", Session: "s1-a1", State: "running for 2m", Waited: true},
		Child{Number: 2, Agent: "default", Session: "s1-a2", State: "starting"},
		Child{Number: 3, Agent: "reviewer", Session: "s1-a3", State: "finished (completed)", Finished: true},
	).Brief()
	mustContain(t, brief, "Sub-agents the earlier work started are still at work", "")
	mustContain(t, brief, "- agent 1 (reviewer), session s1-a1: running for 2m; the earlier run was waiting for its answer when it stopped and did not get it", "")
	mustContain(t, brief, "- agent 2 (default), session s1-a2: starting; it was working in the background", "")
	mustContain(t, brief, "Do not start them again", ": the new run must not duplicate work already delegated")
	mustContain(t, brief, "- agent 3 (reviewer), session s1-a3: finished (completed); read its answer with agent_status {\"agent\": 3}",
		": an answer the interrupted run may have lost must be findable")
	if strings.Contains(Recovered(recovery(), workItem).Brief(), "Sub-agents") {
		t.Error("a brief with no children mentions sub-agents")
	}
}
