package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"jetway/pkg/auth"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/llmtest"
)

// GroupFelt is what a person feels: an input POSTed over HTTP to a real
// `jetway dev` process by a client process of its own, until the first
// streamed text of the answer on the session's SSE stream, beside the
// model's own time to first token from the same fake.
const GroupFelt = "felt"

// Names of the felt-latency figures: the whole, what jetway adds to the
// model, and the stages on the way.
const (
	FigFeltP50        = "felt: input POST → first text on SSE p50"
	FigFeltP99        = "felt: input POST → first text on SSE p99"
	FigFeltAdded      = "felt: added to the model's first token, p99"
	FigFeltPostedP50  = "felt: input POST → its 202 answer p50"
	FigFeltPostedP99  = "felt: input POST → its 202 answer p99"
	FigFeltStartedP50 = "felt: input POST → run.started on SSE p50"
	FigFeltStartedP99 = "felt: input POST → run.started on SSE p99"
)

// feltGoal is what jetway may add to the model's time to first token.
const (
	feltGoal   = "≤ 5 ms added at p99"
	feltGoalMS = 5.0
)

// feltSessions is how many sessions the probes rotate over, each with a
// terminal (an SSE stream) open for the whole figure, as a person's is.
// Each session is a tenant's: the dispatcher limits each tenant to 20
// requests a second (burst 40), a person's pace, and the probes go back
// to back, as every latency figure's do, so that the figure is jetway's
// work and not the machine waking from idle; spread over 20 tenants each
// sees one input in 20.
const feltSessions = 20

// errNoClient is the reason the felt figures give when the bench has no
// way to start its HTTP client as a process of its own.
var errNoClient = errors.New("no command to start the HTTP client as a separate process (Config.ClientCommand)")

func init() {
	AllGroups = append(AllGroups, GroupFelt)
	measures[GroupFelt] = (*env).measureFelt
}

// measureFelt starts the fake model in this process, a `jetway dev`
// process pointed at it, and a client process that holds one SSE stream
// per session; then it has the client time each input from the POST to
// the first text of its answer on the stream, interleaved with a direct
// streaming call from the same client to the same fake, timed to its
// first text.
func (e *env) measureFelt(ctx context.Context) {
	skipAll := func(err error) {
		e.skip(FigFeltPostedP50, "ms", "-", err)
		e.skip(FigFeltPostedP99, "ms", "-", err)
		e.skip(FigFeltStartedP50, "ms", "-", err)
		e.skip(FigFeltStartedP99, "ms", "-", err)
		e.skip(FigFeltP50, "ms", "-", err)
		e.skip(FigFeltP99, "ms", "-", err)
		e.skip(FigFeltAdded, "ms", feltGoal, err)
	}
	switch {
	case e.cfg.JetwayBinary == "":
		skipAll(errNoBinary)
		return
	case len(e.cfg.ClientCommand) == 0:
		skipAll(errNoClient)
		return
	case !e.base.measured:
		skipAll(errors.New("no raw JetStream baseline in this run"))
		return
	}
	front, err := newModelFront(e.cfg.ModelLatency)
	if err != nil {
		skipAll(err)
		return
	}
	defer front.close()
	front.fake.SetRouter(feltRoute(e.cfg.ModelLatency))

	setup := feltSetup{Model: front.url(), Sessions: map[string]string{}, Patience: e.patience()}
	var tokens auth.File
	for i := range feltSessions {
		tok, err := auth.NewToken()
		if err != nil {
			skipAll(err)
			return
		}
		tokens.Tokens = append(tokens.Tokens, auth.Grant{Token: tok, Tenant: fmt.Sprintf("felt%02d", i)})
		setup.Sessions[sessionName(i)] = tok
	}
	dir, err := os.MkdirTemp(e.dir, "felt-")
	if err != nil {
		skipAll(fmt.Errorf("felt: work dir: %w", err))
		return
	}
	// Scratch space in the bench's directory, which goes as a whole.
	defer func() { _ = os.RemoveAll(dir) }()
	e.progress("felt: starting a `jetway dev` process")
	dev, err := startDev(ctx, e.cfg.JetwayBinary, dir, front.url(), tokens)
	if err != nil {
		skipAll(err)
		return
	}
	defer dev.stop()
	setup.Base = dev.url
	e.progress("felt: starting the client process, %d SSE streams", feltSessions)
	client, err := startFeltClient(ctx, e.cfg.ClientCommand, setup, e.patience())
	if err != nil {
		skipAll(errors.Join(err, dev.gone()))
		return
	}
	defer client.stop()
	st, err := feltProbes(ctx, e, client, front)
	if err != nil {
		skipAll(errors.Join(err, dev.gone()))
		return
	}
	felt, ttft := st.text, st.ttft
	added := felt.pct(99) - ttft.pct(99)
	posted := figure(FigFeltPostedP50, "ms", st.posted.pct(50)).vs("raw sync publish p50", e.base.syncP50).info("-").
		note("%d inputs POSTed by a client process to a `jetway dev` process, round robin over %d sessions (each a tenant's), one at a time; from the POST to its 202 answer read whole (the dispatcher's checks and the event's publish to JETWAY_EVENTS, acknowledged)", len(felt), feltSessions)
	if st.limited > 0 {
		posted.Note += fmt.Sprintf("; %d POSTs were refused for a tenant's rate and sent again when the dispatcher said, each input timed from the POST accepted", st.limited)
	}
	e.add(posted)
	e.add(figure(FigFeltPostedP99, "ms", st.posted.pct(99)).vs("raw sync publish p99", e.base.syncP99).info("-"))
	e.add(figure(FigFeltStartedP50, "ms", st.started.pct(50)).vs("raw sync publish p50", e.base.syncP50).info("-").
		note("from the POST to the line of the session's SSE stream (open throughout, ?from=new) announcing the run that carries the input's event: the runner's delivery of the event, the run's claim and first records, run.started published to JETWAY_OUT and relayed by the dispatcher; the model request reached the fake (in the bench process) at p50 %s / p99 %s ms",
			num(st.request.pct(50)), num(st.request.pct(99))))
	e.add(figure(FigFeltStartedP99, "ms", st.started.pct(99)).vs("raw sync publish p99", e.base.syncP99).info("-"))
	e.add(figure(FigFeltP50, "ms", felt.pct(50)).vs("model first token p50", ttft.pct(50)).info("-").
		note("from the POST to the first text of the answer on the session's SSE stream, as the client process reads it; the baseline is a direct streaming SDK call from the same client process to the same fake model, timed to its first text, made right before each input"))
	e.add(figure(FigFeltP99, "ms", felt.pct(99)).vs("model first token p99", ttft.pct(99)).info("-"))
	e.add(figure(FigFeltAdded, "ms", added).goal(feltGoal, added <= feltGoalMS).
		note("felt p99 %s ms − the model's own first token p99 %s ms; from the POST (p50 / p99): its 202 answer %s / %s ms, run.started on the stream %s / %s ms, the model request at the fake %s / %s ms, the first text on the stream %s / %s ms",
			num(felt.pct(99)), num(ttft.pct(99)), num(st.posted.pct(50)), num(st.posted.pct(99)), num(st.started.pct(50)), num(st.started.pct(99)),
			num(st.request.pct(50)), num(st.request.pct(99)), num(felt.pct(50)), num(felt.pct(99))))
}

// feltRoute answers each run's model request with one text delta that
// carries the probe's token (the last one in the request: its newest
// input), so the client knows the text on the stream for its own; a
// request without one (the direct calls) gets the fallback.
func feltRoute(latency time.Duration) func(body []byte) (llmtest.Reply, bool) {
	open := []byte("[felt-")
	return func(body []byte) (llmtest.Reply, bool) {
		i := bytes.LastIndex(body, open)
		if i < 0 {
			return llmtest.Reply{}, false
		}
		j := bytes.IndexByte(body[i:], ']')
		if j < 0 {
			return llmtest.Reply{}, false
		}
		return llmtest.Reply{Text: "answer " + string(body[i:i+j+1]), Chunks: 1, Latency: latency}, true
	}
}

// feltStages are the probes' stages, each from the POST, and the direct
// calls' first token.
type feltStages struct {
	posted, started, request, text samples
	ttft                           samples
	// limited counts POSTs refused for a tenant's rate and sent again.
	limited int
}

// feltProbes warms each session, then has the client time Sizes.Probes
// inputs, each right after a direct model call.
func feltProbes(ctx context.Context, e *env, c *feltClient, front *modelFront) (st feltStages, err error) {
	e.progress("felt: warming %d sessions", feltSessions)
	for i := range feltSessions {
		if _, err := c.probe(ctx, front, sessionName(i), fmt.Sprintf("w%d", i)); err != nil {
			return st, err
		}
		if _, err := c.call(ctx, feltCommand{Op: "direct"}); err != nil {
			return st, err
		}
	}
	e.progress("felt: %d inputs over HTTP from the client process, one at a time, each right after a direct model call", e.sizes.Probes)
	for k := range e.sizes.Probes {
		d, err := c.call(ctx, feltCommand{Op: "direct"})
		if err != nil {
			return st, err
		}
		p, err := c.probe(ctx, front, sessionName(k%feltSessions), fmt.Sprint(k))
		if err != nil {
			return st, err
		}
		st.ttft = append(st.ttft, d.TTFT)
		st.posted = append(st.posted, p.Posted)
		st.started = append(st.started, p.Started)
		st.request = append(st.request, p.request)
		st.text = append(st.text, p.Text)
		st.limited += p.Limited
	}
	return st, nil
}

// feltClient is the client process (FeltClient) and its pipes.
type feltClient struct {
	cmd      *exec.Cmd
	in       io.WriteCloser
	answers  chan []byte
	quit     chan struct{} // closed by stop: no one reads answers any more
	stderr   lockedBuffer
	exited   chan struct{}
	patience time.Duration
}

// startFeltClient starts command as the felt client in a process group of
// its own, gives it setup and waits until it has opened its streams.
func startFeltClient(ctx context.Context, command []string, setup feltSetup, patience time.Duration) (*feltClient, error) {
	c := &feltClient{answers: make(chan []byte), quit: make(chan struct{}), exited: make(chan struct{}), patience: patience}
	c.cmd = exec.Command(command[0], command[1:]...)
	c.cmd.Stderr = &c.stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := c.cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("felt client: %w", err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("felt client: %w", err)
	}
	c.in = in
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the felt client %q: %w", command, err)
	}
	go func() {
		defer close(c.exited)
		rd := bufio.NewReader(out)
		for {
			line, err := rd.ReadBytes('\n')
			if err != nil {
				break
			}
			select {
			case c.answers <- line:
			case <-c.quit:
				// An answer come too late: read on to the end, so the
				// process can exit and be waited for.
			}
		}
		_ = c.cmd.Wait() // what it said on the way out is in stderr
	}()
	b, err := json.Marshal(setup)
	if err != nil {
		c.stop()
		return nil, err
	}
	if _, err := c.answer(ctx, append(b, '\n')); err != nil {
		c.stop()
		return nil, fmt.Errorf("felt client: open the streams: %w", err)
	}
	return c, nil
}

// call sends one command and returns its answer.
func (c *feltClient) call(ctx context.Context, cmd feltCommand) (feltAnswer, error) {
	b, err := json.Marshal(cmd)
	if err != nil {
		return feltAnswer{}, err
	}
	return c.answer(ctx, append(b, '\n'))
}

// answer writes line to the client and reads its answer, waiting longer
// than the client waits for anything itself.
func (c *feltClient) answer(ctx context.Context, line []byte) (feltAnswer, error) {
	if _, err := c.in.Write(line); err != nil {
		return feltAnswer{}, fmt.Errorf("felt client: write: %w (%s)", err, oneLine(c.stderr.String()))
	}
	t := time.NewTimer(2 * c.patience)
	defer t.Stop()
	select {
	case b := <-c.answers:
		var a feltAnswer
		if err := json.Unmarshal(b, &a); err != nil {
			return feltAnswer{}, fmt.Errorf("felt client: answer %q: %w", b, err)
		}
		if a.Error != "" {
			return feltAnswer{}, fmt.Errorf("felt client: %s", a.Error)
		}
		return a, nil
	case <-c.exited:
		return feltAnswer{}, fmt.Errorf("felt client exited: %s", oneLine(c.stderr.String()))
	case <-t.C:
		return feltAnswer{}, fmt.Errorf("felt client: no answer within %s", 2*c.patience)
	case <-ctx.Done():
		return feltAnswer{}, ctx.Err()
	}
}

// feltProbe is one probe's answer, with the moment its model request
// reached the fake, from the POST.
type feltProbe struct {
	feltAnswer
	request time.Duration
}

// probe has the client POST one input to session and time it; k names
// its token.
func (c *feltClient) probe(ctx context.Context, front *modelFront, session, k string) (feltProbe, error) {
	tok := "[felt-" + k + "]"
	arrived := front.expect(tok)
	a, err := c.call(ctx, feltCommand{Op: "probe", Session: session, Text: "question " + tok, Token: tok})
	if err != nil {
		front.forget(tok)
		return feltProbe{}, err
	}
	select {
	case at := <-arrived:
		// Two processes' readings of the wall clock: the same clock.
		return feltProbe{feltAnswer: a, request: time.Duration(at.UnixNano() - a.T0)}, nil
	default:
		// The text came back, so the request came: it was answered by
		// the stream before the observer's note was read.
		front.forget(tok)
		return feltProbe{}, fmt.Errorf("input %s: its model request was not seen at the fake", tok)
	}
}

// stop closes the client's input, which ends it, and its process group.
func (c *feltClient) stop() {
	close(c.quit)
	_ = c.in.Close() // the client ends on it; a failure leaves the kill
	stopGroup(c.cmd, c.exited, 5*time.Second)
}

// firstToken makes a streaming call straight to the fake model and times
// it to its first text delta, then reads the rest of the answer.
func firstToken(ctx context.Context, client sdk.Client) (time.Duration, error) {
	t0 := time.Now()
	stream := client.Messages.NewStreaming(ctx, sdk.MessageNewParams{
		Model: "claude-bench", MaxTokens: anthropic.DefaultMaxTokens,
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("a question"))},
	})
	// Read to its end; closing only gives the connection back.
	defer func() { _ = stream.Close() }()
	var d time.Duration
	for stream.Next() {
		if ev := stream.Current(); d == 0 && ev.Type == "content_block_delta" && ev.Delta.Text != "" {
			d = time.Since(t0)
		}
	}
	if err := stream.Err(); err != nil {
		return 0, fmt.Errorf("direct model call: %w", err)
	}
	if d == 0 {
		return 0, errors.New("direct model call: no text")
	}
	return d, nil
}
