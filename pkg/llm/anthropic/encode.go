package anthropic

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"jetway/pkg/llm"
)

// encodings keeps the wire encoding of what the provider has sent: the
// turns of the history, and the tools and system blocks.
//
// Every call sends the whole history, and the SDK's encoder costs several
// microseconds per message: a 2000-message session spent more time
// encoding its request than the runner spent on everything else of a run
// start. A session's history only grows, so all of a request but its last
// turn was encoded, byte for byte, by the call before; its tools and system
// prompt, too.
//
// A key holds everything its encoding is made from (appendKey for turns),
// so a changed turn or tool is never served a stale encoding. The cache
// holds two generations of at most limit/2 bytes each; when the newer fills
// up, the older is dropped, so memory stays bounded however many sessions
// a runner has, and what is in use stays warm.
type encodings struct {
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

func newEncodings(limit int) *encodings {
	return &encodings{cur: map[string]json.RawMessage{}, old: map[string]json.RawMessage{}, limit: limit}
}

// get returns the encoding cached under key, or encodes, caches and
// returns it. A key over encodedMaxKey is encoded each time and not kept.
func (c *encodings) get(key []byte, encode func() (json.RawMessage, error)) (json.RawMessage, error) {
	if len(key) > encodedMaxKey {
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

func (c *encodings) storeLocked(key string, enc json.RawMessage) {
	if c.size+len(key)+len(enc) > c.limit/2 {
		c.old, c.cur, c.size = c.cur, map[string]json.RawMessage{}, 0
	}
	c.cur[key] = enc
	c.size += len(key) + len(enc)
}

// cached reports how many encodings the cache holds (for tests).
func (c *encodings) cached() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.old)
}

// turns returns the JSON array of turns as the API takes it. With
// breakpoint, the last turn carries a cache breakpoint (incremental
// prompt caching) and is encoded afresh: it is the only one that differs
// from its cached form.
func (c *encodings) turns(turns []turn, breakpoint bool) (json.RawMessage, error) {
	var buf bytes.Buffer
	buf.Grow(len(turns) * 96)
	var key []byte
	buf.WriteByte('[')
	for i, t := range turns {
		if i > 0 {
			buf.WriteByte(',')
		}
		var (
			enc []byte
			err error
		)
		if i == len(turns)-1 && breakpoint {
			m := t.param()
			cacheLastBlock(m)
			enc, err = json.Marshal(m)
		} else {
			key = appendKey(append(key[:0], 'm'), t)
			enc, err = c.get(key, func() (json.RawMessage, error) { return json.Marshal(t.param()) })
		}
		if err != nil {
			return nil, fmt.Errorf("turn %d (%s): %w", i, t.role, err)
		}
		buf.Write(enc)
	}
	buf.WriteByte(']')
	return buf.Bytes(), nil
}

// tools returns the JSON array of the request's tools, or nil for none.
func (c *encodings) tools(tools []llm.ToolSpec) (json.RawMessage, error) {
	if len(tools) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	var key []byte
	buf.WriteByte('[')
	for i, t := range tools {
		if i > 0 {
			buf.WriteByte(',')
		}
		key = append(key[:0], 't')
		for _, s := range []string{t.Name, t.Description, string(t.InputSchema)} {
			key = appendString(key, s)
		}
		enc, err := c.get(key, func() (json.RawMessage, error) {
			schema, err := inputSchema(t.InputSchema)
			if err != nil {
				return nil, err
			}
			tool := sdk.ToolParam{Name: t.Name, InputSchema: schema}
			if t.Description != "" {
				tool.Description = sdk.String(t.Description)
			}
			return json.Marshal(sdk.ToolUnionParam{OfTool: &tool})
		})
		if err != nil {
			return nil, fmt.Errorf("tool %s: %w", t.Name, err)
		}
		buf.Write(enc)
	}
	buf.WriteByte(']')
	return buf.Bytes(), nil
}

// system returns the JSON array of the system blocks, or nil for none.
func (c *encodings) system(blocks []sdk.TextBlockParam) (json.RawMessage, error) {
	if len(blocks) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	var key []byte
	buf.WriteByte('[')
	for i, b := range blocks {
		if i > 0 {
			buf.WriteByte(',')
		}
		key = appendString(append(key[:0], 's'), b.Text)
		if !param.IsOmitted(b.CacheControl) {
			key = append(key, 'c')
		}
		enc, err := c.get(key, func() (json.RawMessage, error) { return json.Marshal(b) })
		if err != nil {
			return nil, fmt.Errorf("system block %d: %w", i, err)
		}
		buf.Write(enc)
	}
	buf.WriteByte(']')
	return buf.Bytes(), nil
}

// appendString appends s preceded by its length, so that keys made of
// several strings never run together.
func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendKey appends t's cache key: its role and every field of every
// block, each string preceded by its length, so two different turns never
// share a key. It reads every field of llm.ContentBlock and llm.Image (a
// test fails when either gains one this does not know).
func appendKey(b []byte, t turn) []byte {
	str := func(s string) { b = appendString(b, s) }
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
