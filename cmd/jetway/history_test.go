package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
	"jetway/services/runner"
)

// Tokens of the real stack: tenant "default"'s user, its admin, and an
// operator that acts for it.
const (
	stackUser     = "jw_user"
	stackAdmin    = "jw_admin"
	stackOperator = "jw_operator"
)

type stack struct {
	url string
	nc  *nats.Conn
}

// realStack serves a real dispatcher on a real, provisioned JetStream
// server, with the three tokens above.
func realStack(t *testing.T) stack {
	t.Helper()
	url, nc := serveDispatcher(t,
		auth.Grant{Token: stackUser, Tenant: "default"},
		auth.Grant{Token: stackAdmin, Tenant: "default", Role: auth.RoleAdmin},
		auth.Grant{Token: stackOperator, Tenant: "default", Role: auth.RoleOperator},
	)
	return stack{url: url, nc: nc}
}

// run runs a client command against the stack with token.
func (s stack) run(t *testing.T, token string, args ...string) string {
	t.Helper()
	full := append([]string{args[0], "--url", s.url, "--token", token}, args[1:]...)
	out, err := runCLI(t, full...)
	if err != nil {
		t.Fatalf("jetway %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func TestSend_while_Ground_Stop_holds_the_session_says_held_and_how_to_lift_it(t *testing.T) {
	s := realStack(t)
	free := s.run(t, stackUser, "send", "s2", "hello", "--wait", "0")
	if !regexp.MustCompile(`^sent \S+\n$`).MatchString(free) {
		t.Fatalf("send to a free session printed %q, want only the id", free)
	}

	s.run(t, stackAdmin, "stop", "--session", "s1", "--reason", "look first")
	out := s.run(t, stackUser, "send", "s1", "hello")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "sent ") {
		t.Fatalf("send printed %q, want the id and one held line", out)
	}
	for _, want := range []string{"held: Ground Stop on this session since ", "(look first)", "lift it with: " + invokedAs() + " stop --off --session s1 --url "} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("held line %q lacks %q", lines[1], want)
		}
	}

	var acc struct {
		Held []struct{ Scope, By string } `json:"held"`
	}
	if err := json.Unmarshal([]byte(s.run(t, stackUser, "send", "--json", "s1", "again")), &acc); err != nil ||
		len(acc.Held) != 1 || acc.Held[0].Scope != "session" || acc.Held[0].By != "default" {
		t.Fatalf("send --json held = %+v (%v)", acc.Held, err)
	}

	s.run(t, stackAdmin, "stop", "--off", "--session", "s1")
	if out := s.run(t, stackUser, "send", "s1", "go", "--wait", "0"); strings.Contains(out, "held") {
		t.Fatalf("after the lift send printed %q", out)
	}
}

func TestStop_status_names_every_switch_that_holds_a_session(t *testing.T) {
	s := realStack(t)
	s.run(t, stackOperator, "stop", "--global", "--reason", "incident 12")
	s.run(t, stackAdmin, "stop", "--reason", "tenant pause")
	s.run(t, stackAdmin, "stop", "--session", "s1", "--reason", "look first")

	out := s.run(t, stackOperator, "stop", "--status", "s1")
	for _, want := range []string{"default/s1 is held by 3 Ground Stop switch(es):", "  global: ON since ", "by operator: incident 12",
		"  tenant: ON since ", "tenant pause", "  session: ON since ", "look first"} {
		if !strings.Contains(out, want) {
			t.Errorf("stop --status s1 printed\n%s\nlacking %q", out, want)
		}
	}
	// A tenant's user learns that the global switch is on, not why.
	if out := s.run(t, stackUser, "stop", "--status", "--session", "s1"); strings.Contains(out, "incident") || !strings.Contains(out, "  global: ON") {
		t.Errorf("a user's status printed\n%s", out)
	}

	// Without a session the operator's default is the global switch, and
	// its own tenant's switches come with it: no switch goes unsaid.
	out = s.run(t, stackOperator, "stop", "--status")
	for _, want := range []string{"Ground Stop is ON (global): incident 12", "Ground Stop is ON (default/*): tenant pause", "Ground Stop is ON (default/s1): look first"} {
		if !strings.Contains(out, want) {
			t.Errorf("stop --status printed\n%s\nlacking %q", out, want)
		}
	}
}

// record appends transcript records for default/<session> as a runner
// writes them.
func (s stack) record(t *testing.T, session string, recs ...runner.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := bus.JetStream(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "jetway.transcript.default."+session, b); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHistory_prints_a_whole_session_readably_with_each_run_s_agent_and_as_json_lines(t *testing.T) {
	s := realStack(t)
	at := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	msg := func(role llm.Role, kind llm.MessageKind, blocks ...llm.ContentBlock) *llm.Message {
		return &llm.Message{Role: role, Kind: kind, Content: blocks}
	}
	text := func(s string) llm.ContentBlock { return llm.ContentBlock{Type: llm.BlockText, Text: s} }
	const secret = "ghp_4Xb9Kq2LmN7pR3sT8vW1yZ5aC6dE0fG2hJ4k"
	recs := []runner.Record{
		{Kind: runner.RecordRunStarted, Run: "r-1", Cause: "input", Time: at, Message: msg(llm.RoleUser, "", text("run the tests"))},
		{Kind: runner.RecordMessage, Run: "r-1", Time: at, Message: msg(llm.RoleAssistant, "", text("Running them."),
			llm.ContentBlock{Type: llm.BlockToolUse, ID: "t1", Name: "bash", Input: json.RawMessage(`{"command":"GITHUB_TOKEN=` + secret + ` go test ./..."}`)})},
		{Kind: runner.RecordMessage, Run: "r-1", Time: at, Message: msg(llm.RoleUser, "",
			llm.ContentBlock{Type: llm.BlockToolResult, ToolUseID: "t1", Content: "ok  \tjetway/pkg\t0.3s\nok  \tjetway/cmd\t1.1s\n"})},
		{Kind: runner.RecordMessage, Run: "r-1", Time: at, Message: msg(llm.RoleUser, llm.KindNotice, text("[background job notice] job 3 (gh) exited 0 after 21m."))},
		{Kind: runner.RecordRunEnded, Run: "r-1", Reason: "end_turn", Time: at},
		{Kind: runner.RecordRefused, Event: "ev-9", Type: "io.jetway.job.exited", Reason: "job events come only from jobs workers", Time: at},
		{Kind: runner.RecordAnswered, Event: "ev-10", Type: "io.jetway.agent.finished", Reason: runner.ReasonAnsweredInWait, Time: at},
		{Kind: runner.RecordRunStarted, Run: "r-2", Cause: "input", Agent: "reviewer", AgentVersion: 3, Time: at, Message: msg(llm.RoleUser, "", text("review it")), From: []string{"person"}},
		{Kind: runner.RecordRunEnded, Run: "r-2", Reason: "end_turn", Time: at},
		{Kind: runner.RecordRunStarted, Run: "r-3", Cause: "dispatch", Time: at, Message: msg(llm.RoleUser, "", text("[background job notice] job 1 (sleep) exited 0")), From: []string{"job"}},
	}
	// More than a page of chatter, so the command has to page.
	for i := range 130 {
		recs = append(recs, runner.Record{Kind: runner.RecordMessage, Run: "r-2", Time: at,
			Message: msg(llm.RoleAssistant, "", text(fmt.Sprintf("line %03d", i)))})
	}
	s.record(t, "s1", recs...)

	out := s.run(t, stackUser, "history", "s1")
	if strings.Contains(out, secret[4:]) {
		t.Fatalf("history prints the token:\n%s", out)
	}
	if strings.Contains(out, "person: [background job notice] job 1") {
		t.Errorf("a run a job's notice started prints as the person's words:\n%s", out)
	}
	want := []string{
		"── run r-1 started (input) ",
		"person: run the tests",
		"assistant: Running them.",
		"  bash(GITHUB_TOKEN=ghp_[REDACTED] go test ./...) → ok  \tjetway/pkg\t0.3s (+1 lines)",
		"notice: [background job notice] job 3 (gh) exited 0 after 21m.",
		"── run r-1 ended: end_turn ",
		"refused: event ev-9 (io.jetway.job.exited): job events come only from jobs workers",
		"── event ev-10 (io.jetway.agent.finished) delivered as the result of the agent_start call that waited for it",
		"── run r-2 started (input) as reviewer v3 ",
		"person: review it",
		"── run r-3 started (dispatch)",
		"job: [background job notice] job 1 (sleep) exited 0",
		"assistant: line 000",
		"assistant: line 129",
	}
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("history lacks (in order) %q:\n%s", w, out)
		}
		rest = rest[i+len(w):]
	}

	js := s.run(t, stackUser, "history", "--json", "s1")
	lines := strings.Split(strings.TrimSpace(js), "\n")
	if len(lines) != len(recs) {
		t.Fatalf("--json printed %d lines, want %d", len(lines), len(recs))
	}
	var prev uint64
	for i, l := range lines {
		var e struct {
			ID   uint64 `json:"id"`
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.ID <= prev || e.Kind != recs[i].Kind {
			t.Fatalf("line %d = %s (%v), want entry of kind %s after id %d", i, l, err, recs[i].Kind, prev)
		}
		prev = e.ID
	}

	if _, err := runCLI(t, "history", "--url", s.url, "--token", stackUser, "nosuch"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("history of an unknown session: %v", err)
	}
}

func TestHistory_says_why_a_run_ended_on_a_model_error(t *testing.T) {
	model := llmtest.NewAnthropic(t)
	model.SetFallback(llmtest.Reply{Error: &llmtest.APIError{Status: 404, Type: "not_found_error", Message: "model: claude-nope"}})
	t.Setenv("ANTHROPIC_API_KEY", "sk-test")
	t.Setenv("ANTHROPIC_BASE_URL", model.URL())
	d := startDev(t)
	cf := []string{"--url", d.url, "--tokens-file", d.tokens}
	if out, err := runCLI(t, append([]string{"send", "s1", "hello"}, cf...)...); err != nil {
		t.Fatalf("send: %v\n%s", err, out)
	}
	out := waitCLI(t, "the run's end", func(s string) bool { return strings.Contains(s, "ended: ") }, append([]string{"history", "s1"}, cf...)...)
	if !regexp.MustCompile(`ended: model_error — .*model: claude-nope`).MatchString(out) {
		t.Fatalf("history does not say why the run ended:\n%s", out)
	}
}
