package main

import (
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// ptyChat is `jetway chat` on a real terminal, attached to a dev stack.
type ptyChat struct {
	scr    *ptyScreen
	tty    *os.File
	exited chan error
}

// startPtyChat runs `jetway chat SESSION` against d in a pseudo-terminal.
func startPtyChat(t *testing.T, d *devStack, session string, extra ...string) *ptyChat {
	t.Helper()
	args := append([]string{"chat", "--url", d.url, "--tokens-file", d.tokens}, extra...)
	cmd := exec.Command(jetwayBinary(t), append(args, session)...)
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	c := &ptyChat{scr: &ptyScreen{more: make(chan struct{}, 1)}, tty: ptmx, exited: make(chan error, 1)}
	go func() { c.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		err := <-c.exited
		c.exited <- err
		ptmx.Close()
	})
	go io.Copy(c.scr, ptmx)
	c.scr.until(t, "the prompt", func(s string) bool { return strings.Contains(s, session+"> ") })
	return c
}

func (c *ptyChat) typeLine(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(c.tty, line+"\r"); err != nil {
		t.Fatalf("type %q: %v", line, err)
	}
}

// quit types /quit and waits for the chat to end.
func (c *ptyChat) quit(t *testing.T) {
	t.Helper()
	c.typeLine(t, "/quit")
	select {
	case err := <-c.exited:
		c.exited <- err
		if err != nil {
			t.Fatalf("chat exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("/quit did not end the chat")
	}
}

func TestDev_stops_at_once_with_a_chat_attached_and_the_chat_says_once_that_it_went_away(t *testing.T) {
	d := startDev(t)
	c := startPtyChat(t, d, "demo")

	if err := d.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("dev exit code %d\n%s", code, d.p.output())
	}
	// Shutdown did not wait out an open stream: the server ended it.
	if out := d.p.output(); strings.Contains(out, "http shutdown") || strings.Contains(out, "deadline exceeded") {
		t.Errorf("dev's HTTP shutdown waited for the attached stream:\n%s", out)
	}
	c.scr.until(t, "that jetway went away", func(s string) bool { return strings.Contains(s, "went away") })
	c.quit(t)
	c.scr.mu.Lock()
	screen := c.scr.buf.String()
	c.scr.mu.Unlock()
	if n := strings.Count(screen, "went away"); n != 1 {
		t.Errorf("the chat said %d times that jetway went away, want once:\n%s", n, screen)
	}
	if strings.Contains(screen, "reconnecting") {
		t.Errorf("the chat printed reconnect lines:\n%s", screen)
	}
}
