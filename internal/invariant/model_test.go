package invariant

import (
	"strings"
	"testing"
	"time"

	"jetway/services/runner"
)

var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

func call(runner string, from, to time.Duration) ModelCall {
	return ModelCall{Runner: runner, Start: t0.Add(from), End: t0.Add(to)}
}

func TestCheck_passes_model_calls_of_a_session_one_after_another(t *testing.T) {
	ev := evidence(nil, nil, "idle")
	ev.ModelCalls = map[Session][]ModelCall{s1: {call("r2", 2*time.Second, 3*time.Second), call("r1", 0, 2*time.Second)}}
	if f := failed(t, Check(ev), OneAtTheModel); len(f) != 0 {
		t.Fatalf("calls one after another failed: %+v", f)
	}
}

func TestCheck_fails_two_model_calls_of_a_session_at_once(t *testing.T) {
	ev := evidence(nil, nil, "idle")
	ev.ModelCalls = map[Session][]ModelCall{s1: {call("r1", 0, 5*time.Second), call("r2", 4*time.Second, 6*time.Second)}}
	f := failed(t, Check(ev), OneAtTheModel)
	if len(f) != 1 || !strings.Contains(f[0].Detail, "a call by r1") || !strings.Contains(f[0].Detail, "r2's began") {
		t.Fatalf("want the overlap of r1's and r2's calls, got %+v", f)
	}
}

// A call in flight while its runner was frozen cannot be cancelled: it is
// counted apart, not failed; a frozen runner's call that overlaps nothing
// is no exception to anything.
func TestCheck_counts_apart_an_overlap_by_a_frozen_runner_s_call(t *testing.T) {
	ev := evidence(nil, nil, "idle")
	ev.ModelCalls = map[Session][]ModelCall{s1: {call("r1", 0, 5*time.Second), call("r2", 4*time.Second, 6*time.Second)}}
	ev.Pauses = map[string][]Window{"r1": {{From: t0.Add(time.Second), To: t0.Add(8 * time.Second)}}}
	rep := Check(ev)
	if f := failed(t, rep, OneAtTheModel); len(f) != 0 {
		t.Fatalf("a frozen runner's overlap failed: %+v", f)
	}
	for _, r := range rep.Results {
		if r.Invariant == OneAtTheModel && !strings.Contains(r.Detail, "1 overlapped by a call in flight while its runner was frozen") {
			t.Fatalf("detail %q does not count the frozen overlap", r.Detail)
		}
	}
}

func TestCheck_skips_the_model_check_when_calls_were_not_observed(t *testing.T) {
	rep := Check(evidence(nil, nil, "idle"))
	if !strings.Contains(strings.Join(rep.Skipped, "\n"), OneAtTheModel) {
		t.Fatalf("skipped = %v", rep.Skipped)
	}
}

// A session whose calls were not observed (a sub-agent's, which the chaos
// suite cannot tell by session) is not judged, while one beside it is.
func TestCheck_judges_the_model_calls_only_of_sessions_observed(t *testing.T) {
	ev := evidence(nil, nil, "idle")
	other := Session{Tenant: "t1", Session: "other"}
	ev.Sessions[other] = runner.SessionRecord{Tenant: "t1", Session: "other", State: "idle"}
	ev.ModelCalls = map[Session][]ModelCall{other: {call("r1", 0, time.Second)}}
	rep := Check(ev)
	judged := 0
	for _, r := range rep.Results {
		if r.Invariant == OneAtTheModel {
			judged++
			if r.Subject == s1.String() {
				t.Errorf("%s, whose calls were not observed, was judged: %+v", s1, r)
			}
		}
	}
	if judged != 1 {
		t.Errorf("%d sessions judged for %q, want the 1 observed", judged, OneAtTheModel)
	}
}
