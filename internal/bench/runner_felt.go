package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/events"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/llmtest"
	"jetway/services/dispatcher"
)

// GroupFelt is what a person feels: an input POSTed to the dispatcher over
// HTTP until the first streamed text of the answer on the session's SSE
// stream, beside the model's own time to first token from the same fake.
const GroupFelt = "felt"

// Names of the felt-latency figures.
const (
	FigFeltP50   = "felt: input POST → first text on SSE p50"
	FigFeltP99   = "felt: input POST → first text on SSE p99"
	FigFeltAdded = "felt: added to the model's first token, p99"
)

// feltGoal is what jetway may add to the model's time to first token.
const (
	feltGoal   = "≤ 5 ms added at p99"
	feltGoalMS = 5.0
)

// feltSessions is how many sessions the probes rotate over, each with a
// terminal (an SSE stream) open for the whole figure, as a person's is.
const feltSessions = 20

func init() {
	AllGroups = append(AllGroups, GroupFelt)
	measures[GroupFelt] = (*env).measureFelt
}

// measureFelt starts a runner and a dispatcher in process, opens one SSE
// stream per session, and times each input from the POST to the first text
// of its answer on the stream, interleaved with a direct streaming call to
// the same fake model timed to its first text.
func (e *env) measureFelt(ctx context.Context) {
	rb, done, err := e.newRunnerBench(ctx)
	if err != nil {
		e.skip(FigFeltAdded, "ms", feltGoal, err)
		return
	}
	defer done()
	run := uid()
	stop, err := rb.startRunner(ctx, "bench-felt-"+run, rb.model)
	if err != nil {
		e.skip(FigFeltAdded, "ms", feltGoal, err)
		return
	}
	defer stop()
	tenant := "felt-" + run
	front, err := startFront(ctx, e, tenant)
	if err != nil {
		e.skip(FigFeltAdded, "ms", feltGoal, err)
		return
	}
	defer front.close()
	st, ttft, err := rb.feltProbes(ctx, front, tenant)
	if err != nil {
		e.skip(FigFeltAdded, "ms", feltGoal, err)
		return
	}
	felt := st.text
	added := felt.pct(99) - ttft.pct(99)
	e.add(figure(FigFeltP50, "ms", felt.pct(50)).vs("model first token p50", ttft.pct(50)).info("-").
		note("%d inputs POSTed to an in-process dispatcher over HTTP, round robin over %d sessions held in memory, each timed to the first text of its answer on the session's SSE stream (open throughout); the baseline is a direct streaming SDK call to the same fake model, timed to its first text, interleaved with the inputs", len(felt), feltSessions))
	e.add(figure(FigFeltP99, "ms", felt.pct(99)).vs("model first token p99", ttft.pct(99)).info("-"))
	e.add(figure(FigFeltAdded, "ms", added).goal(feltGoal, added <= feltGoalMS).
		note("felt p99 %.2f ms − the model's own first token p99 %.2f ms; from the POST (p50 / p99): its 202 answer %.2f / %.2f ms, the model request at the fake %.2f / %.2f ms, the first text on the stream %.2f / %.2f ms",
			felt.pct(99), ttft.pct(99), st.posted.pct(50), st.posted.pct(99), st.request.pct(50), st.request.pct(99), felt.pct(50), felt.pct(99)))
}

// feltStages are the probes' stages, each from the POST.
type feltStages struct {
	posted, request, text samples
}

// feltProbes warms each session, then times Sizes.Probes inputs and as
// many direct model calls.
func (rb *runnerBench) feltProbes(ctx context.Context, f *feltFront, tenant string) (st feltStages, ttft samples, err error) {
	e := rb.e
	for i := range feltSessions {
		if err := f.follow(ctx, sessionName(i)); err != nil {
			return st, nil, err
		}
	}
	e.progress("felt: warming %d sessions", feltSessions)
	for i := range feltSessions {
		if _, err := rb.feltProbe(ctx, f, tenant, sessionName(i), fmt.Sprintf("warm%d", i), 1); err != nil {
			return st, nil, err
		}
	}
	e.progress("felt: %d inputs over HTTP, one at a time, each beside a direct model call", e.sizes.Probes)
	client := sdk.NewClient(option.WithoutEnvironmentDefaults(), option.WithAPIKey("bench"), option.WithMaxRetries(0), option.WithBaseURL(rb.front.url()))
	for k := range e.sizes.Probes {
		i := k % feltSessions
		rb.front.fake.Enqueue(llmtest.Reply{Text: "direct answer", Chunks: 1})
		d, err := firstToken(ctx, client)
		if err != nil {
			return st, nil, err
		}
		ttft = append(ttft, d)
		ft, err := rb.feltProbe(ctx, f, tenant, sessionName(i), fmt.Sprint(k), 2+k/feltSessions)
		if err != nil {
			return st, nil, err
		}
		st.posted = append(st.posted, ft.posted)
		st.request = append(st.request, ft.request)
		st.text = append(st.text, ft.text)
	}
	return st, ttft, nil
}

// feltTimes are one probe's stages, from the POST: its answer, the model
// request arriving at the fake, the first text on the stream.
type feltTimes struct {
	posted, request, text time.Duration
}

// feltProbe POSTs one input to session and times it to the first text of
// its answer on the session's stream, then waits until the session is idle
// after runs runs.
func (rb *runnerBench) feltProbe(ctx context.Context, f *feltFront, tenant, session, k string, runs int) (feltTimes, error) {
	tok := fmt.Sprintf("[felt-%s-%s]", tenant, k)
	rb.front.fake.Enqueue(llmtest.Reply{Text: "answer " + tok, Chunks: 1})
	request := rb.front.expect(tok)
	text := f.expect(tok)
	t0 := time.Now()
	if err := f.input(ctx, session, "question "+tok); err != nil {
		f.forget(tok)
		rb.front.forget(tok)
		return feltTimes{}, err
	}
	ft := feltTimes{posted: time.Since(t0)}
	for _, st := range []struct {
		ch <-chan time.Time
		d  *time.Duration
	}{{request, &ft.request}, {text, &ft.text}} {
		select {
		case t1 := <-st.ch:
			*st.d = t1.Sub(t0)
		case <-time.After(rb.e.patience()):
			f.forget(tok)
			rb.front.forget(tok)
			return feltTimes{}, fmt.Errorf("input %s to %s: no answer on its stream within %s", k, session, rb.e.patience())
		case <-ctx.Done():
			return feltTimes{}, ctx.Err()
		}
	}
	wctx, cancel := deadline(ctx, rb.e.patience())
	defer cancel()
	return ft, rb.waitIdle(wctx, tenant, session, runs)
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

// feltFront is an in-process dispatcher serving HTTP on loopback, with a
// client that holds one SSE stream per session.
type feltFront struct {
	base, token string
	client      *http.Client
	cancel      context.CancelFunc
	served      chan struct{}

	mu      sync.Mutex
	waiters map[string]chan time.Time
	streams []*http.Response
}

// startFront starts a dispatcher for tenant on a loopback port.
func startFront(ctx context.Context, e *env, tenant string) (*feltFront, error) {
	token, err := auth.NewToken()
	if err != nil {
		return nil, err
	}
	store, err := auth.New(auth.Grant{Token: token, Tenant: tenant})
	if err != nil {
		return nil, err
	}
	nc, err := bus.Connect(ctx, bus.ConnConfig{URLs: []string{e.url}, Name: "jetway-bench-dispatcher"})
	if err != nil {
		return nil, fmt.Errorf("dispatcher: connect: %w", err)
	}
	d, err := dispatcher.New(dispatcher.Config{Conn: nc, Auth: store, RatePerSecond: -1})
	if err != nil {
		nc.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("dispatcher: listen: %w", err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &feltFront{
		base: "http://" + ln.Addr().String(), token: token,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}},
		cancel: cancel, served: make(chan struct{}), waiters: map[string]chan time.Time{},
	}
	go func() {
		defer close(f.served)
		defer nc.Close()
		_ = d.Serve(sctx, ln)
	}()
	return f, nil
}

func (f *feltFront) close() {
	f.mu.Lock()
	for _, r := range f.streams {
		// Ends a stream the bench no longer reads; nothing to lose.
		_ = r.Body.Close()
	}
	f.mu.Unlock()
	f.cancel()
	<-f.served
}

// follow opens session's SSE stream from its next message on and reads it
// until the front closes.
func (f *feltFront) follow(ctx context.Context, session string) error {
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, f.base+"/v1/sessions/"+session+"/stream?from=new", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("stream %s: %w", session, err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close() // the status is the error to report
		return fmt.Errorf("stream %s: %s", session, resp.Status)
	}
	f.mu.Lock()
	f.streams = append(f.streams, resp)
	f.mu.Unlock()
	go f.read(resp)
	return nil
}

// read notes the arrival of each streamed text that carries a token some
// probe waits for.
func (f *feltFront) read(resp *http.Response) {
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	text := false
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte("event: ")):
			text = string(line[len("event: "):]) == events.TypeRunText
		case text && bytes.HasPrefix(line, []byte("data: ")):
			f.arrived(time.Now(), line)
		}
	}
}

func (f *feltFront) arrived(at time.Time, data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for tok, ch := range f.waiters {
		if bytes.Contains(data, []byte(tok)) {
			ch <- at
			delete(f.waiters, tok)
		}
	}
}

// expect returns a channel that receives the arrival time of the first
// streamed text carrying token. Register before causing it.
func (f *feltFront) expect(token string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	f.mu.Lock()
	f.waiters[token] = ch
	f.mu.Unlock()
	return ch
}

func (f *feltFront) forget(token string) {
	f.mu.Lock()
	delete(f.waiters, token)
	f.mu.Unlock()
}

// input POSTs an input to session, as a person's terminal does.
func (f *feltFront) input(ctx context.Context, session, text string) error {
	body := fmt.Sprintf(`{"text":%q}`, text)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.base+"/v1/sessions/"+session+"/input", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return fmt.Errorf("input to %s: %w", session, err)
	}
	defer func() { _ = resp.Body.Close() }() // the status is all it says
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("input to %s: %s", session, resp.Status)
	}
	return nil
}
