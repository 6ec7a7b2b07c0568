package bench

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"jetway/pkg/events"
	"jetway/pkg/llm"
	"jetway/pkg/llm/anthropic"
	"jetway/pkg/llm/llmtest"
	"jetway/pkg/llm/providers"
)

// modelFront is the local fake model provider the runner figures talk to:
// llmtest's Anthropic server, watched as each request arrives for the bench
// tokens its body carries. "Run start" is that moment: the request received
// by the provider.
//
// The fake shares this process with the runner it measures, so it reads
// only the head of each request (llmtest.SetChecking(false)): decoding
// every 2000-message history in full, as a real provider does on its own
// machines, took a third of the process's CPU and most of its garbage, and
// the runner paid for both.
type modelFront struct {
	fake *llmtest.Anthropic

	mu      sync.Mutex
	waiters map[string]chan time.Time
	// scan, when set, is given every request body (under mu), for figures
	// that count thousands of tokens.
	scan func(at time.Time, body []byte)
	// calls counts the requests, so a figure per event can also be read
	// per model call.
	calls int
}

func newModelFront(latency time.Duration) (*modelFront, error) {
	fake := llmtest.StartAnthropic()
	fake.SetRecording(false)
	fake.SetChecking(false)
	fake.SetFallback(llmtest.Reply{Text: "noted", Latency: latency, Usage: llm.Usage{InputTokens: 20, OutputTokens: 2}})
	m := &modelFront{fake: fake, waiters: map[string]chan time.Time{}}
	fake.Observe(m.arrived)
	return m, nil
}

// arrived notes a request: the waiters whose token it carries, and the scan.
func (m *modelFront) arrived(at time.Time, body []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	for tok, ch := range m.waiters {
		if bytes.Contains(body, []byte(tok)) {
			ch <- at
			delete(m.waiters, tok)
		}
	}
	if m.scan != nil {
		m.scan(at, body)
	}
}

func (m *modelFront) close() { m.fake.Close() }

// callCount is how many requests the front has received.
func (m *modelFront) callCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

func (m *modelFront) url() string { return m.fake.URL() }

// expect returns a channel that receives the arrival time of the first
// request whose body contains token. Register before causing the request.
func (m *modelFront) expect(token string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	m.mu.Lock()
	m.waiters[token] = ch
	m.mu.Unlock()
	return ch
}

func (m *modelFront) forget(token string) {
	m.mu.Lock()
	delete(m.waiters, token)
	m.mu.Unlock()
}

func (m *modelFront) setScan(f func(at time.Time, body []byte)) {
	m.mu.Lock()
	m.scan = f
	m.mu.Unlock()
}

// provider is an Anthropic provider on the front, calling through the
// client a runner's providers use (providers.HTTPClient), which keeps its
// connections for the next calls.
func (m *modelFront) provider() (llm.Provider, error) {
	return anthropic.New(anthropic.Config{
		APIKey: "bench", BaseURL: m.url(), Model: "claude-bench",
		HTTPClient: providers.HTTPClient(),
	})
}

// tokenSet records which of a phase's numbered tokens reached the model.
type tokenSet struct {
	re   *regexp.Regexp
	seen map[string]bool
	last time.Time
	want int
	done chan struct{}
}

func newTokenSet(prefix string, want int) *tokenSet {
	return &tokenSet{re: regexp.MustCompile(regexp.QuoteMeta(prefix) + `[0-9]+\b`), seen: map[string]bool{}, want: want, done: make(chan struct{})}
}

// scan is a modelFront scan function (called under the front's lock).
// Only the part of the body after the last assistant turn can hold a token
// not seen before (a request repeats the whole history), so only that part
// is searched: the harness must not cost more than what it measures.
func (s *tokenSet) scan(at time.Time, body []byte) {
	if len(s.seen) >= s.want {
		return
	}
	if i := bytes.LastIndex(body, []byte(`"role":"assistant"`)); i >= 0 {
		body = body[i:]
	}
	for _, m := range s.re.FindAll(body, -1) {
		if !s.seen[string(m)] {
			s.seen[string(m)] = true
			s.last = at
		}
	}
	if len(s.seen) >= s.want {
		close(s.done)
	}
}

// runWatch counts io.jetway.run.ended per session of one tenant, from the
// runners' output subjects, on a connection of its own: run output is
// heavy (text deltas), and sharing the publisher's connection made it a
// slow consumer that dropped publish acks.
type runWatch struct {
	nc      *nats.Conn
	sub     *nats.Subscription
	mu      sync.Mutex
	started int
	ended   map[string]int
	changed chan struct{}
}

func watchRuns(url, tenant string) (*runWatch, error) {
	w := &runWatch{ended: map[string]int{}, changed: make(chan struct{})}
	prefix := "jetway.out." + tenant + "."
	nc, sub, err := listen(url, "jetway-bench-watch", prefix+"*", func(m *nats.Msg) {
		typ := m.Header.Get("ce-type")
		if typ != events.TypeRunEnded && typ != events.TypeRunStarted {
			return
		}
		session := strings.TrimPrefix(m.Subject, prefix)
		w.mu.Lock()
		if typ == events.TypeRunStarted {
			w.started++
		} else {
			w.ended[session]++
		}
		close(w.changed)
		w.changed = make(chan struct{})
		w.mu.Unlock()
	})
	if err != nil {
		return nil, fmt.Errorf("watch run output: %w", err)
	}
	w.nc, w.sub = nc, sub
	return w, nil
}

// listen connects a watcher of its own, named name, and subscribes fn to
// subject with no pending limit (a watcher that drops messages measures
// nothing); it returns once the server has the subscription.
func listen(url, name, subject string, fn nats.MsgHandler) (*nats.Conn, *nats.Subscription, error) {
	nc, err := nats.Connect(url, nats.Name(name))
	if err != nil {
		return nil, nil, err
	}
	sub, err := nc.Subscribe(subject, fn)
	if err == nil {
		err = sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, sub, nil
}

func (w *runWatch) stop() { w.nc.Close() }

// wait blocks until cond (called under the lock with the per-session counts)
// holds, or ctx ends.
func (w *runWatch) wait(ctx context.Context, cond func(ended map[string]int) bool) error {
	for {
		w.mu.Lock()
		ok := cond(w.ended)
		ch := w.changed
		w.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// quiet waits until at least sessions sessions have ended a run and every
// run started has ended.
func (w *runWatch) quiet(ctx context.Context, sessions int) error {
	return w.wait(ctx, func(ended map[string]int) bool {
		return len(ended) >= sessions && total(ended) >= w.started
	})
}

// total is how many runs of the tenant ended.
func total(ended map[string]int) int {
	n := 0
	for _, c := range ended {
		n += c
	}
	return n
}
