package wirecache

import (
	"encoding/json"
	"unsafe"

	"jetway/pkg/llm"
)

// A Prefix is the encoding of the settled start of a history (see
// llm.CompletionRequest.Settled): its turns, encoded and joined by commas,
// ready to be copied into the next request as they are.
//
// With a 2000-message history, finding each turn again, even by identity
// (see Sequence), was the larger part of a request's cost: the provider
// walked, shaped and checked every block it had sent the call before. The
// caller's promise that the settled messages never change lets a provider
// take them as one block of bytes, after checking only that they are still
// the same messages (the address, count and role of each one's blocks).
//
// A Prefix is taken out of the cache for one request (TakePrefix), grown
// by what that request settled (Extend) and given back (Keep); two
// requests of one history at once would each start without one.
type Prefix struct {
	c    *Cache
	key  chainKey
	msgs []llm.Head // identity of each message covered (see "Caches" in llm)
	// Last is the role of the last turn the covered messages make, and
	// Bytes holds their encodings joined by commas (no brackets): the
	// start of the request's message array.
	Last  llm.Role
	Bytes []byte
}

const headSize = int(unsafe.Sizeof(llm.Head{}))

// Messages is how many messages of the history p covers.
func (p *Prefix) Messages() int { return len(p.msgs) }

func (p *Prefix) cost() int { return cap(p.msgs)*headSize + cap(p.Bytes) + 64 }

// TakePrefix returns the prefix kept for the history msgs of kind, if
// every message it covers is still where it was, and is within the
// settled ones; otherwise an empty one, to Extend from the history's
// start. The prefix is the caller's until Keep.
func (c *Cache) TakePrefix(kind byte, msgs []llm.Message, settled int) *Prefix {
	if len(msgs) == 0 || len(msgs[0].Content) == 0 {
		return &Prefix{c: c}
	}
	key := chainKey{kind, &msgs[0].Content[0]}
	c.mu.Lock()
	p, ok := c.prefixes[key]
	if ok {
		delete(c.prefixes, key)
		c.size -= p.cost()
	} else if p, ok = c.prefixesOld[key]; ok {
		delete(c.prefixesOld, key)
	}
	c.mu.Unlock()
	if !ok || !p.covers(msgs, settled) {
		return &Prefix{c: c, key: key}
	}
	return p
}

// covers reports whether msgs begins with the messages p was made of, all
// of them settled.
func (p *Prefix) covers(msgs []llm.Message, settled int) bool {
	if len(p.msgs) > min(settled, len(msgs)) {
		return false
	}
	for i := range p.msgs {
		if llm.HeadOf(&msgs[i]) != p.msgs[i] {
			return false
		}
	}
	return true
}

// Extend adds msgs, the next settled messages of the history, which make
// turns ending with a turn of role last, encoded as parts (an empty part,
// a turn that sends nothing, adds no element).
func (p *Prefix) Extend(msgs []llm.Message, last llm.Role, parts []json.RawMessage) {
	if len(msgs) == 0 {
		return
	}
	for i := range msgs {
		p.msgs = append(p.msgs, llm.HeadOf(&msgs[i]))
	}
	for _, part := range parts {
		if len(part) == 0 {
			continue
		}
		if len(p.Bytes) > 0 {
			p.Bytes = append(p.Bytes, ',')
		}
		p.Bytes = append(p.Bytes, part...)
	}
	p.Last = last
}

// Shaped is a request's history past its prefix, in the API's turns (see
// llm.Wire.AppendTurns): the first Settling are of the messages up to
// Settled, and join the prefix once encoded; the rest are open.
type Shaped struct {
	Turns    []llm.Turn
	Settling int
	Settled  int
}

// ShapeAfter shapes msgs past what p covers into w's turns. Shaping the
// two parts apart is shaping them together unless a turn would merge
// across the line between them (the API wants roles to alternate, and
// shaping drops blocks it refuses): across the prefix's end it reports
// false, and the prefix cannot be used; across settled, all of it is open.
// The last turn is never settled: a provider may encode it differently (a
// cache breakpoint).
func ShapeAfter(msgs []llm.Message, p *Prefix, settled int, w llm.Wire) (Shaped, bool) {
	from := p.Messages()
	turns := w.AppendTurns(make([]llm.Turn, 0, len(msgs)-from), msgs[from:settled])
	n := len(turns)
	turns = w.AppendTurns(turns, msgs[settled:])
	sh := Shaped{Turns: turns, Settling: n, Settled: settled}
	if n == len(turns) || (n > 0 && turns[n-1].Role == turns[n].Role) {
		sh = Shaped{Turns: w.AppendTurns(turns[:0], msgs[from:]), Settled: from}
	}
	if from > 0 && len(sh.Turns) > 0 && sh.Turns[0].Role == p.Last {
		return Shaped{}, false
	}
	return sh, true
}

// Reset empties p, to Extend from the history's start.
func (p *Prefix) Reset() {
	p.msgs, p.Bytes, p.Last = p.msgs[:0], p.Bytes[:0], ""
}

// Keep gives p back to its cache for the history's next request. A prefix
// bigger than half the cache is dropped.
func (p *Prefix) Keep() {
	c := p.c
	if c == nil || p.key.id == nil || len(p.msgs) == 0 || p.cost() > c.limit/2 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.size+p.cost() > c.limit/2 {
		c.rotateLocked()
	}
	if old, ok := c.prefixes[p.key]; ok {
		c.size -= old.cost()
	}
	c.prefixes[p.key] = p
	c.size += p.cost()
}
