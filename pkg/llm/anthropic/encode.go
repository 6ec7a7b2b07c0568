package anthropic

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"

	"jetway/pkg/llm"
)

// encodedTurns keeps the wire encoding of turns the provider has sent.
//
// Every call sends the whole history, and the SDK's encoder costs several
// microseconds per message: a 2000-message session spent more time
// encoding its request than the runner spent on everything else of a run
// start. A session's history only grows, so all of a request but its last
// turn was encoded, byte for byte, by the call before.
//
// A turn's key is its role and every field of its blocks (appendKey):
// exactly what its encoding is made from, so a changed turn can never be
// served a stale encoding. The cache holds two generations of at most limit/2 bytes each;
// when the newer fills up, the older is dropped, so memory stays bounded
// however many sessions a runner has, and turns in use stay warm.
type encodedTurns struct {
	mu    sync.Mutex
	cur   map[string]json.RawMessage
	old   map[string]json.RawMessage
	size  int // bytes of keys and values in cur
	limit int
}

const (
	// encodedLimit bounds the cache of one provider (one per runner).
	encodedLimit = 32 << 20
	// encodedMaxKey leaves big turns (images, long tool output) out of the
	// cache: their key costs as much memory as their encoding saves time.
	encodedMaxKey = 64 << 10
)

func newEncodedTurns(limit int) *encodedTurns {
	return &encodedTurns{cur: map[string]json.RawMessage{}, old: map[string]json.RawMessage{}, limit: limit}
}

// encode returns the JSON array of turns as the API takes it. With
// breakpoint, the last turn carries a cache breakpoint (incremental
// prompt caching) and is encoded afresh: it is the only one that differs
// from its cached form.
func (c *encodedTurns) encode(turns []turn, breakpoint bool) (json.RawMessage, error) {
	var buf bytes.Buffer
	buf.Grow(len(turns) * 96)
	var scratch []byte
	buf.WriteByte('[')
	for i, t := range turns {
		if i > 0 {
			buf.WriteByte(',')
		}
		last := i == len(turns)-1
		var (
			enc []byte
			err error
		)
		if last && breakpoint {
			m := t.param()
			cacheLastBlock(m)
			enc, err = json.Marshal(m)
		} else {
			enc, err = c.turn(t, &scratch)
		}
		if err != nil {
			return nil, fmt.Errorf("turn %d (%s): %w", i, t.role, err)
		}
		buf.Write(enc)
	}
	buf.WriteByte(']')
	return buf.Bytes(), nil
}

// turn returns t's encoding, from the cache when it was sent before.
// scratch is a buffer the caller reuses for keys.
func (c *encodedTurns) turn(t turn, scratch *[]byte) (json.RawMessage, error) {
	key := appendKey((*scratch)[:0], t)
	*scratch = key
	if len(key) > encodedMaxKey {
		return json.Marshal(t.param())
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
	enc, err := json.Marshal(t.param())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.storeLocked(string(key), enc)
	c.mu.Unlock()
	return enc, nil
}

// appendKey appends t's cache key: its role and every field of every
// block, each string preceded by its length, so two different turns never
// share a key. It reads every field of llm.ContentBlock and llm.Image (a
// test fails when either gains one this does not know).
func appendKey(b []byte, t turn) []byte {
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	img := func(i llm.Image) {
		str(i.MediaType)
		str(i.Data)
		str(i.URL)
	}
	str(string(t.role))
	b = binary.AppendUvarint(b, uint64(len(t.blocks)))
	for _, x := range t.blocks {
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

func (c *encodedTurns) storeLocked(key string, enc json.RawMessage) {
	if c.size+len(key)+len(enc) > c.limit/2 {
		c.old, c.cur, c.size = c.cur, map[string]json.RawMessage{}, 0
	}
	c.cur[key] = enc
	c.size += len(key) + len(enc)
}

// cached reports how many turns the cache holds (for tests).
func (c *encodedTurns) cached() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.old)
}
