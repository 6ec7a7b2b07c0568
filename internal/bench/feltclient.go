package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"jetway/pkg/events"
)

// FeltClientArg is the hidden argument that makes jetway-bench the felt
// group's terminal (FeltClient) instead of the bench.
const FeltClientArg = "felt-client"

// The felt client speaks JSON lines: the bench writes a feltSetup, then
// one feltCommand per line; the client answers the setup with one line
// once every stream is open, and each command with one feltAnswer.

// feltSetup is what the client reaches: the dispatcher's HTTP API, one
// token per session (each session has a tenant of its own), and the fake
// model for the direct calls.
type feltSetup struct {
	Base     string            `json:"base"`
	Model    string            `json:"model"`
	Sessions map[string]string `json:"sessions"` // session → bearer token
	Patience time.Duration     `json:"patience"`
}

// feltCommand is one thing to time: op "direct" (a streaming call
// straight to the fake model, to its first text) or "probe" (Text POSTed
// as an input to Session, to the first streamed text carrying Token and
// then the run's end).
type feltCommand struct {
	Op      string `json:"op"`
	Session string `json:"session,omitempty"`
	Text    string `json:"text,omitempty"`
	Token   string `json:"token,omitempty"`
}

// feltAnswer is one command's timings, each from the moment before the
// request was sent: for a probe the POST's 202, the run.started that names
// the input's event on the stream, its first text and its run.ended; for a
// direct call its first text. T0 is that moment on the wall clock, for the
// bench to place the model request's arrival at its fake.
type feltAnswer struct {
	Error   string        `json:"error,omitempty"`
	T0      int64         `json:"t0_unix_ns,omitempty"`
	Posted  time.Duration `json:"posted,omitempty"`
	Started time.Duration `json:"started,omitempty"`
	Text    time.Duration `json:"text,omitempty"`
	Ended   time.Duration `json:"ended,omitempty"`
	TTFT    time.Duration `json:"ttft,omitempty"`
	// Limited counts the POSTs the dispatcher refused for the tenant's
	// rate before the one timed.
	Limited int `json:"limited,omitempty"`
}

// FeltClient is the felt group's terminal, run as a process of its own
// (jetway-bench felt-client) so that what it costs to send an input and
// read a stream is not the bench's or jetway's process's: it opens one
// SSE stream per session, as `jetway chat` does, then answers the bench's
// commands from in on out until in ends.
func FeltClient(ctx context.Context, in io.Reader, out io.Writer) error {
	rd := bufio.NewReader(in)
	enc := json.NewEncoder(out)
	line, err := rd.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("felt client: read setup: %w", err)
	}
	var setup feltSetup
	if err := json.Unmarshal(line, &setup); err != nil {
		return fmt.Errorf("felt client: setup: %w", err)
	}
	c := newFeltTerminal(setup)
	defer c.close()
	for session := range setup.Sessions {
		if err := c.follow(ctx, session); err != nil {
			return errors.Join(err, enc.Encode(feltAnswer{Error: err.Error()}))
		}
	}
	if err := enc.Encode(feltAnswer{}); err != nil {
		return fmt.Errorf("felt client: answer: %w", err)
	}
	for {
		line, err := rd.ReadBytes('\n')
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("felt client: read command: %w", err)
		}
		var cmd feltCommand
		var ans feltAnswer
		if err := json.Unmarshal(line, &cmd); err != nil {
			ans.Error = fmt.Sprintf("command %q: %v", line, err)
		} else if ans, err = c.do(ctx, cmd); err != nil {
			ans = feltAnswer{Error: err.Error()}
		}
		if err := enc.Encode(ans); err != nil {
			return fmt.Errorf("felt client: answer: %w", err)
		}
	}
}

// feltTerminal holds the client's connections: one keep-alive connection
// for the POSTs, one SSE stream per session.
type feltTerminal struct {
	setup  feltSetup
	posts  *http.Client
	model  sdk.Client
	mu     sync.Mutex
	feeds  map[string]*sseFeed
	bodies []io.Closer
}

func newFeltTerminal(setup feltSetup) *feltTerminal {
	return &feltTerminal{
		setup: setup,
		posts: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}},
		model: sdk.NewClient(option.WithoutEnvironmentDefaults(), option.WithAPIKey("bench"), option.WithMaxRetries(0), option.WithBaseURL(setup.Model)),
		feeds: map[string]*sseFeed{},
	}
}

func (c *feltTerminal) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.bodies {
		_ = b.Close() // ends a stream nobody reads any more
	}
}

func (c *feltTerminal) do(ctx context.Context, cmd feltCommand) (feltAnswer, error) {
	switch cmd.Op {
	case "direct":
		d, err := firstToken(ctx, c.model)
		return feltAnswer{TTFT: d}, err
	case "probe":
		return c.probe(ctx, cmd)
	}
	return feltAnswer{}, fmt.Errorf("unknown command %q", cmd.Op)
}

// sseEvent is one event read from a stream, stamped as its data line came.
type sseEvent struct {
	at   time.Time
	typ  string
	data []byte
}

// sseFeed is what one session's stream has brought since the probe began.
type sseFeed struct {
	mu      sync.Mutex
	events  []sseEvent
	ended   error
	changed chan struct{}
}

func (f *sseFeed) add(ev sseEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev)
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *sseFeed) end(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended = err
	close(f.changed)
	f.changed = make(chan struct{})
}

// reset forgets what came before a probe: the previous run has ended.
func (f *sseFeed) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = nil
}

// await returns the first event from position from on of type typ whose
// data contains want, and its position.
func (f *sseFeed) await(ctx context.Context, from int, typ string, want []byte) (sseEvent, int, error) {
	for {
		f.mu.Lock()
		for i := from; i < len(f.events); i++ {
			if ev := f.events[i]; ev.typ == typ && bytes.Contains(ev.data, want) {
				f.mu.Unlock()
				return ev, i, nil
			}
		}
		ch, ended := f.changed, f.ended
		f.mu.Unlock()
		if ended != nil {
			return sseEvent{}, 0, fmt.Errorf("stream ended: %w", ended)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return sseEvent{}, 0, fmt.Errorf("no %s carrying %s: %w", typ, want, ctx.Err())
		}
	}
}

// follow opens session's stream from its next message on, and reads it
// into the session's feed until the stream ends.
func (c *feltTerminal) follow(ctx context.Context, session string) error {
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, c.setup.Base+"/v1/sessions/"+session+"/stream?from=new", nil)
	if err != nil {
		return fmt.Errorf("stream %s: %w", session, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.setup.Sessions[session])
	// Each stream holds a connection of its own, as each terminal's does.
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		return fmt.Errorf("stream %s: %w", session, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_ = resp.Body.Close() // the status is the error to report
		return fmt.Errorf("stream %s: %s %s", session, resp.Status, bytes.TrimSpace(b))
	}
	f := &sseFeed{changed: make(chan struct{})}
	c.mu.Lock()
	c.feeds[session] = f
	c.bodies = append(c.bodies, resp.Body)
	c.mu.Unlock()
	go readSSE(resp.Body, f)
	return nil
}

// readSSE parses a stream into f: each event stamped when its data line
// arrives, which is when a terminal could show it.
func readSSE(body io.Reader, f *sseFeed) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	typ := ""
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte("event: ")):
			typ = string(line[len("event: "):])
		case bytes.HasPrefix(line, []byte("data: ")):
			f.add(sseEvent{at: time.Now(), typ: typ, data: bytes.Clone(line[len("data: "):])})
		case len(line) == 0:
			typ = ""
		}
	}
	err := sc.Err()
	if err == nil {
		err = io.EOF
	}
	f.end(err)
}

// probe POSTs one input and times it on the session's stream: the run
// that starts for its event, that run's first text carrying the token,
// and its end, after which the session is idle for the next probe.
func (c *feltTerminal) probe(ctx context.Context, cmd feltCommand) (feltAnswer, error) {
	c.mu.Lock()
	f := c.feeds[cmd.Session]
	c.mu.Unlock()
	if f == nil {
		return feltAnswer{}, fmt.Errorf("no stream open for session %q", cmd.Session)
	}
	ctx, cancel := context.WithTimeout(ctx, c.setup.Patience)
	defer cancel()
	f.reset()
	var (
		ans    feltAnswer
		answer []byte
		t0     time.Time
	)
	for {
		var status int
		var retry time.Duration
		var err error
		t0 = time.Now()
		status, answer, retry, err = c.post(ctx, cmd)
		ans = feltAnswer{T0: t0.UnixNano(), Posted: time.Since(t0), Limited: ans.Limited}
		if err != nil {
			return feltAnswer{}, err
		}
		if status == http.StatusAccepted {
			break
		}
		if status != http.StatusTooManyRequests {
			return feltAnswer{}, fmt.Errorf("input to %s: %d %s", cmd.Session, status, bytes.TrimSpace(answer))
		}
		// Over the tenant's rate: the input was refused whole (nothing
		// stored), so it is sent again when the dispatcher says, and timed
		// from then.
		ans.Limited++
		select {
		case <-time.After(retry):
		case <-ctx.Done():
			return feltAnswer{}, fmt.Errorf("input to %s: rate limited, and the patience ran out: %w", cmd.Session, ctx.Err())
		}
	}
	var acc struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(answer, &acc); err != nil || acc.ID == "" {
		return feltAnswer{}, fmt.Errorf("input to %s: answer %s without an event id (%v)", cmd.Session, answer, err)
	}
	id, _ := json.Marshal(acc.ID)
	started, at, err := f.await(ctx, 0, events.TypeRunStarted, id)
	if err != nil {
		return feltAnswer{}, fmt.Errorf("input %s to %s: %w", acc.ID, cmd.Session, err)
	}
	var run struct {
		Run string `json:"run"`
	}
	if err := json.Unmarshal(started.data, &run); err != nil || run.Run == "" {
		return feltAnswer{}, fmt.Errorf("input %s to %s: run.started %s names no run (%v)", acc.ID, cmd.Session, started.data, err)
	}
	text, _, err := f.await(ctx, at, events.TypeRunText, []byte(cmd.Token))
	if err != nil {
		return feltAnswer{}, fmt.Errorf("input %s to %s: %w", acc.ID, cmd.Session, err)
	}
	runID, _ := json.Marshal(run.Run)
	ended, _, err := f.await(ctx, at, events.TypeRunEnded, runID)
	if err != nil {
		return feltAnswer{}, fmt.Errorf("input %s to %s: %w", acc.ID, cmd.Session, err)
	}
	ans.Started, ans.Text, ans.Ended = started.at.Sub(t0), text.at.Sub(t0), ended.at.Sub(t0)
	return ans, nil
}

// post sends one input and reads its answer whole, so the connection goes
// back for the next one; retry is what a 429's Retry-After asks for.
func (c *feltTerminal) post(ctx context.Context, cmd feltCommand) (status int, answer []byte, retry time.Duration, err error) {
	body, err := json.Marshal(map[string]string{"text": cmd.Text})
	if err != nil {
		return 0, nil, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.setup.Base+"/v1/sessions/"+cmd.Session+"/input", bytes.NewReader(body))
	if err != nil {
		return 0, nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.setup.Sessions[cmd.Session])
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.posts.Do(req)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("input to %s: %w", cmd.Session, err)
	}
	defer func() { _ = resp.Body.Close() }() // read whole below
	answer, err = io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("input to %s: read answer: %w", cmd.Session, err)
	}
	retry = time.Second
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		retry = time.Duration(s) * time.Second
	}
	return resp.StatusCode, answer, retry, nil
}
