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
	"sync/atomic"
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
	// Agent, when set, is the agent profile every line typed asks for: the
	// first binds the session to it, the rest keep it so.
	Agent string
	// In and Out are the person's side; when In is a terminal, chat runs
	// the terminal in raw mode and restores it on return.
	In  io.Reader
	Out io.Writer
	// Wait bounds how long line mode waits, after its input ends, for the
	// session to settle: idle, no running job, nothing waiting
	// (DefaultWait when zero).
	Wait time.Duration
	// NoWait makes line mode leave as soon as its input ends.
	NoWait bool
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
/approve <id> [input]   let a held call run (input: an edited one, as JSON)
/reject <id> <reason>   refuse a held call; the agent reads the reason
/answer <id> <answer>   answer the agent's question
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

	c := &chat{cfg: cfg, activity: make(chan struct{}, 1)}
	if f, ok := cfg.In.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		old, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			_ = first.Close() // unread: a failed close loses nothing
			return fmt.Errorf("chat: raw mode: %w", err)
		}
		defer func() {
			if err := term.Restore(int(f.Fd()), old); err != nil {
				fmt.Fprintf(os.Stderr, "jetway chat: restore the terminal: %v (run `reset`)\n", err)
			}
		}()
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
			// Only waits for the goroutine to stop printing: the chat
			// ends for another reason, which is the one Run returns.
			followErr := <-streamDone
			_ = followErr
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
			if cfg.NoWait {
				return nil
			}
			// Line mode: show everything the input set going.
			wctx, stopWaiting := context.WithTimeout(ctx, cfg.Wait)
			defer stopWaiting()
			streamOver = c.settle(wctx, streamDone)
			return nil
		}
	}
}

type chat struct {
	cfg  Config
	term *term.Terminal // nil in line mode

	mu        sync.Mutex    // line mode output
	sent      bool          // input was sent (main goroutine only)
	activity  chan struct{} // an event was shown
	endedRuns sync.Map      // run id → true: runs whose end was shown
	// typed maps the CE id of each line sent to its text, to say when a
	// line a busy session took reaches the model.
	typed sync.Map
	// wakes are the CE ids of job events (exits, overdue) shown that have
	// not reached a run yet: each starts a run or goes to the live one.
	// tookIDs are the CE ids runs have taken: a job's headline comes from
	// the notifier, which may read the event after the runner did, so it
	// can arrive after the run that took it.
	wakes   sync.Map
	tookIDs sync.Map
	// mine are the CE ids of every line this chat sent (id → text), kept
	// for the chat's life: a run that delivers any other event a person
	// sent got it from elsewhere (another chat, the console, curl), and
	// the chat shows that line (elsewhere.go).
	mine sync.Map
	// sending is held (write) while a line is being sent, until its id is
	// in mine: the stream can announce the run a line started before the
	// POST that sent it has answered, and the line must not then look like
	// someone else's.
	sending sync.RWMutex
	// cursor is the id of the last transcript entry the chat has read
	// (opening, then elsewhere.go): where the next read of lines from
	// elsewhere starts.
	cursor atomic.Uint64
}

// println shows one line above the prompt (terminal) or as a line. A
// write error is dropped: output that is gone has no one left to show
// the error to either.
func (c *chat) println(s string) {
	if c.term != nil {
		_, _ = c.term.Write([]byte(s + "\n"))
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = fmt.Fprintln(c.cfg.Out, s)
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
	show := func(ev client.Event) error {
		for _, l := range r.Lines(ev) {
			c.println(l)
		}
		c.track(ctx, ev)
		select {
		case c.activity <- struct{}{}:
		default:
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
	_ = first.Close() // read to its end or failing: nothing more to lose
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
	case "/approve", "/reject", "/answer":
		c.decide(ctx, cmd[1:], arg)
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

// decide sends a decision typed in the chat: /approve ID [input],
// /reject ID reason, /answer ID answer.
func (c *chat) decide(ctx context.Context, verb, arg string) {
	id, rest, _ := strings.Cut(arg, " ")
	rest = strings.TrimSpace(rest)
	if id == "" {
		c.println("! /" + verb + " needs the approval's id: /" + verb + " ap-…")
		return
	}
	req := client.DecisionRequest{Decision: verb}
	switch verb {
	case "reject":
		req.Reason = rest
	case "answer":
		req.Answer = rest
	default:
		if rest != "" {
			req.Input = json.RawMessage(rest)
		}
	}
	a, err := c.cfg.Client.Decide(ctx, c.cfg.Session, id, req)
	if err != nil {
		c.println("! /" + verb + " " + id + ": " + err.Error())
		return
	}
	c.println("» " + id + " " + a.State)
}

// input sends a typed line. In line mode (input piped in) nothing echoes
// what was read, so the chat says what it sends, as its history shows a
// person's line, before it sends it (so it comes before all it causes); a
// terminal's line editor has shown it already.
func (c *chat) input(ctx context.Context, text string) {
	if c.term == nil {
		c.println("you: " + text)
	}
	c.sending.Lock()
	acc, err := c.cfg.Client.InputAgent(ctx, c.cfg.Session, text, c.cfg.Agent)
	if err == nil {
		c.mine.Store(acc.ID, text)
		c.typed.Store(acc.ID, text)
	}
	c.sending.Unlock()
	if err != nil {
		c.println("! " + err.Error())
		return
	}
	c.sent = true
}

// waitSent waits until no line is being sent, so that every line the
// stream can name is in mine and typed.
func (c *chat) waitSent() {
	c.sending.RLock()
	defer c.sending.RUnlock()
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

// settlePoll is how often line mode asks whether the session has settled
// when no event says something happened.
const settlePoll = time.Second

// settle waits, in line mode after the input ended, until the session has
// done all the input set going: no run, no running job, no event waiting
// for it (a job's exit starts another run, which reports), and the last
// run's end shown. A Ground Stop holding the session ends the
// wait at once: nothing will run. It reports whether the stream ended.
func (c *chat) settle(ctx context.Context, streamDone <-chan error) (streamOver bool) {
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	for {
		d, err := c.cfg.Client.SessionDetail(ctx, c.cfg.Session)
		switch {
		case err != nil && ctx.Err() != nil:
			return false
		case isNotFound(err):
			// No record yet: the runner has not taken the input.
		case err != nil:
			c.println("! cannot tell whether the session is done: " + err.Error())
			return false
		case len(d.GroundStop) > 0:
			c.println("! Ground Stop holds the session: nothing runs until it is lifted")
			return false
		case c.settled(d):
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case err := <-streamDone:
			// The input was sent and what came of it shown: a stream
			// that ends (the dev stopped) leaves nothing to wait for,
			// and the chat ends as it would have.
			_ = err
			return true
		case <-c.activity:
		case <-tick.C:
		}
	}
}

// settled reports a session with nothing under way or waiting, whose
// last run's end the chat has shown.
func (c *chat) settled(d client.SessionDetail) bool {
	if d.State == "running" || d.PendingEvents > 0 {
		return false
	}
	owed := false
	c.wakes.Range(func(any, any) bool { owed = true; return false })
	if owed {
		return false
	}
	if last := client.DecodeSession(d.SessionInfo).Run; last != "" {
		if _, shown := c.endedRuns.Load(last); !shown {
			return false
		}
	}
	for _, j := range d.Jobs {
		if j.Status == "running" {
			return false
		}
	}
	return true
}

// track keeps what line mode's wait and the delivery notes need from ev:
// runs that ended, job events not yet taken by a run, and lines of this
// chat that a busy session handed to its model.
func (c *chat) track(ctx context.Context, ev client.Event) {
	switch ev.Type {
	case events.TypeRunEnded:
		var e events.RunEnded
		if json.Unmarshal(ev.Data, &e) == nil {
			c.endedRuns.Store(e.Run, true)
		}
	case events.TypeRunStarted:
		var s events.RunStarted
		if json.Unmarshal(ev.Data, &s) == nil {
			c.fromElsewhere(ctx, s.Events)
			c.taken(s.Events)
		}
	case events.TypeRunDelivered:
		var d events.RunDelivered
		if json.Unmarshal(ev.Data, &d) != nil {
			return
		}
		c.waitSent()
		for _, id := range d.Events {
			if text, ok := c.typed.Load(id); ok {
				c.println("» delivered to the running model: " + clip(text.(string), 120))
			}
		}
		c.fromElsewhere(ctx, d.Events)
		c.taken(d.Events)
	case events.TypeHeadline:
		var h events.HeadlineNote
		if json.Unmarshal(ev.Data, &h) == nil && h.Event != "" &&
			(h.About == events.TypeJobExited || h.About == events.TypeJobOverdue) {
			if _, took := c.tookIDs.Load(h.Event); !took {
				c.wakes.Store(h.Event, true)
			}
		}
	}
}

// taken notes events a run took: a run start's or a delivery's.
func (c *chat) taken(ids []string) {
	for _, id := range ids {
		c.tookIDs.Store(id, true)
		c.wakes.Delete(id)
		c.typed.Delete(id)
	}
}
