// Package wirecache keeps the wire encodings of what a provider has sent,
// so a request that repeats a session's history does not encode it again.
//
// Every model call sends the whole history, and the official SDKs'
// encoders cost several microseconds per message: a 2000-message session
// spent more time encoding its request than a runner spent on everything
// else of a run start. A session's history only grows, so nearly all of a
// request was encoded, byte for byte, by the call before. The providers
// still encode every part with their SDK; this package only remembers the
// bytes, under a key holding everything they were made from.
package wirecache

import (
	"encoding/binary"
	"encoding/json"
	"sync"

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
}

// New returns a Cache of at most limit bytes of keys and encodings.
func New(limit int) *Cache {
	return &Cache{cur: map[string]json.RawMessage{}, old: map[string]json.RawMessage{}, limit: limit}
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
		c.old, c.cur, c.size = c.cur, map[string]json.RawMessage{}, 0
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

// Bytes reports how many bytes of keys and encodings the cache holds.
func (c *Cache) Bytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.size
	for k, v := range c.old {
		n += len(k) + len(v)
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
