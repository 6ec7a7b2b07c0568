package chat

import (
	"bytes"
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/creack/pty"

	"jetway/pkg/client"
	"jetway/pkg/events"
)

// userTurn is a transcript entry of a user turn delivering ids.
func userTurn(id uint64, kind, messageKind, text string, delivers, from []string) client.TranscriptEntry {
	return client.TranscriptEntry{ID: id, Kind: kind, Run: "r1", Role: "user", MessageKind: messageKind,
		Content: []client.TranscriptBlock{{Type: "text", Text: text}}, Delivers: delivers, From: from}
}

func TestLine_mode_echoes_what_it_sends_and_shows_lines_sent_from_elsewhere_once(t *testing.T) {
	f, c := newFake(t)
	f.onInput = func(text string) {
		if text != "hello" {
			return
		}
		// The run took this chat's line (e1) with one typed in the console
		// (x-console); a job's notice and a line sent with curl reached it
		// while it ran.
		f.mu.Lock()
		f.entries = []client.TranscriptEntry{
			userTurn(5, "run_started", "", "hello\n\nwhat did the console say?", []string{"e1", "x-console"}, []string{"person", "person"}),
			userTurn(6, "message", "notice", "[background job notice] job 1 (make) exited 0", []string{"x-job"}, nil),
			userTurn(7, "message", "", "and one more from curl", []string{"x-curl"}, nil),
		}
		f.mu.Unlock()
		f.push <- frame(events.TypeRunStarted, events.RunStarted{Run: "r1", Cause: "dispatch", Events: []string{"e1", "x-console"}})
		f.push <- frame(events.TypeRunDelivered, events.RunDelivered{Run: "r1", Events: []string{"x-job"}})
		f.push <- frame(events.TypeRunDelivered, events.RunDelivered{Run: "r1", Events: []string{"x-curl"}})
		f.push <- frame(events.TypeRunText, events.RunText{Run: "r1", Text: "Answered all three.\n"})
		f.push <- frame(events.TypeRunEnded, events.RunEnded{Run: "r1", Reason: "completed", Turns: 1})
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := Run(ctx, Config{Client: c, Session: "s1", In: strings.NewReader("hello\n"), Out: &out}); err != nil {
		t.Fatalf("Run: %v", err)
	}
	text := out.String()
	lines := strings.Split(text, "\n")
	for _, want := range []string{"you: hello", "person (elsewhere): what did the console say?", "person (elsewhere): and one more from curl"} {
		if n := slices.Index(lines, want); n < 0 || strings.Count(text, want) != 1 {
			t.Errorf("output shows %q %d times, want once as a line:\n%s", want, strings.Count(text, want), text)
		}
	}
	if i, j := strings.Index(text, "you: hello"), strings.Index(text, "Answered all three."); i < 0 || j < 0 || i > j {
		t.Errorf("the line sent is not echoed before its answer:\n%s", text)
	}
	for _, bad := range []string{"(elsewhere): hello", "(elsewhere): [background", "(elsewhere): job"} {
		if strings.Contains(text, bad) {
			t.Errorf("output shows %q: the chat's own line or a notice as a person's line from elsewhere:\n%s", bad, text)
		}
	}
}

func TestA_terminal_chat_shows_a_line_sent_from_elsewhere_and_not_its_own(t *testing.T) {
	f, c := newFake(t)
	scr, ptmx := ptyChat(t, c)
	f.mu.Lock()
	f.entries = []client.TranscriptEntry{userTurn(3, "run_started", "", "status of the build?", []string{"x-console"}, []string{"person"})}
	f.mu.Unlock()
	f.push <- frame(events.TypeRunStarted, events.RunStarted{Run: "r1", Cause: "dispatch", Events: []string{"x-console"}})
	scr.waitUntil(t, "the line from elsewhere", func(s string) bool { return strings.Contains(s, "person (elsewhere): status of the build?") })

	f.mu.Lock()
	f.entries = append(f.entries, userTurn(9, "message", "", "mine", []string{"e1"}, nil))
	f.mu.Unlock()
	f.mu.Lock()
	f.onInput = func(string) {
		f.push <- frame(events.TypeRunDelivered, events.RunDelivered{Run: "r1", Events: []string{"e1"}})
	}
	f.mu.Unlock()
	ptmx.Write([]byte("mine\r"))
	out := scr.waitUntil(t, "the delivery of the typed line", func(s string) bool { return strings.Contains(s, "delivered to the running model: mine") })
	if strings.Contains(out, "(elsewhere): mine") || strings.Contains(out, "you: mine") {
		t.Errorf("the terminal chat shows its own line again:\n%q", out)
	}
}

// ptyChat runs a chat on s1 in a pseudo-terminal until the test ends, and
// returns its screen, once the prompt shows, and the terminal's master
// side to type into.
func ptyChat(t *testing.T, c *client.Client) (*screen, *os.File) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	if err := pty.Setsize(tty, &pty.Winsize{Rows: 24, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	scr := &screen{more: make(chan struct{}, 1)}
	go io.Copy(scr, ptmx)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Config{Client: c, Session: "s1", In: tty, Out: tty}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		ptmx.Close()
		tty.Close()
	})
	scr.waitUntil(t, "the prompt", func(s string) bool { return strings.Contains(s, "s1> ") })
	return scr, ptmx
}
