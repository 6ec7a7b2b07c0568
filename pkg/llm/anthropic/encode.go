package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"jetway/pkg/llm"
	"jetway/pkg/llm/internal/wirecache"
)

// encodings are the provider's cached wire encodings (see wirecache):
// every turn but the last of a request, its tools and its system blocks.
type encodings struct {
	*wirecache.Cache

	// The last request's tools and system blocks as one JSON array each,
	// with what they were made from (the strings are the caller's, so
	// comparing them costs little when they are the same ones; schemas
	// are copied, as bytes can change under a caller's feet). Nearly every request of a runner sends the same tools and
	// system prompt; finding each part by a key made of its whole text
	// and joining them again cost a copy of all of it, every call.
	mu        sync.Mutex
	lastTools []llm.ToolSpec
	toolsEnc  json.RawMessage
	lastSys   []sdk.TextBlockParam
	sysEnc    json.RawMessage
	// lastHead is what the last request's params held (see headOf), and
	// headEnc their encoding: the SDK's encoder took as long for those
	// three fields as for a turn.
	lastHead headKey
	headEnc  []byte
}

// headKey is what a request's params hold: params sets these and nothing
// else (a test checks), so params alike encode alike.
type headKey struct {
	model     sdk.Model
	maxTokens int64
	budget    int64 // the thinking budget, 0 for none
	adaptive  bool  // adaptive thinking
}

func headOf(params sdk.MessageNewParams) headKey {
	k := headKey{model: params.Model, maxTokens: params.MaxTokens, adaptive: params.Thinking.OfAdaptive != nil}
	if e := params.Thinking.OfEnabled; e != nil {
		k.budget = e.BudgetTokens
	}
	return k
}

// head returns the SDK's encoding of params (shared: read it, never change
// it).
func (c *encodings) head(params sdk.MessageNewParams) ([]byte, error) {
	k := headOf(params)
	c.mu.Lock()
	last, enc := c.lastHead, c.headEnc
	c.mu.Unlock()
	if enc != nil && last == k {
		return enc, nil
	}
	enc, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	c.mu.Lock()
	c.lastHead, c.headEnc = k, enc
	c.mu.Unlock()
	return enc, nil
}

func newEncodings(limit int) *encodings { return &encodings{Cache: wirecache.New(limit)} }

// turns returns each turn's encoding as the API takes it (the cached bytes
// themselves: read them, never change them). With breakpoint, the last
// turn carries a cache breakpoint (incremental prompt caching) and is
// encoded afresh: it is the only one that differs from its cached form.
//
// With chain, the turns are a whole history, found along the chain of its
// last request (see wirecache.Sequence); without, a few turns past a
// prefix, each found on its own.
func (c *encodings) turns(turns []llm.Turn, breakpoint, chain bool) ([]json.RawMessage, error) {
	parts := make([]json.RawMessage, len(turns))
	if len(turns) == 0 {
		return parts, nil
	}
	var seq *wirecache.Sequence
	if chain {
		seq = c.Sequence('m', turns[0].Content)
		defer seq.Done()
	}
	for i, t := range turns {
		var err error
		encode := func() (json.RawMessage, error) { return json.Marshal(turnParam(t)) }
		switch {
		case i == len(turns)-1 && breakpoint:
			m := turnParam(t)
			cacheLastBlock(m)
			parts[i], err = json.Marshal(m)
			if seq != nil {
				seq.Skip()
			}
		case seq != nil:
			parts[i], err = seq.Turn(t.Role, t.Content, encode)
		default:
			parts[i], err = c.Turn('m', t.Role, t.Content, encode)
		}
		if err != nil {
			return nil, fmt.Errorf("turn %d (%s): %w", i, t.Role, err)
		}
	}
	return parts, nil
}

// arrayLen is the length of parts as one JSON array.
func arrayLen(parts []json.RawMessage) int {
	n := 2 + max(len(parts)-1, 0)
	for _, p := range parts {
		n += len(p)
	}
	return n
}

// appendArray appends parts to dst as one JSON array, after the elements
// already joined in pre.
func appendArray(dst, pre []byte, parts []json.RawMessage) []byte {
	dst = append(append(dst, '['), pre...)
	for i, p := range parts {
		if i > 0 || len(pre) > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, p...)
	}
	return append(dst, ']')
}

// tools returns the JSON array of the request's tools, or nil for none.
func (c *encodings) tools(tools []llm.ToolSpec) (json.RawMessage, error) {
	if len(tools) == 0 {
		return nil, nil
	}
	c.mu.Lock()
	last, enc := c.lastTools, c.toolsEnc
	c.mu.Unlock()
	if slices.EqualFunc(last, tools, sameTool) {
		return enc, nil
	}
	enc, err := c.encodeTools(tools)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.lastTools, c.toolsEnc = ownSpecs(tools), enc
	c.mu.Unlock()
	return enc, nil
}

// ownSpecs copies tools with schemas of their own: a caller may reuse the
// bytes of a schema, and a strings compare equal only to themselves.
func ownSpecs(tools []llm.ToolSpec) []llm.ToolSpec {
	out := slices.Clone(tools)
	for i := range out {
		out[i].InputSchema = slices.Clone(out[i].InputSchema)
	}
	return out
}

// sameTool reports whether a and b encode alike (every field tools reads).
func sameTool(a, b llm.ToolSpec) bool {
	return a.Name == b.Name && a.Description == b.Description && string(a.InputSchema) == string(b.InputSchema)
}

// encodeTools is tools' array made from each tool's cached encoding.
func (c *encodings) encodeTools(tools []llm.ToolSpec) (json.RawMessage, error) {
	var buf bytes.Buffer
	var key []byte
	buf.WriteByte('[')
	for i, t := range tools {
		if i > 0 {
			buf.WriteByte(',')
		}
		key = append(key[:0], 't')
		for _, s := range []string{t.Name, t.Description, string(t.InputSchema)} {
			key = wirecache.AppendString(key, s)
		}
		enc, err := c.Get(key, func() (json.RawMessage, error) {
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
	c.mu.Lock()
	last, enc := c.lastSys, c.sysEnc
	c.mu.Unlock()
	if slices.EqualFunc(last, blocks, sameSystemBlock) {
		return enc, nil
	}
	enc, err := c.encodeSystem(blocks)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.lastSys, c.sysEnc = slices.Clone(blocks), enc
	c.mu.Unlock()
	return enc, nil
}

// sameSystemBlock reports whether a and b encode alike (every field system
// reads: what system sets).
func sameSystemBlock(a, b sdk.TextBlockParam) bool {
	return a.Text == b.Text && param.IsOmitted(a.CacheControl) == param.IsOmitted(b.CacheControl)
}

// encodeSystem is system's array made from each block's cached encoding.
func (c *encodings) encodeSystem(blocks []sdk.TextBlockParam) (json.RawMessage, error) {
	var buf bytes.Buffer
	var key []byte
	buf.WriteByte('[')
	for i, b := range blocks {
		if i > 0 {
			buf.WriteByte(',')
		}
		key = wirecache.AppendString(append(key[:0], 's'), b.Text)
		if !param.IsOmitted(b.CacheControl) {
			key = append(key, 'c')
		}
		enc, err := c.Get(key, func() (json.RawMessage, error) { return json.Marshal(b) })
		if err != nil {
			return nil, fmt.Errorf("system block %d: %w", i, err)
		}
		buf.Write(enc)
	}
	buf.WriteByte(']')
	return buf.Bytes(), nil
}
