package permission

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func cmd(s string) json.RawMessage {
	raw, _ := json.Marshal(map[string]string{"command": s})
	return raw
}

func TestMatch_rules_on_names_and_arguments(t *testing.T) {
	cases := []struct {
		rule, name string
		input      json.RawMessage
		want       bool
	}{
		{"shell", "shell", cmd("rm -rf /"), true},
		{"shell(git *)", "shell", cmd("git status"), true},
		{"shell(git *)", "shell", cmd("gitx status"), false},
		{"shell(git *)", "shell", cmd("rm -rf / && git status"), false},
		{"shell(*--force*)", "shell", cmd("git push --force origin"), true},
		{"read_*", "read_file", nil, true},
		{"*", "anything", nil, true},
		{"shell(git *", "shell", cmd("git x"), false},
		{"fetch(https://example.com/*)", "fetch", json.RawMessage(`{"url":"https://example.com/a"}`), true},
	}
	for _, c := range cases {
		if got := Match(c.rule, c.name, c.input); got != c.want {
			t.Errorf("Match(%q, %q, %s) = %v, want %v", c.rule, c.name, c.input, got, c.want)
		}
	}
}

func TestCheck_modes_rules_and_callback(t *testing.T) {
	ctx := context.Background()
	asked := 0
	ask := func(_ context.Context, name string, in json.RawMessage) (Decision, error) {
		asked++
		if strings.Contains(string(in), "boom") {
			return Decision{}, errors.New("no answer")
		}
		return Decision{Allow: strings.Contains(string(in), "ok")}, nil
	}
	p := Policy{Allow: []string{"shell(git *)"}, Deny: []string{"shell(*push*)"}, CanUseTool: ask}
	check := func(p Policy, in string, ro bool) Decision { return p.Check(ctx, "shell", cmd(in), ro) }

	if d := check(p, "git status", false); !d.Allow {
		t.Errorf("allow rule ignored: %+v", d)
	}
	if d := check(p, "git push", false); d.Allow || !strings.Contains(d.Reason, "shell(*push*)") {
		t.Errorf("deny rule lost to allow rule: %+v", d)
	}
	if d := check(p, "ls", true); !d.Allow {
		t.Errorf("read-only call denied in default mode: %+v", d)
	}
	if d := check(p, "make ok", false); !d.Allow || asked != 1 {
		t.Errorf("callback not asked or ignored: %+v asked=%d", d, asked)
	}
	if d := check(p, "make no", false); d.Allow || d.Reason == "" {
		t.Errorf("callback refusal: %+v", d)
	}
	if d := check(p, "boom", false); d.Allow || !strings.Contains(d.Reason, "no answer") {
		t.Errorf("callback error: %+v", d)
	}
	if d := check(Policy{}, "make", false); d.Allow {
		t.Error("no rule, no callback, yet allowed")
	}
	if d := check(Policy{Mode: Plan}, "make", false); d.Allow || !strings.Contains(d.Reason, "plan mode") {
		t.Errorf("plan mode ran a writing call: %+v", d)
	}
	if d := check(Policy{Mode: Plan}, "ls", true); !d.Allow {
		t.Error("plan mode refused a read-only call")
	}
	if d := check(Policy{Mode: Bypass, Deny: []string{"shell(rm *)"}}, "make", false); !d.Allow {
		t.Error("bypass refused")
	}
	if d := check(Policy{Mode: AcceptAll, Deny: []string{"shell(rm *)"}}, "rm -rf /", false); d.Allow {
		t.Error("accept-all ignored a deny rule")
	}
	mode := Deny
	if d := check(Policy{Mode: AcceptAll, ModeFunc: func() Mode { return mode }}, "ls", true); d.Allow {
		t.Error("ModeFunc not consulted")
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": Default, "plan": Plan, "read-only": Plan, "bypass": Bypass, "deny": Deny} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseMode("yolo"); err == nil {
		t.Error("unknown mode accepted")
	}
}
