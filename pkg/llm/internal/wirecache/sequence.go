package wirecache

import (
	"encoding/json"
	"unsafe"

	"jetway/pkg/llm"
)

// A Sequence encodes the turns of one request, in order. A session's next
// request repeats its last one turn for turn and adds a few at the end, so
// the cache keeps each history's last request as a chain of the turns it
// sent, and a Sequence finds each turn at its position in that chain: a
// pointer comparison and a field-by-field check, with no map lookup and
// no lock. With a 2000-message history the lookups by identity alone (see
// Turn) were half a millisecond of every run start.
//
// A history is told apart by the address of its first turn's first block,
// so a compaction or a history read back from its transcript starts a new
// chain, and the old one ages out with its generation. A Sequence is for
// one goroutine; call Done when the request's turns are all encoded.
type Sequence struct {
	c    *Cache
	kind byte
	head chainKey
	ch   *chain // owned by this Sequence until Done
	n    int    // turns encoded so far
}

type chainKey struct {
	kind byte
	id   *llm.ContentBlock
}

// A chain is the turns of a history's last request. A Sequence takes it
// out of the cache while it works, so two requests of one history at once
// (which a runner never makes) would each build their own rather than
// share one.
type chain struct {
	links []link
}

// A link is one turn of a chain: the address of its first block, and what
// was seen there. A turn that cannot be found by identity has a nil id.
type link struct {
	id *llm.ContentBlock
	st *seenTurn
}

const linkSize = int(unsafe.Sizeof(link{}))

func (ch *chain) cost() int { return cap(ch.links)*linkSize + 64 }

// Sequence starts encoding a request of kind whose first turn is made of
// first.
func (c *Cache) Sequence(kind byte, first []llm.ContentBlock) *Sequence {
	s := &Sequence{c: c, kind: kind}
	if len(first) == 0 {
		s.ch = &chain{}
		return s
	}
	s.head = chainKey{kind, &first[0]}
	c.mu.Lock()
	ch, ok := c.chains[s.head]
	if ok {
		delete(c.chains, s.head)
		c.size -= ch.cost()
	} else if ch, ok = c.chainsOld[s.head]; ok {
		delete(c.chainsOld, s.head)
	}
	c.mu.Unlock()
	if !ok {
		ch = &chain{}
	}
	s.ch = ch
	return s
}

// Turn returns the encoding of the request's next turn, as Cache.Turn
// does.
func (s *Sequence) Turn(role llm.Role, blocks []llm.ContentBlock, encode func() (json.RawMessage, error)) (json.RawMessage, error) {
	i := s.n
	if i < len(s.ch.links) && len(blocks) > 0 {
		if l := s.ch.links[i]; l.id == &blocks[0] && l.st.is(s.kind, role, blocks) {
			s.n++
			return l.st.enc, nil
		}
	}
	st, err := s.c.turn(s.kind, role, blocks, encode)
	if err != nil {
		return nil, err
	}
	l := link{st: st}
	if st.blocks != nil {
		l.id = &blocks[0]
	}
	s.put(l)
	return st.enc, nil
}

// Skip passes over a turn the provider encoded itself (one that differs
// from its cached form, such as the last turn with its cache breakpoint).
func (s *Sequence) Skip() { s.put(link{}) }

// put sets the next link: the chain is cut there, as the rest followed a
// turn that has now changed.
func (s *Sequence) put(l link) {
	clear(s.ch.links[s.n:]) // what followed, so it is not kept alive
	s.ch.links = append(s.ch.links[:s.n], l)
	s.n++
}

// Done gives the chain back to the cache, cut to this request's turns,
// for the history's next request.
func (s *Sequence) Done() {
	if s.head.id == nil {
		return
	}
	clear(s.ch.links[s.n:])
	s.ch.links = s.ch.links[:s.n]
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.size+s.ch.cost() > c.limit/2 {
		c.rotateLocked()
	}
	if old, ok := c.chains[s.head]; ok {
		c.size -= old.cost()
	}
	c.chains[s.head] = s.ch
	c.size += s.ch.cost()
}
