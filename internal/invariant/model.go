package invariant

import (
	"fmt"
	"sort"
	"time"
)

// OneAtTheModel: no two model calls of one session are in flight at once —
// not only in the log (one live run), at the model, where a second call
// is double cost and, with tools, double effects.
const OneAtTheModel = "one run at the model"

// ModelCall is one call the model answered for a session: which runner
// made it, and when the model began and stopped working on it.
type ModelCall struct {
	Runner     string
	Start, End time.Time
}

// Window is a span of time: here, a runner frozen (SIGSTOP to SIGCONT).
type Window struct {
	From, To time.Time
}

// checkOneAtTheModel fails a session two of whose model calls overlap. One
// overlap is counted apart: a call whose runner was frozen while it was in
// flight. A frozen process cannot cancel anything, and the model works on
// until the call is done; that is the documented bound of the lease
// (ARCHITECTURE.md, Leases), not a violation of it.
func checkOneAtTheModel(s Session, calls []ModelCall, pauses map[string][]Window) Result {
	res := Result{Invariant: OneAtTheModel, Subject: s.String()}
	calls = append([]ModelCall(nil), calls...)
	sort.Slice(calls, func(i, j int) bool { return calls[i].Start.Before(calls[j].Start) })
	frozen := 0
	for i, b := range calls {
		for _, a := range calls[:i] {
			if !a.End.After(b.Start) {
				continue
			}
			if frozenInFlight(a, pauses[a.Runner]) {
				frozen++
				continue
			}
			res.Detail = fmt.Sprintf("a call by %s (%s to %s) was in flight when %s's began (%s)",
				a.Runner, clock(a.Start), clock(a.End), b.Runner, clock(b.Start))
			return res
		}
	}
	res.OK = true
	res.Detail = fmt.Sprintf("%d calls, never two at once", len(calls))
	if frozen > 0 {
		res.Detail = fmt.Sprintf("%d calls; %d overlapped by a call in flight while its runner was frozen", len(calls), frozen)
	}
	return res
}

// frozenInFlight reports whether c's runner was frozen while c was in
// flight.
func frozenInFlight(c ModelCall, pauses []Window) bool {
	for _, p := range pauses {
		if p.From.Before(c.End) && p.To.After(c.Start) {
			return true
		}
	}
	return false
}

func clock(t time.Time) string { return t.Format("15:04:05.000") }
