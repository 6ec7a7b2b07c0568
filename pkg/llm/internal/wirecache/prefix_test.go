package wirecache

import (
	"encoding/json"
	"testing"

	"jetway/pkg/llm"
)

// A kept prefix is found by its history's first block, lent to one request
// at a time, counted in the cache's size, and aged out with its generation.
func TestA_prefix_is_lent_once_counted_and_aged_out(t *testing.T) {
	c := New(1 << 20)
	msgs := []llm.Message{llm.UserText("zero"), {Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "one"}}}, llm.UserText("two")}
	p := c.TakePrefix('m', msgs, 2)
	if p.Messages() != 0 {
		t.Fatalf("a new cache lent a prefix of %d messages", p.Messages())
	}
	p.Extend(msgs[:2], llm.RoleAssistant, []json.RawMessage{json.RawMessage(`"zero"`), json.RawMessage(`"one"`)})
	before := c.Bytes()
	p.Keep()
	if c.Bytes() <= before {
		t.Fatalf("keeping a prefix left the cache at %d bytes, from %d", c.Bytes(), before)
	}
	got := c.TakePrefix('m', msgs, 2)
	if got.Messages() != 2 || string(got.Bytes) != `"zero","one"` || got.Last != llm.RoleAssistant {
		t.Fatalf("took back %d messages, %q, last %q", got.Messages(), got.Bytes, got.Last)
	}
	if again := c.TakePrefix('m', msgs, 2); again.Messages() != 0 {
		t.Fatal("a prefix was lent twice at once")
	}
	got.Keep()
	if p := c.TakePrefix('m', msgs, 1); p.Messages() != 0 {
		t.Fatal("a prefix of 2 messages was lent to a request with 1 settled")
	}
	// Taking it for too few settled messages dropped it; keep a new one
	// and rotate it out: two generations.
	p = c.TakePrefix('m', msgs, 2)
	p.Extend(msgs[:2], llm.RoleAssistant, []json.RawMessage{json.RawMessage(`"zero"`), json.RawMessage(`"one"`)})
	p.Keep()
	c.mu.Lock()
	c.rotateLocked()
	c.mu.Unlock()
	if p := c.TakePrefix('m', msgs, 2); p.Messages() != 2 {
		t.Fatal("a prefix of the older generation was not found")
	} else {
		p.Keep()
	}
	c.mu.Lock()
	c.rotateLocked()
	c.rotateLocked()
	c.mu.Unlock()
	if p := c.TakePrefix('m', msgs, 2); p.Messages() != 0 {
		t.Fatal("a prefix outlived two generations")
	}
}
