package anthropic

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
)

// Requests that say how much of their history is settled (as a ViewCache
// knows) get, byte for byte, the body of the same request sent with
// nothing settled to a provider that has seen nothing, whatever the
// history: merges and refused blocks at the settled line, and histories
// read back in other blocks. And the prefix is used: after the first
// request, most of a history is never shaped again.
func TestA_settled_prefix_gives_the_body_a_fresh_provider_would_send(t *testing.T) {
	var p *Provider
	cur, reused, settled := -1, 0, 0
	llmtest.SettledRequests(rand.New(rand.NewPCG(5, 6)), 100, 30, func(h int, req llm.CompletionRequest) {
		if h != cur {
			p, _ = New(Config{APIKey: "k", Model: "m"})
			cur = h
		}
		if pre := p.enc.TakePrefix('m', req.Messages, req.Settled); pre.Messages() > 0 {
			reused += pre.Messages()
			pre.Keep()
		}
		settled += req.Settled
		got, err := p.requestBody(sdk.MessageNewParams{Model: "m", MaxTokens: 64}, req, true)
		fresh, _ := New(Config{APIKey: "k", Model: "m"})
		n := req.Settled
		req.Settled = 0
		want, werr := fresh.requestBody(sdk.MessageNewParams{Model: "m", MaxTokens: 64}, req, true)
		if fmt.Sprint(err) != fmt.Sprint(werr) {
			t.Fatalf("history %d (%d messages, %d settled): error %v, want %v", h, len(req.Messages), n, err, werr)
		}
		if string(got) != string(want) {
			t.Fatalf("history %d (%d messages, %d settled):\n got %s\nwant %s", h, len(req.Messages), n, got, want)
		}
	})
	if reused == 0 || settled == 0 {
		t.Fatalf("%d messages taken from a prefix, %d settled: the test checks nothing", reused, settled)
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

// A Settled past the history's length, or below zero, is taken as all of
// it or none, and the body is still the one a fresh provider sends.
func TestA_settled_count_out_of_range_is_clamped(t *testing.T) {
	p, _ := New(Config{APIKey: "k", Model: "m"})
	msgs := []llm.Message{text(llm.RoleUser, "zero"), text(llm.RoleAssistant, "one"), text(llm.RoleUser, "two")}
	sameAsFresh(t, p,
		llm.CompletionRequest{Messages: msgs, Settled: -5},
		llm.CompletionRequest{Messages: msgs, Settled: 99},
		llm.CompletionRequest{Messages: append(msgs, text(llm.RoleAssistant, "three"), text(llm.RoleUser, "four")), Settled: 99})
}
