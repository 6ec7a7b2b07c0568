package llm

import (
	"encoding/json"
	"fmt"
	"strings"
)

// InterruptedToolResult is the result the request view gives a tool call that
// has none in the history: a run died (or was cut) between recording the call
// and recording its result. Every provider refuses a tool call without a
// result, and the model must know to check rather than assume.
const InterruptedToolResult = "interrupted: unknown whether it completed"

// Boundary is what a compaction boundary record says, stored as JSON in the
// text of a KindCompactBoundary message. The history is append-only, so the
// boundary is appended at its end and names by index the first earlier
// message that stays visible.
type Boundary struct {
	BoundaryMeta
	// KeepFrom is the index in the history of the first message the request
	// view still shows after the summary; everything before it is folded.
	// The history is append-only, so the index never moves.
	KeepFrom int `json:"keep_from"`
}

// BoundaryMessage returns the record of a compaction boundary.
func BoundaryMessage(b Boundary) Message {
	raw, _ := json.Marshal(b) // a struct of ints and strings always marshals
	return Message{Role: RoleUser, Kind: KindCompactBoundary, Content: []ContentBlock{{Type: BlockText, Text: string(raw)}}}
}

// ParseBoundary reads the Boundary a KindCompactBoundary message records. A
// record that does not parse folds everything before it, the safe reading.
func ParseBoundary(m Message) Boundary {
	var b Boundary
	if err := json.Unmarshal([]byte(m.Text()), &b); err != nil {
		return Boundary{}
	}
	return b
}

// VisibleRange reports what of msgs a request shows: the index of the last
// compaction boundary (-1 if none), its summary's index (-1 if none) and the
// indexes of the ordinary messages the view keeps, in order.
func VisibleRange(msgs []Message) (boundary, summary int, keep []int) {
	boundary, summary = -1, -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Kind == KindCompactBoundary {
			boundary = i
			break
		}
	}
	from := 0
	if boundary >= 0 {
		b := ParseBoundary(msgs[boundary])
		from = min(max(b.KeepFrom, 0), boundary)
		for i := boundary + 1; i < len(msgs); i++ {
			if msgs[i].Kind == KindCompactSummary {
				summary = i
				break
			}
		}
	}
	return boundary, summary, ordinaryFrom(msgs, from)
}

// ordinaryFrom lists the indexes from from on of the messages that are
// neither a compaction boundary nor a summary.
func ordinaryFrom(msgs []Message, from int) []int {
	keep := make([]int, 0, len(msgs)-from)
	for i := from; i < len(msgs); i++ {
		if msgs[i].Kind == KindCompactBoundary || msgs[i].Kind == KindCompactSummary {
			continue
		}
		keep = append(keep, i)
	}
	return keep
}

// viewOrder lists the messages a request view shows, in view order: the
// summary of the last boundary first, then the messages it keeps.
func viewOrder(msgs []Message) []int {
	_, summary, keep := VisibleRange(msgs)
	if summary >= 0 {
		return append([]int{summary}, keep...)
	}
	return keep
}

// MessagesForAPI is the pure per-request view of a recorded history: what a
// provider is sent. It starts at the last compaction boundary (its summary
// first, then the messages the boundary keeps), drops host-only fields (Kind,
// Delivers), gives every tool call a result (InterruptedToolResult where the
// history has none, so recovered runs replay), drops results whose call is
// not in view, puts tool results first in their user turn and merges
// consecutive user turns. Images recorded before the last KindImageRefused
// record are shown as a note instead, so a session goes on after a refused
// image. msgs is never modified: the history is append-only and the request
// is only a view of it.
//
// A message the view leaves as it is shares its blocks with the history
// (its Content capped, so an append to it copies): the view's blocks are
// read-only. Copy a message's Content before changing a block of it, as
// the compactor and the providers do.
func MessagesForAPI(msgs []Message) []Message {
	out, _, _ := scanView(msgs, viewOrder(msgs), lastRefusal(msgs))
	return mergeUsers(out)
}

// lastRefusal is the index of the last KindImageRefused record (-1 if none).
func lastRefusal(msgs []Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Kind == KindImageRefused {
			return i
		}
	}
	return -1
}

// scanView builds the view of the messages of msgs that order names, in
// view order, before user turns are merged. Images of messages before
// refused are shown as notes. It also reports the position in the result
// of the last assistant turn (-1 if none) and that turn's index in msgs:
// nothing before an assistant turn depends on what follows it, which is
// what lets ViewCache build a growing history's view from its end.
func scanView(msgs []Message, order []int, refused int) (out []Message, lastAssistant, from int) {
	// at is the k-th message in view order, by pointer: a Message is 96
	// bytes, and this runs for every message of every request.
	at := func(k int) *Message {
		i := order[k]
		if i < refused {
			m := withoutImages(msgs[i])
			return &m
		}
		return &msgs[i]
	}
	// Every request carries the whole visible history, so the view is built
	// with one allocation for its messages, and their blocks are the
	// history's own wherever the view leaves them as they are: at thousands
	// of messages, copies were most of a run start's garbage.
	var c copier
	out = make([]Message, 0, len(order))
	lastAssistant, from = -1, -1
	for k := 0; k < len(order); k++ {
		m := at(k)
		if len(m.Content) == 0 {
			continue
		}
		if m.Role == RoleAssistant {
			lastAssistant, from = len(out), order[k]
			out = append(out, c.clean(m))
			if !hasBlock(m.Content, BlockToolUse) {
				continue
			}
			// The results for these calls must open the next user turn.
			var next *Message
			if k+1 < len(order) && msgs[order[k+1]].Role == RoleUser {
				next = at(k + 1)
				k++
			}
			out = append(out, c.pairResults(m, next))
			continue
		}
		u := c.clean(m)
		u.Content = dropToolResults(u.Content) // results whose call is not in view
		if len(u.Content) == 0 {
			continue
		}
		out = append(out, u)
	}
	return out, lastAssistant, from
}

// copier copies messages without their host-only fields. Blocks the view
// makes (paired tool results) are carved from one arena. Every Content it
// hands out is capped at its length, so an append to one reallocates
// instead of writing over the next message's blocks or the history's.
type copier struct{ arena []ContentBlock }

func (c *copier) clean(m *Message) Message {
	return Message{ID: m.ID, Role: m.Role, Content: m.Content[:len(m.Content):len(m.Content)]}
}

// pairResults builds the user turn that follows the assistant turn m with
// tool calls: one result per call in call order (the first the next user
// turn has for it, synthesised where it has none), then the rest of the
// next user turn's content. Results for calls of other turns cannot be
// paired and are left out.
func (c *copier) pairResults(m, next *Message) Message {
	if next != nil && paired(m, next) {
		return c.clean(next) // as recorded: nothing to make
	}
	from := len(c.arena)
	for _, t := range m.Content {
		if t.Type != BlockToolUse {
			continue
		}
		r, ok := resultFor(next, t.ID)
		if !ok {
			r = ContentBlock{Type: BlockToolResult, ToolUseID: t.ID, Content: InterruptedToolResult, IsError: true}
		}
		c.arena = append(c.arena, r)
	}
	u := Message{Role: RoleUser}
	if next != nil {
		u.ID = next.ID
		for _, b := range next.Content {
			if b.Type != BlockToolResult {
				c.arena = append(c.arena, b)
			}
		}
	}
	u.Content = c.arena[from:len(c.arena):len(c.arena)]
	return u
}

// paired reports whether next already is the turn pairResults would make
// after m: one result per call of m, in call order, then everything else.
func paired(m, next *Message) bool {
	k := 0
	for _, t := range m.Content {
		if t.Type != BlockToolUse {
			continue
		}
		if k >= len(next.Content) || next.Content[k].Type != BlockToolResult || next.Content[k].ToolUseID != t.ID {
			return false
		}
		k++
	}
	for _, b := range next.Content[k:] {
		if b.Type == BlockToolResult {
			return false
		}
	}
	return true
}

// resultFor returns the first tool result for call id in m.
func resultFor(m *Message, id string) (ContentBlock, bool) {
	if m == nil {
		return ContentBlock{}, false
	}
	for _, b := range m.Content {
		if b.Type == BlockToolResult && b.ToolUseID == id {
			return b, true
		}
	}
	return ContentBlock{}, false
}

// hasBlock reports whether bs has a block of type t. It reads the blocks in
// place: a block is 176 bytes, and slices.ContainsFunc copies each one.
func hasBlock(bs []ContentBlock, t BlockType) bool {
	for i := range bs {
		if bs[i].Type == t {
			return true
		}
	}
	return false
}

func dropToolResults(bs []ContentBlock) []ContentBlock {
	return KeepBlocks(bs, func(b *ContentBlock) bool { return b.Type != BlockToolResult })
}

// KeepBlocks returns the blocks of bs that keep accepts: bs itself when it
// accepts them all, as it almost always does (no copy, and a request that
// sends the history's own blocks lets a provider find their encodings by
// identity), else a new slice. keep reads each block in place.
func KeepBlocks(bs []ContentBlock, keep func(*ContentBlock) bool) []ContentBlock {
	for i := range bs {
		if keep(&bs[i]) {
			continue
		}
		out := bs[:i:i] // appending copies
		for j := i + 1; j < len(bs); j++ {
			if keep(&bs[j]) {
				out = append(out, bs[j])
			}
		}
		return out
	}
	return bs
}

// mergeUsers folds runs of user turns into one (tool results first, see
// ResultsFirst), as providers want strictly alternating roles. It works in place: ms is the
// view's own slice. A run of n turns is folded in one pass, not n.
func mergeUsers(ms []Message) []Message {
	first := 1 // the first message a fold changes: the usual view has none
	for first < len(ms) && !(ms[first].Role == RoleUser && ms[first-1].Role == RoleUser) {
		first++
	}
	if first >= len(ms) {
		return ms
	}
	out := ms[:first-1]
	for i := first - 1; i < len(ms); {
		m := ms[i]
		j := i + 1
		for j < len(ms) && m.Role == RoleUser && ms[j].Role == RoleUser {
			j++
		}
		if j > i+1 {
			var blocks []ContentBlock
			for _, u := range ms[i:j] {
				blocks = append(blocks, u.Content...)
			}
			m.Content = ResultsFirst(blocks)
		}
		out = append(out, m)
		i = j
	}
	return out
}

// withoutImages copies m with its images replaced by notes.
func withoutImages(m Message) Message {
	if len(m.Images()) == 0 {
		return m
	}
	m.Content = append([]ContentBlock(nil), m.Content...)
	for j, b := range m.Content {
		switch {
		case b.Type == BlockImage:
			m.Content[j] = ContentBlock{Type: BlockText, Text: ImageRemovedNote}
		case b.Type == BlockToolResult && len(b.Images) > 0:
			if b.Content != "" {
				b.Content += "\n"
			}
			b.Content += fmt.Sprintf(ToolImagesRemovedNote, len(b.Images))
			b.Images = nil
			m.Content[j] = b
		}
	}
	return m
}

// EstimateTokens is a rough, provider-neutral size of msgs in tokens (about
// four characters each, and ImageTokens per image), for compaction gates
// before a provider has reported a real count.
func EstimateTokens(msgs []Message) int {
	n := 0
	for i := range msgs {
		n += 4
		for j := range msgs[i].Content {
			b := &msgs[i].Content[j]
			n += (len(b.Text) + len(b.Content) + len(b.Input) + len(b.Name) + 3) / 4
			n += ImageTokens * len(b.Images)
			if b.Image != nil {
				n += ImageTokens
			}
		}
	}
	return n
}

// IsInterrupted reports whether a tool result is the view's stand-in for a
// missing one.
func IsInterrupted(b ContentBlock) bool {
	return b.Type == BlockToolResult && strings.HasPrefix(b.Content, InterruptedToolResult)
}
