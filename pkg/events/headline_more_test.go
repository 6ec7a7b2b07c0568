package events

import "testing"

func TestGroundStopHeadline_says_on_with_reason_and_who_or_lifted(t *testing.T) {
	for _, tc := range []struct {
		on         bool
		reason, by string
		want       string
	}{
		{true, "incident 42", "acme", "Ground Stop on: incident 42 (set by acme)"},
		{true, "", "", "Ground Stop on"},
		{true, "two\nlines", "", "Ground Stop on: two lines"},
		{false, "incident 42", "acme", "Ground Stop lifted"},
	} {
		if got := GroundStopHeadline(tc.on, tc.reason, tc.by); got != tc.want {
			t.Errorf("GroundStopHeadline(%v, %q, %q) = %q, want %q", tc.on, tc.reason, tc.by, got, tc.want)
		}
	}
}
