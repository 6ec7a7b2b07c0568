package runner

import (
	"context"
	"errors"
	"iter"
	"sync"
	"time"

	"jetway/pkg/llm"
)

// errLeaseLapsed ends the runs of a runner whose lease ran out: another
// runner may take their sessions over as soon as the lease is out, so the
// model and the tools must hear from this one no more.
var errLeaseLapsed = errors.New("this runner's lease lapsed (no heartbeat renewed it): its runs stop before another runner may take their sessions over")

// liveRuns are the runs this runner drives, across its actors, so a lapse
// of the lease can stop them all at once without waiting on any actor's
// goroutine (one may be busy with a slow write).
type liveRuns struct {
	mu   sync.Mutex
	runs map[*liveRun]chan struct{} // closed when the run's loop is over
}

// add registers a run about to be launched; false when the lease is not
// held, and the run must not begin. held is asked under the registry's
// lock, so a lapse either sees the run or the run sees the lapse.
func (l *liveRuns) add(lr *liveRun, held func() bool) (done func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !held() {
		return nil, false
	}
	if l.runs == nil {
		l.runs = map[*liveRun]chan struct{}{}
	}
	ch := make(chan struct{})
	l.runs[lr] = ch
	return func() {
		l.mu.Lock()
		delete(l.runs, lr)
		l.mu.Unlock()
		close(ch)
	}, true
}

// stopAll stops every live run — its model call and tool calls end with
// their contexts — and waits, at most bound, for their loops to be over.
// A stopped run records nothing more (forgotten) and is handed over for
// recovery when its end reaches its actor (runEnded).
func (l *liveRuns) stopAll(bound time.Duration) int {
	l.mu.Lock()
	var dones []chan struct{}
	for lr, done := range l.runs {
		lr.lapsed.Store(true)
		lr.forgotten.Store(true)
		lr.stop(errLeaseLapsed)
		dones = append(dones, done)
	}
	l.mu.Unlock()
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	for _, d := range dones {
		select {
		case <-d:
		case <-deadline.C:
			return len(dones)
		}
	}
	return len(dones)
}

// count is how many runs are live.
func (l *liveRuns) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.runs)
}

// leaseLost is the partition group's OnLeaseLost: the runs of the
// incarnation that ends stop before the group beats as a new one.
func (r *Runner) leaseLost(incarnation string) {
	n := r.live.stopAll(r.cfg.StaleAfter)
	r.log.Warn().Str("incarnation", incarnation).Int("runs", n).Msg("lease lapsed: live runs stopped; their sessions go to recovery")
}

// inc is the runner's current incarnation (a new one after each lapse).
func (r *Runner) inc() string { return r.group.Incarnation() }

// leasedProvider refuses a model call once the runner's lease is out. The
// run's context ends at the lapse too; this check reads the clock itself,
// for a process resumed after a freeze, whose goroutines may run before
// the lapse has cancelled anything.
type leasedProvider struct {
	llm.Provider
	held func() bool
}

func (p leasedProvider) Stream(ctx context.Context, req llm.CompletionRequest) iter.Seq2[llm.StreamEvent, error] {
	if !p.held() {
		return func(yield func(llm.StreamEvent, error) bool) { yield(llm.StreamEvent{}, errLeaseLapsed) }
	}
	return p.Provider.Stream(ctx, req)
}

func (p leasedProvider) Complete(ctx context.Context, req llm.CompletionRequest) (llm.Message, llm.StopReason, llm.Usage, error) {
	if !p.held() {
		return llm.Message{}, "", llm.Usage{}, errLeaseLapsed
	}
	return p.Provider.Complete(ctx, req)
}
