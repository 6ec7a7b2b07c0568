package openai

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
)

// bodyOf is the body p sends for req, or its error.
func bodyOf(p *Provider, req llm.CompletionRequest) (string, error) {
	params, conv, err := p.request(req)
	if err != nil {
		return "", err
	}
	body, err := p.body(params, conv, true)
	return string(body), err
}

// freshBody is the body a provider that has seen nothing sends for req,
// told nothing is settled.
func freshBody(req llm.CompletionRequest) (string, error) {
	fresh, _ := New(Config{APIKey: "k", Model: "m"})
	req.Settled = 0
	return bodyOf(fresh, req)
}

// As with Anthropic: requests that say how much of their history is
// settled get, byte for byte, the body a fresh provider sends for them
// with nothing settled, and the prefix is used.
func TestA_settled_prefix_gives_the_body_a_fresh_provider_would_send(t *testing.T) {
	var p *Provider
	cur, reused := -1, 0
	llmtest.SettledRequests(rand.New(rand.NewPCG(7, 8)), 100, 30, func(h int, req llm.CompletionRequest) {
		if h != cur {
			p, _ = New(Config{APIKey: "k", Model: "m"})
			cur = h
		}
		if pre := p.enc.TakePrefix('t', req.Messages, req.Settled); pre.Messages() > 0 {
			reused += pre.Messages()
			pre.Keep()
		}
		got, err := bodyOf(p, req)
		want, werr := freshBody(req)
		if fmt.Sprint(err) != fmt.Sprint(werr) {
			t.Fatalf("history %d (%d messages, %d settled): error %v, want %v", h, len(req.Messages), req.Settled, err, werr)
		}
		if got != want {
			t.Fatalf("history %d (%d messages, %d settled):\n got %s\nwant %s", h, len(req.Messages), req.Settled, got, want)
		}
	})
	if reused == 0 {
		t.Fatal("no message was taken from a prefix: the test checks nothing")
	}
}

// A settled message replaced by another (the history's first one kept)
// is sent as it is now, not as the prefix remembers it.
func TestA_prefix_is_not_taken_for_a_history_that_differs_within_it(t *testing.T) {
	p, _ := New(Config{APIKey: "k", Model: "m"})
	msg := func(role llm.Role, s string) llm.Message {
		return llm.Message{Role: role, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: s}}}
	}
	u0, u2, a3 := msg(llm.RoleUser, "zero"), msg(llm.RoleUser, "two"), msg(llm.RoleAssistant, "three")
	for i, req := range []llm.CompletionRequest{
		{Messages: []llm.Message{u0, msg(llm.RoleAssistant, "one"), u2, a3, msg(llm.RoleUser, "four")}, Settled: 3},
		{Messages: []llm.Message{u0, msg(llm.RoleAssistant, "another one"), u2, a3, msg(llm.RoleUser, "five")}, Settled: 3},
	} {
		got, err := bodyOf(p, req)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := freshBody(req); got != want {
			t.Fatalf("request %d:\n got %s\nwant %s", i+1, got, want)
		}
		if i == 1 && !strings.Contains(got, "another one") {
			t.Fatalf("the second body lacks the message that replaced a settled one: %s", got)
		}
	}
}

// A Settled past the history's length, or below zero, is taken as all of
// it or none, and the body is still the one a fresh provider sends.
func TestA_settled_count_out_of_range_is_clamped(t *testing.T) {
	p, _ := New(Config{APIKey: "k", Model: "m"})
	msgs := []llm.Message{llm.UserText("zero"), {Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "one"}}}, llm.UserText("two")}
	for i, req := range []llm.CompletionRequest{{Messages: msgs, Settled: -5}, {Messages: msgs, Settled: 99}, {Messages: append(msgs, llm.UserText("three")), Settled: 99}} {
		got, err := bodyOf(p, req)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		if want, _ := freshBody(req); got != want {
			t.Fatalf("request %d:\n got %s\nwant %s", i+1, got, want)
		}
	}
}
