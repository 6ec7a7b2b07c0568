// Package chat is the interactive side of `jetway chat`: a prompt for one
// session that keeps showing headlines and streamed text while you type.
//
// On a terminal it puts the terminal in raw mode and edits the line itself
// (golang.org/x/term's line editor): when an event arrives, the prompt line
// is cleared, the event printed, and the prompt redrawn with what was typed
// so far, so a notice never waits for Enter. When input is not a terminal
// (a script, a pipe) it reads plain lines and prints events as lines.
package chat

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"jetway/pkg/client"
	"jetway/pkg/events"
)

// DefaultWait bounds how long line mode keeps showing output after its input
// ends, waiting for the run it started to end.
const DefaultWait = 5 * time.Minute

// Config is one chat.
type Config struct {
	// Client talks to the dispatcher with the tenant's token. Required.
	Client *client.Client
	// Admin, if set, is used for /stop (Ground Stop needs an admin token);
	// otherwise /stop is tried with Client and its refusal shown.
	Admin   *client.Client
	Session string
	// In and Out are the person's side; when In is a terminal, chat runs
	// the terminal in raw mode and restores it on return.
	In  io.Reader
	Out io.Writer
	// Wait is how long line mode waits, after its input ends, for the run
	// it started to end (DefaultWait when zero).
	Wait time.Duration
	// CLI and CLIFlags make the commands the chat suggests (lifting Ground
	// Stop) paste as they are: the program as the person ran it, e.g.
	// "bin/jetway" ("jetway" when empty), and the flags that reach this
	// dispatcher, e.g. "--url http://127.0.0.1:8081".
	CLI, CLIFlags string
}

// Help lists the slash commands.
const Help = `/steer <note>  redirect the work under way
/jobs          list the session's background jobs
/kill <N>      kill background job N and its whole process tree
/stop          Ground Stop this session (admin token)
/quit          leave (Ctrl-D or Ctrl-C too)`

// Run chats until the person quits, input ends (line mode: and the run it
// started has ended), or ctx is done. It fails at once if the session's
// stream cannot be opened (dispatcher unreachable, token refused).
func Run(ctx context.Context, cfg Config) error {
	if cfg.Client == nil {
		return errors.New("chat: Config.Client is required")
	}
	if err := events.ValidateToken("session", cfg.Session); err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Open the stream before reading any input, so nothing the first line
	// causes is missed.
	first, err := cfg.Client.Stream(ctx, cfg.Session, client.StreamOptions{FromNew: true})
	if err != nil {
		return err
	}

	c := &chat{cfg: cfg, runEnded: make(chan struct{}, 1)}
	if f, ok := cfg.In.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		old, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			first.Close()
			return fmt.Errorf("chat: raw mode: %w", err)
		}
		defer term.Restore(int(f.Fd()), old)
		c.term = term.NewTerminal(struct {
			io.Reader
			io.Writer
		}{f, cfg.Out}, cfg.Session+"> ")
		if w, h, err := term.GetSize(int(f.Fd())); err == nil {
			_ = c.term.SetSize(w, h)
		}
	}

	c.println("jetway chat with " + cfg.Session + " — /help for commands, /quit to leave")
	// What the session is doing before anything new: the stream is open,
	// so what arrives meanwhile waits and is shown after it, in order.
	c.opening(ctx)
	streamDone := make(chan error, 1)
	go func() { streamDone <- c.follow(ctx, first) }()
	// Whatever ends the chat, the stream goroutine stops before Run returns,
	// so nothing is printed after it.
	streamOver := false
	defer func() {
		cancel()
		if !streamOver {
			<-streamDone
		}
	}()
	lines := make(chan string)
	inputDone := make(chan error, 1)
	go func() { inputDone <- c.read(ctx, lines) }()

	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-streamDone:
			streamOver = true
			if err != nil && ctx.Err() == nil {
				return err
			}
			return nil
		case line := <-lines:
			if quit := c.handle(ctx, line); quit {
				return nil
			}
		case err := <-inputDone:
			if err != nil {
				return err
			}
			if c.term != nil || !c.sent {
				return nil
			}
			// Line mode: show the rest of the run the input started.
			t := time.NewTimer(cfg.Wait)
			defer t.Stop()
			select {
			case <-c.runEnded:
			case <-t.C:
			case <-ctx.Done():
			case <-streamDone:
				streamOver = true
			}
			return nil
		}
	}
}

type chat struct {
	cfg  Config
	term *term.Terminal // nil in line mode

	mu       sync.Mutex // line mode output
	sent     bool       // input was sent (main goroutine only)
	runEnded chan struct{}
}

// println shows one line above the prompt (terminal) or as a line.
func (c *chat) println(s string) {
	if c.term != nil {
		_, _ = c.term.Write([]byte(s + "\n"))
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintln(c.cfg.Out, s)
}

// read feeds typed lines to the chat until input ends (nil) or fails.
func (c *chat) read(ctx context.Context, lines chan<- string) error {
	send := func(s string) bool {
		select {
		case lines <- s:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if c.term != nil {
		for {
			line, err := c.term.ReadLine()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil && !errors.Is(err, term.ErrPasteIndicator) {
				return fmt.Errorf("chat: read terminal: %w", err)
			}
			if !send(line) {
				return nil
			}
		}
	}
	sc := bufio.NewScanner(c.cfg.In)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if !send(sc.Text()) {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("chat: read input: %w", err)
	}
	return nil
}

// follow shows the session's events: first from the stream Run opened, then
// through client.Follow, resuming after the last event seen.
func (c *chat) follow(ctx context.Context, first *client.Stream) error {
	var r Renderer
	var grace *time.Timer // after a run's end, how long to wait for its headline
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	ended := func() {
		select {
		case c.runEnded <- struct{}{}:
		default:
		}
	}
	show := func(ev client.Event) error {
		for _, l := range r.Lines(ev) {
			c.println(l)
		}
		switch {
		case ev.Type == events.TypeRunEnded && grace == nil:
			// The notifier's headline for it normally follows within
			// milliseconds; without a notifier, stop waiting soon anyway.
			grace = time.AfterFunc(headlineGrace, ended)
		case runEndedHeadline(ev):
			ended()
		}
		return nil
	}
	for {
		ev, err := first.Next()
		if err != nil {
			break
		}
		_ = show(ev)
	}
	first.Close()
	if ctx.Err() != nil {
		return nil
	}
	// The stream ended: resume after the last event seen. Say once that
	// the connection is gone (not once per attempt), and once that it is
	// back.
	lost := false
	resumed := func(ev client.Event) error {
		if lost {
			lost = false
			c.println("» back: jetway at " + c.cfg.Client.BaseURL() + " answers again")
		}
		return show(ev)
	}
	opts := client.StreamOptions{LastEventID: first.LastEventID(), FromNew: first.LastEventID() == ""}
	err := c.cfg.Client.Follow(ctx, c.cfg.Session, opts, resumed, func(err error) {
		if lost {
			return
		}
		lost = true
		c.println(lostLine(c.cfg.Client.BaseURL(), err))
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// lostLine is what the chat says once when its stream cannot be reopened:
// that jetway went away (stopped, most likely) when nothing answers, else
// why the stream failed.
func lostLine(url string, err error) string {
	var ue *client.UnreachableError
	if errors.As(err, &ue) {
		return "! jetway at " + url + " went away (stopped?); the chat reconnects when it is back — /quit to leave"
	}
	return "! stream: " + err.Error() + " — reconnecting"
}

// handle acts on one typed line; it reports true when the person quits.
func (c *chat) handle(ctx context.Context, line string) bool {
	line = strings.TrimSpace(line)
	if line == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	if !strings.HasPrefix(cmd, "/") {
		c.input(ctx, line)
		return false
	}
	switch cmd {
	case "/quit", "/exit", "/q":
		return true
	case "/help", "/?":
		for _, l := range strings.Split(Help, "\n") {
			c.println(l)
		}
	case "/steer":
		if arg == "" {
			c.println("! /steer needs a note: /steer <note>")
			break
		}
		if _, err := c.cfg.Client.Steer(ctx, c.cfg.Session, arg); err != nil {
			c.println("! " + err.Error())
		}
	case "/jobs":
		c.jobs(ctx)
	case "/kill":
		n, err := strconv.ParseUint(arg, 10, 64)
		if err != nil {
			c.println("! /kill needs a job number: /kill 3")
			break
		}
		j, err := c.cfg.Client.KillJob(ctx, c.cfg.Session, strconv.FormatUint(n, 10))
		if err != nil {
			c.println("! /kill " + arg + ": " + err.Error())
			break
		}
		c.println("job " + j.ID + " " + j.Status + ": " + j.Line)
	case "/stop":
		cl := c.cfg.Admin
		if cl == nil {
			cl = c.cfg.Client
		}
		st, err := cl.SetStop(ctx, c.cfg.Session, "stopped from jetway chat")
		if err != nil {
			c.println("! " + err.Error())
			break
		}
		c.println("Ground Stop on for " + st.Scope + " — lift it with: " + c.command("stop --off --session "+c.cfg.Session))
	default:
		c.println("! unknown command " + cmd + " — /help lists them")
	}
	return false
}

func (c *chat) input(ctx context.Context, text string) {
	if _, err := c.cfg.Client.Input(ctx, c.cfg.Session, text); err != nil {
		c.println("! " + err.Error())
		return
	}
	c.sent = true
}

func (c *chat) jobs(ctx context.Context) {
	jobs, err := c.cfg.Client.Jobs(ctx, c.cfg.Session)
	if err != nil {
		c.println("! " + err.Error())
		return
	}
	if len(jobs) == 0 {
		c.println("no background jobs")
		return
	}
	var b strings.Builder
	_ = client.WriteJobs(&b, jobs)
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		c.println(l)
	}
}

// headlineGrace is how long line mode waits, after a run's end, for the
// notifier's headline about it before leaving.
const headlineGrace = time.Second

// runEndedHeadline reports the notifier's headline about a run's end.
func runEndedHeadline(ev client.Event) bool {
	if ev.Type != events.TypeHeadline {
		return false
	}
	var h events.HeadlineNote
	return json.Unmarshal(ev.Data, &h) == nil && h.About == events.TypeRunEnded
}
