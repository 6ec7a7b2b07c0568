package main

import (
	"fmt"
	"io"
	"jetway/internal/testutil"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// longJobScript starts a background job that runs until it is killed; its
// command carries marker so the test can look for its processes.
func longJobScript(t *testing.T, marker string) string {
	t.Helper()
	script := fmt.Sprintf(`{"turns": [
	  {"text": "Starting the long job.", "tool_calls": [{"name": "shell", "input": {"command": "sleep 600; : %s", "background": true}}]},
	  {"text": "It runs in the background."},
	  {"when": {"notice_contains": "[background job notice]"}, "text": "The long job ended: {{notice}}"}
	]}`, marker)
	path := filepath.Join(t.TempDir(), "long.json")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestChat_opens_with_history_running_jobs_and_the_Ground_Stop_with_how_to_lift_it_and_kill_kills_the_job(t *testing.T) {
	marker := fmt.Sprintf("killtest-%d", time.Now().UnixNano())
	t.Setenv("JETWAY_SCRIPT", longJobScript(t, marker))
	d := startDev(t)
	cf := []string{"--url", d.url, "--tokens-file", d.tokens}
	if out, err := runCLI(t, append([]string{"send", "s", "start the long job"}, cf...)...); err != nil {
		t.Fatalf("send: %v\n%s", err, out)
	}
	waitCLI(t, "job 1 running", func(s string) bool { return regexp.MustCompile(`(?m)^1\s+running\s`).MatchString(s) },
		append([]string{"jobs", "s"}, cf...)...)
	waitCLI(t, "the session idle", func(s string) bool { return regexp.MustCompile(`(?m)^s\s+idle\s`).MatchString(s) },
		append([]string{"sessions"}, cf...)...)

	c := startPtyChat(t, d, "s")
	screen := c.scr.until(t, "history and the running job", func(s string) bool {
		return strings.Contains(s, "you: start the long job") &&
			strings.Contains(s, "agent: It runs in the background.") &&
			strings.Contains(s, "running: job 1 — t1 running for")
	})
	if i, j := strings.Index(screen, "recently:"), strings.Index(screen, "running: job 1"); i < 0 || j < i {
		t.Errorf("the history does not come first, then the running job:\n%s", screen)
	}
	if len(testutil.ProcessesWith(marker)) == 0 {
		t.Fatalf("the long job's processes are not running before /kill")
	}

	c.typeLine(t, "/kill 1")
	c.scr.until(t, "job 1 killed", func(s string) bool { return strings.Contains(s, "job 1 killed: t1 killed") })
	waitCLI(t, "job 1 killed", func(s string) bool { return regexp.MustCompile(`(?m)^1\s+killed\s`).MatchString(s) },
		append([]string{"jobs", "s"}, cf...)...)
	if pids := testutil.ProcessesWith(marker); len(pids) != 0 {
		t.Errorf("processes of the killed job still run: %v", pids)
	}
	c.quit(t)

	// Ground Stop kills what runs, so a chat opened under it shows the
	// switch (it shows no running job: there is none left).
	if out, err := runCLI(t, append([]string{"stop", "--session", "s", "--reason", "opening test"}, cf...)...); err != nil {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	c = startPtyChat(t, d, "s")
	lift := jetwayBinary(t) + " stop --off --session s --url " + d.url + " --tokens-file " + d.tokens
	screen = c.scr.until(t, "history and the Ground Stop", func(s string) bool {
		return strings.Contains(s, "you: start the long job") &&
			strings.Contains(s, "reason: opening test") &&
			strings.Contains(s, "lift it with: "+lift)
	})
	if i, j := strings.Index(screen, "recently:"), strings.Index(screen, "! Ground Stop on (session"); i < 0 || j < i {
		t.Errorf("the history does not come first, then the Ground Stop:\n%s", screen)
	}

	// The command the chat showed lifts the switch as it is.
	args := strings.Fields(strings.TrimPrefix(lift, jetwayBinary(t)+" "))
	if out, err := runCLI(t, args...); err != nil || !strings.Contains(out, "off") {
		t.Errorf("%s: %v\n%s", lift, err, out)
	}
	c.quit(t)
}

// pipeChat runs `jetway chat` with lines piped into it, as
// `echo … | jetway chat demo` does, and returns what it printed.
func pipeChat(t *testing.T, d *devStack, session, input string, extra ...string) string {
	t.Helper()
	args := append([]string{"chat", "--url", d.url, "--tokens-file", d.tokens}, extra...)
	cmd := exec.Command(jetwayBinary(t), append(args, session)...)
	cmd.Stdin = strings.NewReader(input)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
		<-done
	})
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		t.Fatalf("piped chat still running after 120s")
	}
	if err != nil {
		t.Fatalf("piped chat: %v\n%s", err, out)
	}
	return string(out)
}

func TestChat_with_piped_input_stays_until_the_job_exit_and_the_report_it_leads_to(t *testing.T) {
	d := startDev(t)
	out := pipeChat(t, d, "demo", "build the project\n")
	// What was piped in is echoed, as the person's line, before its run.
	if you, started := strings.Index(out, "\nyou: build the project\n"), strings.Index(out, "» run r-"); you < 0 || started < you {
		t.Errorf("piped chat did not echo the line it sent before its run:\n%s", out)
	}
	// A run's start is shown before its text.
	if started, text := strings.Index(out, "» run r-"), strings.Index(out, "I'll start the build"); started < 0 || text < started {
		t.Errorf("the run's first text came before its start:\n%s", out)
	}
	// The job's headline comes from the notifier, which reads the job's
	// event from the jobs stream while the runner reads it from the
	// session's shard: the two are not ordered, so the report may come
	// first.
	exit := strings.Index(out, "» job 1 (sleep) exited 0 after")
	report := strings.Index(out, "The background build has finished")
	if exit < 0 || report < 0 {
		t.Fatalf("piped chat left before the job's exit headline and the report:\n%s", out)
	}
	if !strings.Contains(out[report:], "completed after") {
		t.Errorf("piped chat left before the reporting run's end headline:\n%s", out)
	}

	out = pipeChat(t, d, "other", "build the project\n", "--no-wait")
	if strings.Contains(out, "exited 0 after") {
		t.Errorf("--no-wait waited for the job:\n%s", out)
	}
}

func TestChat_shows_a_line_typed_while_the_session_is_busy_as_delivered_when_it_reaches_the_model(t *testing.T) {
	script := `{"turns": [
	  {"text": "Working on it.", "tool_calls": [{"name": "shell", "input": {"command": "sleep 3"}}]},
	  {"when": {"user_contains": "also check the docs"}, "text": "Checking the docs too."},
	  {"text": "Done without the docs."}
	]}`
	path := filepath.Join(t.TempDir(), "busy.json")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JETWAY_SCRIPT", path)
	d := startDev(t)
	c := startPtyChat(t, d, "busy")
	c.typeLine(t, "start")
	c.scr.until(t, "the run busy in its shell call", func(s string) bool { return strings.Contains(s, "↳ shell") })
	c.typeLine(t, "also check the docs")
	screen := c.scr.until(t, "the line delivered, then the run's end", func(s string) bool {
		i := strings.Index(s, "» delivered to the running model: also check the docs")
		return i >= 0 && strings.Contains(s[i:], "completed after")
	})
	if !strings.Contains(screen, "Checking the docs too.") {
		t.Errorf("the model did not get the line in the same run:\n%s", screen)
	}
	if n := strings.Count(screen, "» run r-"); n != 2 { // started and completed, one run
		t.Errorf("%d run lines, want one run's start and end:\n%s", n, screen)
	}
	c.quit(t)
}

func TestChat_shows_a_line_sent_from_another_terminal_and_a_shell_calls_command(t *testing.T) {
	script := `{"turns": [
	  {"text": "Running it.", "tool_calls": [{"name": "shell", "input": {"command": "echo hi from the shell"}}]},
	  {"text": "Done."}
	]}`
	path := filepath.Join(t.TempDir(), "elsewhere.json")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JETWAY_SCRIPT", path)
	d := startDev(t)
	c := startPtyChat(t, d, "two")
	if out, err := runCLI(t, "send", "--url", d.url, "--tokens-file", d.tokens, "two", "sent from another terminal"); err != nil {
		t.Fatalf("jetway send: %v\n%s", err, out)
	}
	screen := c.scr.until(t, "the line from elsewhere, the shell call's command and the run's end", func(s string) bool {
		i := strings.Index(s, "person (elsewhere): sent from another terminal")
		return i >= 0 && strings.Contains(s[i:], "↳ shell: echo hi from the shell") && strings.Contains(s[i:], "completed after")
	})
	if n := strings.Count(screen, "sent from another terminal"); n != 1 {
		t.Errorf("the line from elsewhere is shown %d times, want once:\n%s", n, screen)
	}
	c.typeLine(t, "and this one is mine")
	screen = c.scr.until(t, "the chat's own line run to its end", func(s string) bool {
		return strings.Count(s, "completed after") == 2
	})
	if strings.Contains(screen, "(elsewhere): and this one is mine") {
		t.Errorf("the chat shows its own line as one from elsewhere:\n%s", screen)
	}
	c.quit(t)
}
