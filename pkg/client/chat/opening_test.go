package chat

import (
	"testing"

	"jetway/pkg/client"
	"jetway/pkg/dispatcherapi"
)

// A run a job's notice or an outside event started shows as what it is,
// never as "you:"; a person's own line does.
func TestOpening_lines_say_a_notice_started_run_is_not_the_person_s_words(t *testing.T) {
	turn := func(text string, from ...string) client.TranscriptEntry {
		return client.TranscriptEntry{Kind: "run_started", Run: "r-1", Cause: "dispatch", Role: "user", From: from,
			Content: []dispatcherapi.TranscriptBlock{{Type: "text", Text: text}}}
	}
	for _, c := range []struct {
		e    client.TranscriptEntry
		want string
	}{
		{turn("hello", "person"), "you: hello"},
		{turn("hello"), "you: hello"}, // recorded before entries said
		{turn("job 1 (sleep) exited 0", "job"), "» job: job 1 (sleep) exited 0"},
		{turn("ci finished", "event"), "» event: ci finished"},
		{turn("hello\n\nci finished", "person", "event"), "» person+event: hello ci finished"},
	} {
		lines := entryLines(c.e)
		if len(lines) != 2 || lines[1] != c.want {
			t.Errorf("entryLines(from %v) = %q, want the turn as %q", c.e.From, lines, c.want)
		}
	}
}
