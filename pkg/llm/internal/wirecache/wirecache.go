// Package wirecache keeps the wire encodings of what a provider has sent,
// so a request that repeats a session's history does not encode it again.
//
// Every model call sends the whole history, and the official SDKs'
// encoders cost several microseconds per message: a 2000-message session
// spent more time encoding its request than a runner spent on everything
// else of a run start. A session's history only grows, so nearly all of a
// request was encoded, byte for byte, by the call before. The providers
// still encode every part with their SDK; this package only remembers the
// bytes, found again as llm's package doc says (Caches): by the Head of
// the messages they were made from, or by a key holding everything they
// were made from.
package wirecache

import (
	"encoding/binary"
	"encoding/json"
	"slices"
	"sync"
	"unsafe"

	"jetway/pkg/llm"
)

const (
	// Limit bounds one provider's cache (one per runner).
	Limit = 32 << 20
	// MaxKey leaves big entries (images, long tool output) out of the
	// cache: their key costs as much memory as their encoding saves time.
	MaxKey = 64 << 10
)

// Cache holds encodings under their keys, in two generations of at most
// limit/2 bytes each: when the newer fills up, the older is dropped, so
// memory stays bounded however many sessions a runner has, and what is in
// use stays warm. It is safe for concurrent use.
type Cache struct {
	mu    sync.Mutex
	cur   map[string]json.RawMessage
	old   map[string]json.RawMessage
	size  int // bytes of keys and values in cur
	limit int
	// seen and seenOld find a turn's encoding by the identity of its
	// blocks, the address of the first (see Turn); they turn over with
	// cur and old.
	seen, seenOld map[*llm.ContentBlock]*seenTurn
	// chains and chainsOld hold the turns of the last request of each
	// history, by the identity of its first block (see Sequence); they turn
	// over with cur and old.
	chains, chainsOld map[chainKey]*chain
	// prefixes and prefixesOld hold the settled start of each history, by
	// the identity of its first block (see Prefix); they turn over with cur
	// and old.
	prefixes, prefixesOld map[chainKey]*Prefix
}

// seenTurn is a turn that was encoded: its kind and role, what its blocks
// held (a shallow copy: their strings are shared), and the encoding.
type seenTurn struct {
	kind   byte
	role   llm.Role
	blocks []llm.ContentBlock
	enc    json.RawMessage
}

// is reports whether st is the turn of kind and role made of blocks.
func (st *seenTurn) is(kind byte, role llm.Role, blocks []llm.ContentBlock) bool {
	return st.kind == kind && st.role == role && sameBlocks(st.blocks, blocks)
}

// blockSize is what a shallow copy of one block costs the cache.
const blockSize = int(unsafe.Sizeof(llm.ContentBlock{}))

// New returns a Cache of at most limit bytes of keys and encodings.
func New(limit int) *Cache {
	return &Cache{
		cur: map[string]json.RawMessage{}, old: map[string]json.RawMessage{}, limit: limit,
		seen: map[*llm.ContentBlock]*seenTurn{}, seenOld: map[*llm.ContentBlock]*seenTurn{},
		chains: map[chainKey]*chain{}, chainsOld: map[chainKey]*chain{},
		prefixes: map[chainKey]*Prefix{}, prefixesOld: map[chainKey]*Prefix{},
	}
}

// Turn returns the encoding of a turn of role made of blocks, as encode
// makes it; kind tells a provider's encodings of turns apart. A request
// holds the history's own blocks (the view shares them), so a turn sent
// before arrives in the same blocks: those are found by identity and
// checked field by field against what they held (strings compare by
// pointer first): tens of nanoseconds, where a key made of every field of
// every block cost a quarter of a microsecond per turn, for every turn of
// every request. Other turns (merged ones, a history read back from its
// transcript) are found by their key, as Get does.
func (c *Cache) Turn(kind byte, role llm.Role, blocks []llm.ContentBlock, encode func() (json.RawMessage, error)) (json.RawMessage, error) {
	st, err := c.turn(kind, role, blocks, encode)
	if err != nil {
		return nil, err
	}
	return st.enc, nil
}

// turn is Turn, returning what it found or made. The seenTurn is shared
// when it can be found by identity again (its blocks are set), a bare
// encoding when it cannot (no blocks, or a key over MaxKey).
func (c *Cache) turn(kind byte, role llm.Role, blocks []llm.ContentBlock, encode func() (json.RawMessage, error)) (*seenTurn, error) {
	if len(blocks) == 0 {
		enc, err := c.Get(AppendTurn([]byte{kind}, role, blocks), encode)
		return &seenTurn{enc: enc}, err
	}
	id := &blocks[0]
	c.mu.Lock()
	st, ok := c.seen[id]
	if !ok {
		if st, ok = c.seenOld[id]; ok && st.is(kind, role, blocks) {
			c.rememberLocked(id, st)
		}
	}
	c.mu.Unlock()
	if ok && st.is(kind, role, blocks) {
		return st, nil
	}
	key := AppendTurn([]byte{kind}, role, blocks)
	enc, err := c.Get(key, encode)
	if err != nil || len(key) > MaxKey {
		return &seenTurn{enc: enc}, err
	}
	st = &seenTurn{kind: kind, role: role, blocks: slices.Clone(blocks), enc: enc}
	c.mu.Lock()
	c.rememberLocked(id, st)
	c.mu.Unlock()
	return st, nil
}

func (c *Cache) rememberLocked(id *llm.ContentBlock, st *seenTurn) {
	cost := len(st.blocks)*blockSize + 64
	if c.size+cost > c.limit/2 {
		c.rotateLocked()
	}
	c.seen[id] = st
	c.size += cost
}

// rotateLocked drops the older generation: the newer becomes the older.
func (c *Cache) rotateLocked() {
	c.old, c.cur, c.size = c.cur, map[string]json.RawMessage{}, 0
	c.seenOld, c.seen = c.seen, map[*llm.ContentBlock]*seenTurn{}
	c.chainsOld, c.chains = c.chains, map[chainKey]*chain{}
	c.prefixesOld, c.prefixes = c.prefixes, map[chainKey]*Prefix{}
}

// sameBlocks reports whether a and b hold the same blocks, field by field:
// every field AppendTurn reads (a test changes each one in place).
func sameBlocks(a, b []llm.ContentBlock) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Type != y.Type || x.Text != y.Text || x.Signature != y.Signature || x.ID != y.ID ||
			x.Name != y.Name || string(x.Input) != string(y.Input) || x.ToolUseID != y.ToolUseID ||
			x.Content != y.Content || x.IsError != y.IsError || !sameImage(x.Image, y.Image) ||
			!slices.Equal(x.Images, y.Images) {
			return false
		}
	}
	return true
}

func sameImage(a, b *llm.Image) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Get returns the encoding cached under key, or encodes, caches and
// returns it. A key over MaxKey is encoded each time and not kept. The
// returned bytes are shared: read them, never change them.
func (c *Cache) Get(key []byte, encode func() (json.RawMessage, error)) (json.RawMessage, error) {
	if len(key) > MaxKey {
		return encode()
	}
	c.mu.Lock()
	enc, ok := c.cur[string(key)]
	if !ok {
		if enc, ok = c.old[string(key)]; ok {
			c.storeLocked(string(key), enc)
		}
	}
	c.mu.Unlock()
	if ok {
		return enc, nil
	}
	enc, err := encode()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.storeLocked(string(key), enc)
	c.mu.Unlock()
	return enc, nil
}

func (c *Cache) storeLocked(key string, enc json.RawMessage) {
	if c.size+len(key)+len(enc) > c.limit/2 {
		c.rotateLocked()
	}
	c.cur[key] = enc
	c.size += len(key) + len(enc)
}

// Len reports how many encodings the cache holds.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.old)
}

// Bytes reports how many bytes of keys, encodings and remembered blocks
// the cache holds.
func (c *Cache) Bytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.size
	for k, v := range c.old {
		n += len(k) + len(v)
	}
	for _, st := range c.seenOld {
		n += len(st.blocks)*blockSize + 64
	}
	for _, ch := range c.chainsOld {
		n += ch.cost()
	}
	for _, p := range c.prefixesOld {
		n += p.cost()
	}
	return n
}

// AppendString appends s preceded by its length, so that keys made of
// several strings never run together.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendTurn appends the key of a turn: its role and every field of every
// block, each string preceded by its length, so two different turns never
// share a key. It reads every field of llm.ContentBlock and llm.Image (a
// test fails when either gains one this does not know).
func AppendTurn(b []byte, role llm.Role, blocks []llm.ContentBlock) []byte {
	str := func(s string) { b = AppendString(b, s) }
	img := func(i llm.Image) {
		str(i.MediaType)
		str(i.Data)
		str(i.URL)
	}
	str(string(role))
	b = binary.AppendUvarint(b, uint64(len(blocks)))
	for k := range blocks {
		x := &blocks[k] // not a copy of the block: this runs for every block of every request
		str(string(x.Type))
		str(x.Text)
		str(x.Signature)
		str(x.ID)
		str(x.Name)
		str(string(x.Input))
		str(x.ToolUseID)
		str(x.Content)
		b = binary.AppendUvarint(b, uint64(len(x.Images)))
		for _, i := range x.Images {
			img(i)
		}
		flags := byte(0)
		if x.IsError {
			flags |= 1
		}
		if x.Image != nil {
			flags |= 2
		}
		b = append(b, flags)
		if x.Image != nil {
			img(*x.Image)
		}
	}
	return b
}
