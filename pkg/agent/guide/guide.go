// Package guide holds what the agent loop hands the model before each call
// without being asked: the NoticeGuide of host notices.
//
// A busy session cannot start a run for an event that arrives (a job exited,
// a person typed, another system sent a CloudEvent); it parks the event here
// and the loop hands it to the model before its next call. Delivery is
// append-only — one user turn at the end of the history — so earlier history
// is never edited and a provider's prompt cache keeps matching the prefix.
package guide

import (
	"strings"
	"sync"

	"jetway/pkg/llm"
)

// Notice is one thing waiting for the model: the host-side id of the event
// it came from (a CloudEvent id) and the text the model reads.
type Notice struct {
	ID   string
	Text string
}

// NoticeGuide is a queue of notices for the model's next call, shared
// between the host (which pushes) and the loop (which delivers). It is safe
// for concurrent use.
type NoticeGuide struct {
	mu        sync.Mutex
	pending   []Notice
	delivered []Notice
}

// NewNoticeGuide returns an empty guide.
func NewNoticeGuide() *NoticeGuide { return &NoticeGuide{} }

// Push queues a notice for the model's next call. A notice whose id is
// already pending is ignored: a redelivered event must not reach the model
// twice.
func (g *NoticeGuide) Push(id, text string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if id != "" && indexOf(g.pending, id) >= 0 {
		return
	}
	g.pending = append(g.pending, Notice{ID: id, Text: text})
}

// Withdraw removes a notice that is still pending — one a newer notice
// supersedes before the model read it — and reports whether it was
// pending. A notice already delivered cannot be withdrawn.
func (g *NoticeGuide) Withdraw(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := indexOf(g.pending, id)
	if i < 0 {
		return false
	}
	g.pending = append(g.pending[:i], g.pending[i+1:]...)
	return true
}

// HasPending reports whether anything is still waiting for the model. A run
// that ended with notices pending never let the model read them.
func (g *NoticeGuide) HasPending() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending) > 0
}

// IsPending reports whether the notice id waits for the model's next call.
func (g *NoticeGuide) IsPending(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return indexOf(g.pending, id) >= 0
}

// TakePending takes what is still waiting, e.g. to be the next run's input.
func (g *NoticeGuide) TakePending() []Notice {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.pending
	g.pending = nil
	return p
}

// TakeDelivered takes what the guide has handed to the model since the last
// call, in delivery order.
func (g *NoticeGuide) TakeDelivered() []Notice {
	g.mu.Lock()
	defer g.mu.Unlock()
	d := g.delivered
	g.delivered = nil
	return d
}

// Turn takes every pending notice and returns the one user turn that hands
// them to the model (Kind llm.KindNotice, Delivers = their ids, texts joined
// by blank lines), or ok=false when nothing is pending. The taken notices
// count as delivered; if the turn is then never recorded, give them back
// with Return.
func (g *NoticeGuide) Turn() (turn llm.Message, taken []Notice, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) == 0 {
		return llm.Message{}, nil, false
	}
	taken = g.pending
	g.pending = nil
	g.delivered = append(g.delivered, taken...)
	texts := make([]string, len(taken))
	var ids []string
	for i, n := range taken {
		texts[i] = n.Text
		if n.ID != "" {
			ids = append(ids, n.ID)
		}
	}
	turn = llm.UserText(strings.Join(texts, "\n\n"))
	turn.Kind = llm.KindNotice
	turn.Delivers = ids
	return turn, taken, true
}

// Return puts back notices taken for a turn the model never got (its record
// was refused, or the run was cancelled before recording it): they keep
// their original order and go before the notices that arrived meanwhile,
// and no longer count as delivered. A
// returned notice whose id was pushed again meanwhile is kept once, in its
// original place.
func (g *NoticeGuide) Return(ns []Notice) {
	if len(ns) == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	back := make([]Notice, 0, len(ns)+len(g.pending))
	back = append(back, ns...)
	for _, n := range g.pending {
		if n.ID == "" || indexOf(ns, n.ID) < 0 {
			back = append(back, n)
		}
	}
	g.pending = back
	kept := g.delivered[:0]
	for _, d := range g.delivered {
		if !containsNotice(ns, d) {
			kept = append(kept, d)
		}
	}
	g.delivered = kept
}

func indexOf(ns []Notice, id string) int {
	for i, n := range ns {
		if n.ID == id {
			return i
		}
	}
	return -1
}

func containsNotice(ns []Notice, x Notice) bool {
	for _, n := range ns {
		if n == x {
			return true
		}
	}
	return false
}
