package events

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseSubject holds, for any string: ParseSubject does not panic; a
// refusal is an ErrInvalidSubject; an accepted subject has valid tokens,
// is exactly the subject its builder renders (with an all-digit partition
// after the kind when it has one), and parses again to the same Subject. Subjects
// are where tenant isolation starts, so nothing may slip through that the
// builders would refuse. The seed corpus is in
// testdata/fuzz/FuzzParseSubject.
func FuzzParseSubject(f *testing.F) {
	for _, s := range []string{
		"jetway.events.t1.s1", "jetway.jobevents.3.t1.s1", "jetway.schedules.t1.s1.lay-1",
		"jetway.transcript.a.b", "jetway.out.t.s.extra", "jetway.events.t1.s*", "jetway.events.>",
		"jetway.agentevents.007.t.s", "jetway.events.99999999999999999999.t.s", "3.jetway.events.t.s", "jetway..t.s", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		s, err := ParseSubject(subject)
		if err != nil {
			if !errors.Is(err, ErrInvalidSubject) {
				t.Fatalf("refusal %v (%T) is not ErrInvalidSubject", err, err)
			}
			return
		}
		for field, tok := range map[string]string{"tenant": s.Tenant, "session": s.Session} {
			if err := ValidateToken(field, tok); err != nil {
				t.Fatalf("accepted %q with a bad %s: %v", subject, field, err)
			}
		}
		var built string
		switch s.Kind {
		case KindEvents:
			built, err = EventsSubject(s.Tenant, s.Session)
		case KindJobEvents:
			built, err = JobEventsSubject(s.Tenant, s.Session)
		case KindAgentEvents:
			built, err = AgentEventsSubject(s.Tenant, s.Session)
		case KindOut:
			built, err = OutSubject(s.Tenant, s.Session)
		case KindNotify:
			built, err = NotifySubject(s.Tenant, s.Session)
		case KindTranscript:
			built, err = TranscriptSubject(s.Tenant, s.Session)
		case KindSchedules:
			built, err = ScheduleSubject(s.Tenant, s.Session, s.ID)
		default:
			t.Fatalf("accepted %q with unknown kind %q", subject, s.Kind)
		}
		if err != nil {
			t.Fatalf("accepted %q, but its builder refuses %+v: %v", subject, s, err)
		}
		if built != s.String() {
			t.Fatalf("String() %q differs from the builder's %q", s.String(), built)
		}
		if s.Partition < 0 {
			if subject != built {
				t.Fatalf("accepted %q, which is not the subject %q it parsed to", subject, built)
			}
		} else {
			head := SubjectRoot + "." + string(s.Kind) + "."
			n, rest, _ := strings.Cut(strings.TrimPrefix(subject, head), ".")
			p, err := strconv.Atoi(n)
			if !strings.HasPrefix(subject, head) || err != nil || p != s.Partition || strings.Trim(n, "0123456789") != "" ||
				head+s.Tenant+"."+s.Session != built || rest != s.Tenant+"."+s.Session {
				t.Fatalf("accepted %q as partition %d of %q", subject, s.Partition, built)
			}
		}
		again, err := ParseSubject(built)
		if err != nil {
			t.Fatalf("the rendered subject %q does not parse: %v", built, err)
		}
		s.Partition = -1
		if again != s {
			t.Fatalf("%q parses to %+v, want %+v", built, again, s)
		}
	})
}

// FuzzValidateToken holds the token rule exactly: a value is accepted if
// and only if it is 1–64 of A-Z a-z 0-9 _ -, and a refusal is an
// ErrInvalidToken that names the field.
func FuzzValidateToken(f *testing.F) {
	for _, s := range []string{"t1", "", "a.b", "a*", ">", "ünï", strings.Repeat("x", 64), strings.Repeat("x", 65), "a b", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		want := len(v) >= 1 && len(v) <= MaxTokenLen
		for _, c := range []byte(v) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				want = false
			}
		}
		err := ValidateToken("session", v)
		if (err == nil) != want {
			t.Fatalf("ValidateToken(%q) = %v, want accepted=%v", v, err, want)
		}
		if err != nil && (!errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "session")) {
			t.Fatalf("refusal %v is not an ErrInvalidToken naming the field", err)
		}
	})
}
