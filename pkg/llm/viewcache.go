package llm

import "sync"

// ViewCache builds the request views of one growing history, each from what
// the history added since the view before. Every request sends the whole
// visible history, so a run start of a 2000-message session walked every
// block of it twice (the view, then its size) before the first byte went to
// the provider, with cold caches: about half a millisecond of the run start.
//
// What is settled is kept: the view of everything before the last
// assistant turn it saw. Nothing there depends on what follows (an
// assistant turn is never merged, and it pairs its tool calls only with the
// turn after it), so the next view is that, then the view of the rest,
// built afresh. A history is recognised by the Heads of its first and last
// messages (see "Caches" in the package doc). An appended boundary,
// summary or image refusal changes what earlier messages look like, and
// the view is built in full again.
//
// Views are built in one buffer that begins with what is settled, so a view
// costs what the history added, not a copy of the whole: the 2000 messages
// of a view are 192 KB, and copying them cost more than building them did.
// So a view is valid until the next View, which writes over its tail: a
// caller that keeps one longer, or changes it, copies it first.
//
// One cache serves one history (a runner keeps one per session); it is
// safe for concurrent use.
type ViewCache struct {
	mu          sync.Mutex
	n           int // length of the history last viewed; 0: nothing kept
	first, last Head
	refused     int       // lastRefusal of that history
	from        int       // where the unsettled part begins in it; -1: nothing settled
	buf         []Message // the view; its first settled messages are the view of the history before from
	settled     int
	tokens      int // EstimateTokens of the settled messages
}

// View returns MessagesForAPI(msgs) and EstimateTokens of it. The view is
// read-only and valid until the next View; its blocks are shared, as
// MessagesForAPI's are. Its first settled messages are settled as
// CompletionRequest.Settled means it: their blocks are never written
// again, and the next views of this history begin with them for as long
// as it is only appended to (a boundary, summary or image refusal aside).
func (vc *ViewCache) View(msgs []Message) (view []Message, tokens, settled int) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	var order []int
	if vc.extends(msgs) {
		order = ordinaryFrom(msgs, vc.from) // what follows the settled part
	} else {
		order = viewOrder(msgs)
		vc.refused, vc.from, vc.settled, vc.tokens = lastRefusal(msgs), -1, 0, 0
	}
	out, lastAssistant, from := scanView(msgs, order, vc.refused)
	return vc.keep(msgs, out, lastAssistant, from)
}

// extends reports whether msgs is the history last viewed with messages
// appended that leave the view of what was settled as it was.
func (vc *ViewCache) extends(msgs []Message) bool {
	if vc.n == 0 || vc.from < 0 || len(msgs) < vc.n {
		return false
	}
	if HeadOf(&msgs[0]) != vc.first || HeadOf(&msgs[vc.n-1]) != vc.last {
		return false
	}
	for i := vc.n; i < len(msgs); i++ {
		switch msgs[i].Kind {
		case KindCompactBoundary, KindCompactSummary, KindImageRefused:
			return false
		}
	}
	return true
}

// keep settles what the new part of the view holds before its last
// assistant turn, and returns the whole view with its size and how much of
// it is settled.
func (vc *ViewCache) keep(msgs, out []Message, lastAssistant, from int) ([]Message, int, int) {
	var settling, open []Message
	if lastAssistant >= 0 {
		settling, open = mergeUsers(out[:lastAssistant]), mergeUsers(out[lastAssistant:])
	} else {
		open = mergeUsers(out)
	}
	used := len(vc.buf)
	vc.buf = append(append(vc.buf[:vc.settled], settling...), open...)
	if used > len(vc.buf) {
		clear(vc.buf[len(vc.buf):used]) // an older, longer view's tail: not kept alive
	}
	view := vc.buf[:len(vc.buf):len(vc.buf)]
	if lastAssistant >= 0 {
		vc.settled += len(settling)
		vc.tokens += EstimateTokens(settling)
		vc.from = from
	}
	vc.n = len(msgs)
	if vc.n > 0 {
		vc.first, vc.last = HeadOf(&msgs[0]), HeadOf(&msgs[vc.n-1])
	}
	return view, vc.tokens + EstimateTokens(open), vc.settled
}
