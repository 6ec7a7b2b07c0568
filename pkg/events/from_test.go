package events

import "testing"

func TestFrom_names_who_an_event_type_comes_from(t *testing.T) {
	for typ, want := range map[string]string{
		TypeInput:                 FromPerson,
		TypeSteer:                 FromSteer,
		TypeResume:                FromTimer,
		TypeAgentInput:            FromParent,
		TypeJobExited:             FromJob,
		TypeJobOverdue:            FromJob,
		TypeJobNotice:             FromJob,
		TypeAgentFinished:         FromSubAgent,
		TypeAgentProgress:         FromSubAgent,
		"com.example.ci.finished": FromOther,
		"":                        FromOther,
	} {
		if got := From(typ); got != want {
			t.Errorf("From(%q) = %q, want %q", typ, got, want)
		}
	}
}
