package events

import (
	"errors"
	"strings"
	"testing"
)

func TestSubject_builders_render_the_contract(t *testing.T) {
	for _, c := range []struct {
		build func(string, string) (string, error)
		want  string
	}{
		{EventsSubject, "jetway.events.acme.s-1_a"},
		{JobEventsSubject, "jetway.jobevents.acme.s-1_a"},
		{OutSubject, "jetway.out.acme.s-1_a"},
		{NotifySubject, "jetway.notify.acme.s-1_a"},
		{TranscriptSubject, "jetway.transcript.acme.s-1_a"},
	} {
		got, err := c.build("acme", "s-1_a")
		if err != nil || got != c.want {
			t.Errorf("got %q, %v; want %q", got, err, c.want)
		}
	}
	got, err := ScheduleSubject("acme", "s1", "lay-3")
	if err != nil || got != "jetway.schedules.acme.s1.lay-3" {
		t.Errorf("ScheduleSubject = %q, %v", got, err)
	}
	if got, err := FiredSubject(3, "acme", "s-1_a"); err != nil || got != "jetway.fired.3.acme.s-1_a" {
		t.Errorf("FiredSubject = %q, %v", got, err)
	}
	if _, err := FiredSubject(0, "acme", "a.b"); err == nil {
		t.Errorf("FiredSubject took a session with a dot")
	}
	if _, err := FiredSubject(-1, "acme", "s1"); err == nil {
		t.Errorf("FiredSubject took a negative partition")
	}
	if Filter(KindEvents) != "jetway.events.*.*" || Filter(KindSchedules) != "jetway.schedules.*.*.*" {
		t.Errorf("filters %q %q", Filter(KindEvents), Filter(KindSchedules))
	}
}

func TestValidateToken_refuses_with_the_field_and_the_rule(t *testing.T) {
	for _, c := range []struct {
		field, value, want string
	}{
		{"session", "a.b", `session "a.b": may contain only A-Z a-z 0-9 _ -`},
		{"tenant", "", `tenant "": must not be empty`},
		{"session", "*", `session "*": may contain only A-Z a-z 0-9 _ -`},
		{"session", ">", `session ">": may contain only A-Z a-z 0-9 _ -`},
		{"tenant", "a b", `tenant "a b": may contain only A-Z a-z 0-9 _ -`},
		{"tenant", "zoë", `tenant "zoë": may contain only A-Z a-z 0-9 _ -`},
		{"session", "a\nb", `session "a\nb": may contain only A-Z a-z 0-9 _ -`},
		{"session", strings.Repeat("x", 65), `session "` + strings.Repeat("x", 65) + `": must be at most 64 characters, is 65`},
	} {
		err := ValidateToken(c.field, c.value)
		if err == nil || err.Error() != c.want {
			t.Errorf("ValidateToken(%q, %q) = %v; want %q", c.field, c.value, err, c.want)
			continue
		}
		var te *TokenError
		if !errors.Is(err, ErrInvalidToken) || !errors.As(err, &te) || te.Field != c.field || te.Value != c.value {
			t.Errorf("ValidateToken(%q, %q): not a *TokenError for the field: %#v", c.field, c.value, err)
		}
	}
	for _, ok := range []string{"a", "A-Z_09", strings.Repeat("x", 64)} {
		if err := ValidateToken("session", ok); err != nil {
			t.Errorf("ValidateToken(%q) = %v", ok, err)
		}
	}
}

func TestSubject_builders_refuse_bad_tokens(t *testing.T) {
	if _, err := EventsSubject("acme", "a.b"); !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), `session "a.b"`) {
		t.Errorf("EventsSubject(acme, a.b) = %v", err)
	}
	if _, err := OutSubject("ac>me", "s"); !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "tenant") {
		t.Errorf("OutSubject(ac>me, s) = %v", err)
	}
	if _, err := ScheduleSubject("acme", "s", "x y"); !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "schedule id") {
		t.Errorf("ScheduleSubject with a bad id = %v", err)
	}
}

func TestParseSubject_reads_back_every_kind(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Subject
	}{
		{"jetway.events.acme.s1", Subject{Kind: KindEvents, Tenant: "acme", Session: "s1", Partition: -1}},
		{"jetway.jobevents.acme.s1", Subject{Kind: KindJobEvents, Tenant: "acme", Session: "s1", Partition: -1}},
		{"jetway.out.acme.s1", Subject{Kind: KindOut, Tenant: "acme", Session: "s1", Partition: -1}},
		{"jetway.notify.acme.s1", Subject{Kind: KindNotify, Tenant: "acme", Session: "s1", Partition: -1}},
		{"jetway.transcript.acme.s1", Subject{Kind: KindTranscript, Tenant: "acme", Session: "s1", Partition: -1}},
		{"jetway.schedules.acme.s1.l1", Subject{Kind: KindSchedules, Tenant: "acme", Session: "s1", ID: "l1", Partition: -1}},
		{"jetway.jobevents.2.acme.s1", Subject{Kind: KindJobEvents, Tenant: "acme", Session: "s1", Partition: 2}},
		{"jetway.agentevents.0.acme.s1", Subject{Kind: KindAgentEvents, Tenant: "acme", Session: "s1", Partition: 0}},
	} {
		got, err := ParseSubject(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseSubject(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		if want := strings.Replace(strings.Replace(c.in, ".2.", ".", 1), ".0.", ".", 1); got.String() != want {
			t.Errorf("String() = %q, want %q", got.String(), want)
		}
	}
}

func TestParseSubject_refuses_what_is_not_a_jetway_subject(t *testing.T) {
	for in, want := range map[string]string{
		"":                                       "does not start with jetway.<kind>",
		"jetway":                                 "does not start with jetway.<kind>",
		"nats.events.a.b":                        "does not start with jetway.<kind>",
		"jetway.bogus.a.b":                       `unknown kind "bogus"`,
		"jetway.events.a":                        "want 4 tokens for events, have 3",
		"jetway.events.a.b.c":                    "want 4 tokens for events, have 5",
		"jetway.schedules.a.b":                   "want 5 tokens for schedules, have 4",
		"jetway.events.a.*":                      `session "*": may contain only A-Z a-z 0-9 _ -`,
		"jetway.events.>":                        "want 4 tokens for events, have 3",
		"jetway.events..b":                       `tenant "": must not be empty`,
		"jetway.schedules.a.b.c d":               `schedule id "c d"`,
		"99999999999999999999.jetway.events.a.b": "does not start with jetway.<kind>",
		"jetway.events.99999999999999999999.a.b": "partition is out of range",
		"jetway.out.3.a.b":                       "want 4 tokens for out, have 5",
	} {
		_, err := ParseSubject(in)
		if !errors.Is(err, ErrInvalidSubject) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSubject(%q) = %v; want ErrInvalidSubject saying %q", in, err, want)
		}
	}
	_, err := ParseSubject("jetway.events.a.b.c")
	var se *SubjectError
	if !errors.As(err, &se) || se.Subject != "jetway.events.a.b.c" {
		t.Errorf("not a *SubjectError naming the subject: %#v", err)
	}
	if _, err := ParseSubject("jetway.events.a.b$"); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("a bad token is not also ErrInvalidToken: %v", err)
	}
}
