package bench

import (
	"context"
	"slices"
)

// GroupCold is the run start of a session the runner does not hold in
// memory: every session after IdleEvict (30 s by default) or a takeover,
// so most events at a person's pace.
const GroupCold = "cold"

// FigRunnerColdStart names the event → run start figure for sessions the
// runner does not hold in memory.
func FigRunnerColdStart(pct string) string {
	return "runner event → run start " + pct + ", session not in memory"
}

// coldGoal is the cold start's goal, the in-memory run start's.
const coldGoal = "p99 ≤ 5 ms"

func init() {
	AllGroups = append(AllGroups, GroupCold)
	measures[GroupCold] = (*env).measureCold
}

// coldHistory is how many events each cold session handled before it is
// probed: two, so each has a history of four messages in six records.
const coldHistory = 2

// measureCold builds a population of sessions with a history through one
// runner, then times one event to each of them through a runner that has
// never held them.
func (e *env) measureCold(ctx context.Context) {
	rb, done, err := e.newRunnerBench(ctx)
	if err != nil {
		e.skip(FigRunnerColdStart("p99"), "ms", coldGoal, err)
		return
	}
	defer done()
	if len(e.sizes.SessionCounts) == 0 {
		return
	}
	run := uid()
	n := slices.Max(e.sizes.SessionCounts)
	tenant := "cold-" + run
	if err := rb.coldPopulation(ctx, run, tenant, n); err != nil {
		e.skip(FigRunnerColdStart("p99"), "ms", coldGoal, err)
		return
	}
	rb.coldStarts(ctx, run, tenant, n)
}

// coldPopulation has n sessions of tenant each handle coldHistory events,
// through a runner that then leaves.
func (rb *runnerBench) coldPopulation(ctx context.Context, run, tenant string, n int) error {
	stop, err := rb.startRunner(ctx, "bench-coldfill-"+run, rb.model)
	if err != nil {
		return err
	}
	defer stop()
	rb.e.progress("runner: %d sessions, each handling %d events", n, coldHistory)
	for range coldHistory {
		w, err := watchRuns(rb.e.url, tenant)
		if err != nil {
			return err
		}
		err = rb.populate(ctx, w, tenant, 0, n)
		w.stop()
		if err != nil {
			return err
		}
	}
	return nil
}

// coldStarts times event → run start for the n sessions of tenant, each
// probed once (at most Sizes.Probes) by a runner that has never held them.
// The runner first takes every partition with traffic of its own, so no
// probe pays for a takeover.
func (rb *runnerBench) coldStarts(ctx context.Context, run, tenant string, n int) {
	e := rb.e
	id := "bench-cold-" + run
	stop, err := rb.startRunner(ctx, id, rb.model)
	if err != nil {
		e.skip(FigRunnerColdStart("p99"), "ms", coldGoal, err)
		return
	}
	defer stop()
	if err := rb.takeEveryPartition(ctx, "coldwarm-"+run); err != nil {
		e.skip(FigRunnerColdStart("p99"), "ms", coldGoal, err)
		return
	}
	probes := min(n, e.sizes.Probes)
	e.progress("runner: %d events, one at a time, each to a different session a new runner has not held", probes)
	var s, calm samples
	for i := range probes {
		session := sessionName(i)
		runs, err := rb.runsOf(ctx, tenant, session)
		if err != nil {
			e.skip(FigRunnerColdStart("p99"), "ms", coldGoal, err)
			return
		}
		d, gc, err := rb.probe(ctx, tenant, session, i, runs+1)
		if err != nil {
			e.skip(FigRunnerColdStart("p99"), "ms", coldGoal, err)
			return
		}
		s = append(s, d)
		if !gc {
			calm = append(calm, d)
		}
	}
	p99 := s.pct(99)
	e.add(figure(FigRunnerColdStart("p50"), "ms", s.pct(50)).vs("raw sync publish p50", e.base.syncP50).info("-").
		note("%d events, each to a different one of %d sessions that have each handled %d events (a history of %d messages), through a runner that has never held them, as after an eviction or a takeover: the transcript is read back, the order checked against the work stream and the session record read before the run starts; compare the run start figures of sessions in memory", len(s), n, coldHistory, 2*coldHistory))
	r := figure(FigRunnerColdStart("p99"), "ms", p99).vs("raw sync publish p99", e.base.syncP99).goal(coldGoal, p99 <= 5)
	if len(calm) > 0 && len(calm) < len(s) {
		r = r.note("%d of %d events saw a garbage collection begin in this process while they were under way; p50 / p99 of the %d that did not: %.2f / %.2f ms", len(s)-len(calm), len(s), len(calm), calm.pct(50), calm.pct(99))
	}
	e.add(r)
}
