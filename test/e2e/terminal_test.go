package e2e

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"jetway/pkg/events"
)

// terminal is a program running in a real pseudo-terminal, with what it
// has shown so far.
type terminal struct {
	cmd    *exec.Cmd
	ptmx   *os.File
	screen *feed[byte]
	exited chan struct{}
	err    error // the program's exit, once exited is closed
}

// startTerminal runs cmd in a new pty. At cleanup the program's whole
// process group (it is a session leader) gets SIGTERM, then SIGKILL if it
// has not exited in stopTimeout — so a script's background children go too.
func startTerminal(t *testing.T, cmd *exec.Cmd) *terminal {
	t.Helper()
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 160})
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	term := &terminal{cmd: cmd, ptmx: ptmx, screen: newFeed[byte](), exited: make(chan struct{})}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			term.screen.add(buf[:n]...)
			if err != nil {
				term.screen.end(err)
				return
			}
		}
	}()
	go func() {
		term.err = cmd.Wait()
		close(term.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-term.exited:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-term.exited:
			case <-time.After(stopTimeout):
				t.Errorf("%s still running %s after SIGTERM; killing it", cmd.Path, stopTimeout)
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-term.exited
			}
		}
		ptmx.Close()
		if t.Failed() {
			t.Logf("the terminal showed:\n%s", term.screen.snapshot())
		}
	})
	return term
}

func (term *terminal) typeIn(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(term.ptmx, s); err != nil {
		t.Fatalf("type %q: %v", s, err)
	}
}

// until waits up to d for ok to hold for what the terminal has shown.
func (term *terminal) until(t *testing.T, d time.Duration, what string, ok func(string) bool) string {
	t.Helper()
	b := term.screen.wait(t, d, "the terminal shows "+what, func(b []byte) bool { return ok(string(b)) },
		func(b []byte) string { return strings.ReplaceAll(string(b), "\r", "") })
	return string(b)
}

// shows waits for the terminal to show s.
func (term *terminal) shows(t *testing.T, d time.Duration, s string) string {
	t.Helper()
	return term.until(t, d, "\""+s+"\"", func(out string) bool { return strings.Contains(out, s) })
}

// exit waits up to d for the program to exit and returns its error.
func (term *terminal) exit(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-term.exited:
		return term.err
	case <-time.After(d):
		t.Fatalf("%s still running after %s", term.cmd.Path, d)
		return errors.New("still running")
	}
}

// testChatHeadlineWhileTyping runs `jetway chat` in a real terminal the way
// a person in a second terminal does (tokens found in ./.jetway, the URL
// from the environment), types half a line, and has a job end meanwhile:
// the headline must appear at once, above the prompt, which is redrawn with
// the half-typed line — and Enter then sends the whole line.
func testChatHeadlineWhileTyping(t *testing.T, d *devStack) {
	const session = "e2e-chat"
	cmd := exec.Command(jetwayBinary(t), "chat", session)
	cmd.Dir = d.Dir
	cmd.Env = cleanEnv("JETWAY_URL="+d.URL, "TERM=xterm")
	term := startTerminal(t, cmd)

	prompt := session + "> "
	term.shows(t, startTimeout, "jetway chat with "+session)
	term.shows(t, startTimeout, prompt)
	term.typeIn(t, "half a thou")
	term.shows(t, runTimeout, prompt+"half a thou")

	publishJobExited(t, d.jetStream(t), session, events.JobExited{
		ID: 9, Program: "make", ExitStatus: 0, RunningForMS: (21 * time.Minute).Milliseconds(),
		Tail: "linking\nbuild ok", Status: events.StatusExited,
	})
	const headline = "» job 9 (make) exited 0 after 21m"
	term.until(t, runTimeout, "the headline, then the prompt redrawn with the half-typed line", func(out string) bool {
		i := strings.Index(out, headline)
		return i >= 0 && strings.Contains(out[i:], prompt+"half a thou")
	})
	// The job's end also woke the session; its answer shows up as well —
	// streamed, so a headline may land between two of its deltas.
	term.until(t, runTimeout, "the agent's answer to the job's end", func(out string) bool {
		return wordsInOrder(out, "Job news: job 9 (make) exited 0 after 21m. Last line: build ok")
	})

	before := len(term.screen.snapshot())
	term.typeIn(t, "ght\r")
	term.until(t, runTimeout, "the answer to the whole line, sent with Enter", func(out string) bool {
		return wordsInOrder(out[before:], "You wrote half a thought, typed around a headline.")
	})
	term.typeIn(t, "/quit\r")
	if err := term.exit(t, stopTimeout); err != nil {
		t.Fatalf("chat exited with %v after /quit", err)
	}
}

// wordsInOrder reports whether every word of want appears in out, in order:
// streamed text is written delta by delta, and a headline may be printed
// (with the prompt redrawn) between two deltas.
func wordsInOrder(out, want string) bool {
	for _, w := range strings.Fields(want) {
		i := strings.Index(out, w)
		if i < 0 {
			return false
		}
		out = out[i+len(w):]
	}
	return true
}
