package runner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Rails bound what sessions may spend. Zero values are off. Every run
// counts — dispatched, recovered, steered or resumed — so a crash loop or a
// steering war is bounded like anything else.
type Rails struct {
	// Fuel is a session's token budget (input + output, all runs).
	Fuel int64
	// RunsPerHour caps the runs one session starts in any rolling hour.
	RunsPerHour int
	// GlobalRunsPerHour caps the runs all sessions start together in a
	// rolling hour, across every runner (a sliding-window counter in the
	// control bucket).
	GlobalRunsPerHour int
}

// rails checks and counts runs against the configured Rails.
type rails struct {
	cfg Rails
	kv  jetstream.KeyValue
	now func() time.Time
}

func (r rails) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// allow decides whether rec's session may start a run now and, when it may,
// counts the run in rec (the caller's CAS write stores it) and in the global
// window. The reason is a sentence for the person.
func (r rails) allow(ctx context.Context, rec *SessionRecord) (string, bool) {
	now := r.clock()
	if r.cfg.Fuel > 0 && rec.TokensUsed >= r.cfg.Fuel {
		return fmt.Sprintf("out of fuel: the session has used %d of its %d tokens", rec.TokensUsed, r.cfg.Fuel), false
	}
	recent := r.recentRuns(rec.RecentRuns, now)
	if r.cfg.RunsPerHour > 0 && len(recent) >= r.cfg.RunsPerHour {
		return fmt.Sprintf("run cap: the session started %d runs in the last hour (limit %d); next at %s",
			len(recent), r.cfg.RunsPerHour, recent[0].Add(time.Hour).UTC().Format(time.RFC3339)), false
	}
	if r.cfg.GlobalRunsPerHour > 0 {
		if reason, ok := r.takeGlobal(ctx, now); !ok {
			return reason, false
		}
	}
	rec.RecentRuns = nil
	if r.cfg.RunsPerHour > 0 {
		rec.RecentRuns = append(recent, now.UTC())
	}
	return "", true
}

// recentRuns keeps the start times the run cap needs: those of the last
// hour, and of them only the newest RunsPerHour. An older one cannot change
// the verdict (the cap is reached exactly when the cap-th newest is inside
// the hour), and every start time kept is written and read with the session
// record on every run: a busy session's record grew to a thousand of them,
// and its run start with it. With no cap, none is kept.
func (r rails) recentRuns(all []time.Time, now time.Time) []time.Time {
	keep := r.cfg.RunsPerHour
	if keep <= 0 {
		return nil
	}
	var recent []time.Time
	for _, t := range all {
		if now.Sub(t) < time.Hour {
			recent = append(recent, t)
		}
	}
	return recent[max(0, len(recent)-keep):]
}

// takeGlobal counts one run in the global sliding window: this hour's
// bucket plus the previous hour's, weighted by how much of it still falls
// inside the last 60 minutes.
func (r rails) takeGlobal(ctx context.Context, now time.Time) (string, bool) {
	hour := now.UTC().Truncate(time.Hour)
	cur := "rails.runs." + hour.Format("2006010215")
	prev := "rails.runs." + hour.Add(-time.Hour).Format("2006010215")
	prevN, _, err := r.count(ctx, prev)
	if err != nil {
		return "global rail unavailable: " + err.Error(), false
	}
	weight := 1 - float64(now.Sub(hour))/float64(time.Hour)
	for range 10 {
		n, rev, err := r.count(ctx, cur)
		if err != nil {
			return "global rail unavailable: " + err.Error(), false
		}
		if float64(n)+float64(prevN)*weight >= float64(r.cfg.GlobalRunsPerHour) {
			return fmt.Sprintf("global run reserve spent: %d runs in the last hour across all sessions (limit %d)",
				n+int(float64(prevN)*weight), r.cfg.GlobalRunsPerHour), false
		}
		val := []byte(strconv.Itoa(n + 1))
		if rev == 0 {
			_, err = r.kv.Create(ctx, cur, val)
		} else {
			_, err = r.kv.Update(ctx, cur, val, rev)
		}
		if err == nil {
			return "", true
		}
	}
	return "global rail busy: too many runners counting at once", false
}

func (r rails) count(ctx context.Context, key string) (int, uint64, error) {
	e, err := r.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	n, _ := strconv.Atoi(string(e.Value()))
	return n, e.Revision(), nil
}
