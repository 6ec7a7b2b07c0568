package runner

import (
	"context"
	"strings"
	"testing"
	"time"
)

func Test_the_run_cap_keeps_only_the_start_times_it_needs(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r := rails{cfg: Rails{RunsPerHour: 3}, now: func() time.Time { return now }}
	rec := SessionRecord{RecentRuns: []time.Time{
		now.Add(-2 * time.Hour),    // outside the hour
		now.Add(-55 * time.Minute), // inside, but older than the cap needs
		now.Add(-50 * time.Minute),
		now.Add(-40 * time.Minute),
		now.Add(-30 * time.Minute),
	}}
	reason, ok := r.allow(context.Background(), &rec)
	if ok {
		t.Fatalf("a fourth run within the hour was allowed under a cap of 3; record %v", rec.RecentRuns)
	}
	// The next run is due when the third newest leaves the hour.
	if want := now.Add(10 * time.Minute).Format(time.RFC3339); !strings.Contains(reason, "started 3 runs") || !strings.Contains(reason, want) {
		t.Fatalf("refusal %q: want 3 runs and the next run at %s", reason, want)
	}

	now = now.Add(11 * time.Minute) // the -50 min run leaves the hour
	if reason, ok := r.allow(context.Background(), &rec); !ok {
		t.Fatalf("refused after a run left the hour: %s", reason)
	}
	if len(rec.RecentRuns) != 3 || !rec.RecentRuns[2].Equal(now) {
		t.Fatalf("record keeps %v, want the 3 newest start times ending with now", rec.RecentRuns)
	}
}

func Test_with_no_run_cap_the_record_keeps_no_start_times(t *testing.T) {
	r := rails{}
	rec := SessionRecord{RecentRuns: []time.Time{time.Now()}}
	for range 1000 {
		if reason, ok := r.allow(context.Background(), &rec); !ok {
			t.Fatalf("refused with every rail off: %s", reason)
		}
	}
	if len(rec.RecentRuns) != 0 {
		t.Fatalf("record keeps %d start times with no cap; a busy session's record would grow with every run", len(rec.RecentRuns))
	}
}
