package anthropic

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
)

// growingMessage is the next message of a random session: texts, tool
// calls and their results, images, blocks the API refuses (empty text,
// thinking without a signature) and runs of one role, which shaping
// merges or drops.
func growingMessage(r *rand.Rand, i int, img *llm.Image) llm.Message {
	text := fmt.Sprintf("message %d", i)
	switch r.IntN(9) {
	case 0:
		return llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentBlock{
			{Type: llm.BlockText, Text: text},
			{Type: llm.BlockToolUse, ID: fmt.Sprintf("tu%d", i), Name: "glob", Input: json.RawMessage(`{"pattern":"*"}`)},
		}}
	case 1:
		return llm.Message{Role: llm.RoleUser, Content: []llm.ContentBlock{
			{Type: llm.BlockToolResult, ToolUseID: fmt.Sprintf("tu%d", i-1), Content: text},
		}}
	case 2:
		return llm.Message{Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: text}, {Type: llm.BlockImage, Image: img}}}
	case 3:
		return llm.Message{Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockText}}} // refused: empty
	case 4:
		return llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockThinking, Text: text}}} // refused: unsigned
	case 5, 6:
		return llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: text}}}
	default:
		return llm.UserText(text)
	}
}

// Requests that say how much of their history is settled (as a ViewCache
// knows) get, byte for byte, the body of the same request sent with
// nothing settled to a provider that has seen nothing, whatever the
// history: merges and refused blocks at the settled line, and histories
// read back in other blocks. And the prefix is used: after the first
// request, most of a history is never shaped again.
func TestA_settled_prefix_gives_the_body_a_fresh_provider_would_send(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	shot := llm.NewImage("image/png", llmtest.PNG(3, 2))
	reused, settledSeen := 0, 0
	for h := range 100 {
		p, _ := New(Config{APIKey: "k", Model: "m"})
		var vc llm.ViewCache
		var hist []llm.Message
		for step := range 30 {
			for range 1 + r.IntN(3) {
				hist = append(hist, growingMessage(r, len(hist), &shot))
			}
			msgs := hist
			if r.IntN(10) == 0 {
				// Read back from a transcript: the same messages in
				// other blocks.
				raw, _ := json.Marshal(hist)
				msgs = nil
				if err := json.Unmarshal(raw, &msgs); err != nil {
					t.Fatal(err)
				}
				hist = msgs
			}
			view, _, settled := vc.View(msgs)
			if len(view) == 0 {
				continue
			}
			req := llm.CompletionRequest{Messages: view, MaxTokens: 64, Settled: settled}
			if pre := p.enc.TakePrefix('m', view, settled); pre.Messages() > 0 {
				reused += pre.Messages()
				pre.Keep()
			}
			settledSeen += settled
			got, err := p.requestBody(sdk.MessageNewParams{Model: "m", MaxTokens: 64}, req, true)
			fresh, _ := New(Config{APIKey: "k", Model: "m"})
			req.Settled = 0
			want, werr := fresh.requestBody(sdk.MessageNewParams{Model: "m", MaxTokens: 64}, req, true)
			if fmt.Sprint(err) != fmt.Sprint(werr) {
				t.Fatalf("history %d, step %d: error %v, want %v", h, step, err, werr)
			}
			if string(got) != string(want) {
				t.Fatalf("history %d, step %d (%d messages, %d settled):\n got %s\nwant %s", h, step, len(view), settled, got, want)
			}
		}
	}
	if reused == 0 || settledSeen == 0 {
		t.Fatalf("%d messages taken from a prefix, %d settled: the test checks nothing", reused, settledSeen)
	}
}

// sameAsFresh sends each request to p in turn and fails unless each body is
// the one a provider that has seen nothing sends for it.
func sameAsFresh(t *testing.T, p *Provider, reqs ...llm.CompletionRequest) string {
	t.Helper()
	var got []byte
	for i, req := range reqs {
		var err error
		got, err = p.requestBody(sdk.MessageNewParams{Model: "m", MaxTokens: 64}, req, true)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		fresh, _ := New(Config{APIKey: "k", Model: "m"})
		req.Settled = 0
		want, err := fresh.requestBody(sdk.MessageNewParams{Model: "m", MaxTokens: 64}, req, true)
		if err != nil {
			t.Fatalf("request %d, fresh: %v", i+1, err)
		}
		if string(got) != string(want) {
			t.Fatalf("request %d:\n got %s\nwant %s", i+1, got, want)
		}
	}
	return string(got)
}

func text(role llm.Role, s string) llm.Message {
	return llm.Message{Role: role, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: s}}}
}

// A history whose start is kept but whose settled messages are not those
// the prefix was made of (another message in their place, the same first
// one) is encoded in full: the prefix is found by its first block, and
// taken only when every message it covers is still there.
func TestA_prefix_is_not_taken_for_a_history_that_differs_within_it(t *testing.T) {
	p, _ := New(Config{APIKey: "k", Model: "m"})
	u0, a1, u2, a3 := text(llm.RoleUser, "zero"), text(llm.RoleAssistant, "one"), text(llm.RoleUser, "two"), text(llm.RoleAssistant, "three")
	other := text(llm.RoleAssistant, "another one")
	body := sameAsFresh(t, p,
		llm.CompletionRequest{Messages: []llm.Message{u0, a1, u2, a3, text(llm.RoleUser, "four")}, Settled: 3},
		llm.CompletionRequest{Messages: []llm.Message{u0, other, u2, a3, text(llm.RoleUser, "five")}, Settled: 3})
	if !strings.Contains(body, "another one") {
		t.Fatalf("the second body lacks the message that replaced a settled one: %s", body)
	}
}

// A prefix ending in a user turn, followed by an assistant message the API
// refuses and then a user message: the two user turns merge across the
// prefix's end, as they would without it, so the prefix is not used.
func TestA_turn_that_merges_across_the_prefix_end_is_shaped_in_full(t *testing.T) {
	p, _ := New(Config{APIKey: "k", Model: "m"})
	u0, a1, u2 := text(llm.RoleUser, "zero"), text(llm.RoleAssistant, "one"), text(llm.RoleUser, "two")
	unsigned := llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockThinking, Text: "hm"}}}
	sameAsFresh(t, p, llm.CompletionRequest{Messages: []llm.Message{u0, a1, u2, unsigned, text(llm.RoleAssistant, "three")}, Settled: 3})
	pre := p.enc.TakePrefix('m', []llm.Message{u0, a1, u2}, 3)
	if pre.Messages() != 3 {
		t.Fatalf("the first request left a prefix of %d messages, want its 3 settled ones", pre.Messages())
	}
	pre.Keep()
	sameAsFresh(t, p, llm.CompletionRequest{Messages: []llm.Message{u0, a1, u2, unsigned, text(llm.RoleUser, "four")}, Settled: 3})
}
