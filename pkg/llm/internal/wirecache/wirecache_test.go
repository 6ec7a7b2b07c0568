package wirecache

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"jetway/pkg/llm"
)

// The cache key must read every field a turn's encoding is made from: a
// field added to llm.ContentBlock or llm.Image must be added to AppendTurn,
// or two turns differing only in it would share an encoding.
func TestAppendTurn_knows_every_field_of_a_block(t *testing.T) {
	known := map[reflect.Type][]string{
		reflect.TypeFor[llm.ContentBlock](): {"Type", "Text", "Signature", "ID", "Name", "Input", "ToolUseID", "Content", "Images", "IsError", "Image"},
		reflect.TypeFor[llm.Image]():        {"MediaType", "Data", "URL"},
	}
	for typ, names := range known {
		var got []string
		for f := range typ.Fields() {
			got = append(got, f.Name)
		}
		if !reflect.DeepEqual(got, names) {
			t.Errorf("%s has fields %v; AppendTurn knows %v: add the new ones to the key, to sameBlocks and to blockVariants", typ, got, names)
		}
	}
	// And each field changes the key.
	base, variants := blockVariants()
	seen := map[string]int{string(AppendTurn(nil, llm.RoleUser, []llm.ContentBlock{base})): -1}
	for i, vary := range variants {
		b := base
		vary(&b)
		k := string(AppendTurn(nil, llm.RoleUser, []llm.ContentBlock{b}))
		if j, dup := seen[k]; dup {
			t.Errorf("variant %d has the key of %d", i, j)
		}
		seen[k] = i
	}
	shifted := string(AppendTurn(nil, llm.RoleUser, []llm.ContentBlock{{Text: "a", Signature: "b"}}))
	if shifted == string(AppendTurn(nil, llm.RoleUser, []llm.ContentBlock{{Text: "ab"}})) {
		t.Error("text and signature run together in the key")
	}
	if string(AppendTurn(nil, llm.RoleUser, []llm.ContentBlock{{Text: "a"}})) ==
		string(AppendTurn(nil, llm.RoleAssistant, []llm.ContentBlock{{Text: "a"}})) {
		t.Error("role is not in the key")
	}
}

// blockVariants is a block and changes to it, one per field of a block
// and of its image.
func blockVariants() (llm.ContentBlock, []func(*llm.ContentBlock)) {
	base := llm.ContentBlock{Type: llm.BlockToolResult, Image: &llm.Image{}}
	return base, []func(*llm.ContentBlock){
		func(b *llm.ContentBlock) { b.Type = llm.BlockText },
		func(b *llm.ContentBlock) { b.Text = "x" },
		func(b *llm.ContentBlock) { b.Signature = "x" },
		func(b *llm.ContentBlock) { b.ID = "x" },
		func(b *llm.ContentBlock) { b.Name = "x" },
		func(b *llm.ContentBlock) { b.Input = json.RawMessage(`{}`) },
		func(b *llm.ContentBlock) { b.ToolUseID = "x" },
		func(b *llm.ContentBlock) { b.Content = "x" },
		func(b *llm.ContentBlock) { b.Images = []llm.Image{{}} },
		func(b *llm.ContentBlock) { b.IsError = true },
		func(b *llm.ContentBlock) { b.Image = nil },
		func(b *llm.ContentBlock) { b.Image = &llm.Image{MediaType: "x"} },
		func(b *llm.ContentBlock) { b.Image = &llm.Image{Data: "x"} },
		func(b *llm.ContentBlock) { b.Image = &llm.Image{URL: "x"} },
		// Moving bytes from one field to the next is a different turn too.
		func(b *llm.ContentBlock) { b.Text, b.Signature = "ab", "" },
	}
}

func TestCache_stays_within_its_limit(t *testing.T) {
	const limit = 64 << 10
	c := New(limit)
	for i := range 5000 {
		key := AppendString(nil, fmt.Sprintf("event %d with some text to take room", i))
		enc, err := c.Get(key, func() (json.RawMessage, error) { return json.Marshal(fmt.Sprintf("encoded %d", i)) })
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := json.Marshal(fmt.Sprintf("encoded %d", i)); string(enc) != string(want) {
			t.Fatalf("entry %d: got %s, want %s", i, enc, want)
		}
		if held := c.Bytes(); held > limit {
			t.Fatalf("after %d entries the cache holds %d bytes, over its limit of %d", i+1, held, limit)
		}
	}
}

func TestCache_encodes_a_key_once_and_never_keeps_a_failure(t *testing.T) {
	c := New(Limit)
	calls := 0
	encode := func() (json.RawMessage, error) { calls++; return json.RawMessage(`"x"`), nil }
	for range 3 {
		if _, err := c.Get([]byte("k"), encode); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Fatalf("encoded %d times, want once", calls)
	}
	boom := fmt.Errorf("boom")
	for range 2 {
		if _, err := c.Get([]byte("bad"), func() (json.RawMessage, error) { return nil, boom }); err != boom {
			t.Fatalf("got %v, want the encoder's error", err)
		}
	}
	if c.Len() != 1 {
		t.Fatalf("cache holds %d entries, want only the good one", c.Len())
	}
	big := make([]byte, MaxKey+1)
	for range 2 {
		if _, err := c.Get(big, encode); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 3 || c.Len() != 1 {
		t.Fatalf("a key over MaxKey: %d encodes, %d entries; want it encoded each time and not kept", calls, c.Len())
	}
}

// A turn sent again in the very blocks it was sent in is found by their
// identity, encoded once; a copy of it is found by its key, not encoded
// again; and blocks changed in place, or the same blocks in another role,
// are never served the old encoding.
func TestTurn_finds_the_same_blocks_and_never_serves_changed_ones(t *testing.T) {
	c := New(Limit)
	calls := 0
	encodeOf := func(role llm.Role, bs []llm.ContentBlock) func() (json.RawMessage, error) {
		return func() (json.RawMessage, error) {
			calls++
			return json.Marshal(map[string]any{"role": role, "blocks": bs})
		}
	}
	get := func(role llm.Role, bs []llm.ContentBlock) string {
		t.Helper()
		enc, err := c.Turn('m', role, bs, encodeOf(role, bs))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := encodeOf(role, bs)()
		calls--
		if string(enc) != string(want) {
			t.Fatalf("served %s, want %s", enc, want)
		}
		return string(enc)
	}
	blocks := []llm.ContentBlock{{Type: llm.BlockText, Text: "hello"}, {Type: llm.BlockToolUse, ID: "t1", Name: "ls", Input: json.RawMessage(`{}`)}}
	get(llm.RoleAssistant, blocks)
	get(llm.RoleAssistant, blocks)
	get(llm.RoleAssistant, slices.Clone(blocks))
	if calls != 1 {
		t.Fatalf("encoded %d times, want once for the same blocks and their copy", calls)
	}
	get(llm.RoleUser, blocks)
	if calls != 2 {
		t.Fatalf("the same blocks in another role: %d encodes, want a second one", calls)
	}

	base, variants := blockVariants()
	for i, vary := range variants {
		bs := []llm.ContentBlock{base}
		get(llm.RoleUser, bs)
		vary(&bs[0]) // in place: same array, same length
		before := calls
		get(llm.RoleUser, bs)
		if calls != before+1 {
			t.Errorf("variant %d changed in place was served its old encoding", i)
		}
	}
}

func TestTurn_stays_within_the_limit(t *testing.T) {
	const limit = 64 << 10
	c := New(limit)
	for i := range 3000 {
		bs := []llm.ContentBlock{{Type: llm.BlockText, Text: fmt.Sprintf("event %d", i)}}
		if _, err := c.Turn('m', llm.RoleUser, bs, func() (json.RawMessage, error) { return json.Marshal(bs) }); err != nil {
			t.Fatal(err)
		}
		if held := c.Bytes(); held > limit {
			t.Fatalf("after %d turns the cache holds %d bytes, over its limit of %d", i+1, held, limit)
		}
	}
}
