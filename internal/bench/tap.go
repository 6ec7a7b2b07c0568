package bench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"jetway/pkg/bus"
	"jetway/pkg/events"
)

// FigRunnerMsgKinds names the breakdown of a runner's messages per event.
const FigRunnerMsgKinds = "runner messages per event by kind, 1 runner sustained (tapped)"

// benchRunnerInbox is the inbox prefix of the bench's runners (a deployed
// runner's), so a tap can tell the replies and deliveries a runner
// receives from everyone else's.
var benchRunnerInbox = bus.ServiceInbox("runner")

// tap counts every message in the account by what it is for, as a
// subscriber to ">" sees them: the runner's requests and publishes by
// subject, and what it receives by its inbox.
type tap struct {
	nc     *nats.Conn
	mu     sync.Mutex
	counts map[string]int
	bytes  map[string]int // payload bytes by kind
}

func startTap(url string) (*tap, error) {
	t := &tap{counts: map[string]int{}, bytes: map[string]int{}}
	nc, _, err := listen(url, "jetway-bench-tap", ">", func(m *nats.Msg) {
		if k := msgKind(m); k != "" {
			t.mu.Lock()
			t.counts[k]++
			t.bytes[k] += len(m.Data)
			t.mu.Unlock()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("tap: %w", err)
	}
	t.nc = nc
	return t, nil
}

// stop closes the tap and returns its counts.
func (t *tap) stop() map[string]int {
	_ = t.nc.Flush()
	t.nc.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts
}

// payloadBytes is the payload bytes the tap saw, by kind.
func (t *tap) payloadBytes() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.bytes)
}

// msgKind names what a message seen by the tap is for the runner, or ""
// when it is not the runner's (the bench's own publishes and replies).
func msgKind(m *nats.Msg) string {
	s := m.Subject
	if strings.HasPrefix(m.Reply, "$JS.ACK.") {
		// A push consumer's delivery (a watch update, a stream sourcing
		// another): a subscriber to ">" sees it under the stored message's
		// own subject, as if it were that write again. A runner's own are
		// counted with the connection's pushes, below; a sourcing's are
		// nobody's connection.
		return ""
	}
	switch {
	case strings.HasPrefix(s, benchRunnerInbox+"."):
		// Requests' replies come to the connection's one response
		// subscription (a 22-character token); a pull's events to their
		// own inbox.
		if tok := strings.Split(s, "."); len(tok) > 2 && len(tok[1]) == 22 {
			return "in: reply to a request or publish"
		}
		return "" // pushed by the server (deliveries, watch updates): counted as the rest, below
	case strings.HasPrefix(s, "$JS.ACK."):
		switch {
		case bytes.HasPrefix(m.Data, []byte("+WPI")):
			return "out: in progress"
		case bytes.HasPrefix(m.Data, []byte("-NAK")):
			return "out: nak"
		}
		if m.Reply != "" {
			return "out: ack (double: a reply follows)"
		}
		return "out: ack"
	case strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT."):
		return "out: pull request"
	case strings.HasPrefix(s, "$JS.API.DIRECT.GET.") || strings.HasPrefix(s, "$JS.API.STREAM.MSG.GET."):
		return "out: stream message get"
	case strings.HasPrefix(s, "$JS.API."):
		return "out: other JetStream API"
	case strings.HasPrefix(s, "$KV."+bus.BucketSessions+"."):
		return "out: session record write"
	case strings.HasPrefix(s, "$KV."+bus.BucketRunners+"."):
		return "out: heartbeat"
	case strings.HasPrefix(s, "$KV."):
		return "out: other bucket write"
	case strings.HasPrefix(s, "jetway.transcript."):
		return "out: transcript append"
	case strings.HasPrefix(s, "jetway.out."):
		return "out: output event (" + m.Header.Get("ce-type") + ")"
	}
	return ""
}

// tapped runs a smaller sustained load with the tap on and reports each
// kind of message per event: what the single count above is made of.
func (rb *runnerBench) tapped(ctx context.Context, tenant string, ids []string) {
	e := rb.e
	total, sessions := e.sizes.SustainedEvents, e.sizes.SustainedSessions
	prefix := "[tap-" + tenant + "-"
	set := newTokenSet(prefix, total)
	w, err := watchRuns(e.url, tenant)
	if err != nil {
		e.skip(FigRunnerMsgKinds, "msgs/event", "", err)
		return
	}
	defer w.stop()
	tp, err := startTap(e.url)
	if err != nil {
		e.skip(FigRunnerMsgKinds, "msgs/event", "", err)
		return
	}
	rb.front.setScan(set.scan)
	defer rb.front.setScan(nil)
	conns := []string{"jetway-bench-" + ids[0]}
	calls := rb.front.callCount()
	before, cerr := e.connMsgs(conns...)
	for k := range total {
		if err := e.publish(ctx, false, tenant, sessionName(k%sessions), events.Input{Text: fmt.Sprintf("event %s%d]", prefix, k)}, true); err != nil {
			tp.stop()
			e.skip(FigRunnerMsgKinds, "msgs/event", "", err)
			return
		}
	}
	wctx, cancel := deadline(ctx, 2*e.patience())
	defer cancel()
	err = e.asyncDone(wctx)
	if err == nil {
		select {
		case <-set.done:
		case <-wctx.Done():
			err = wctx.Err()
		}
	}
	if err == nil {
		err = w.quiet(wctx, sessions)
	}
	counts := tp.stop()
	e.base.leaderLoads = leaderLoadsOf(counts, tp.payloadBytes(), total)
	after, err2 := e.connMsgs(conns...)
	calls = rb.front.callCount() - calls
	if err = errors.Join(err, cerr, err2); err != nil {
		e.skip(FigRunnerMsgKinds, "msgs/event", "", err)
		return
	}
	seen := 0
	for _, c := range counts {
		seen += c
	}
	// The server hands a pull's events (and watch updates) to the
	// subscription that asked, where a tap does not see them: they are
	// what the connection counted beyond what the tap saw.
	counts["in: events delivered and other pushes (the connection's count less the tapped)"] = int(after-before) - seen
	sum, lines := kindLines(counts, float64(total))
	e.add(figure(FigRunnerMsgKinds, "msgs/event", sum).info("breakdown").
		note("%d events over %d sessions, %d runner(s), %d model calls (%.1f events per call): the runner connection's messages (server stats), split by a subscriber to \">\" by what each is for: %s",
			total, sessions, len(ids), calls, float64(total)/float64(max(calls, 1)), strings.Join(lines, "; ")))
}

// kindLines orders the counts, most first, as "kind per unit" texts, each
// count divided by per (the events, or partitions × seconds).
func kindLines(counts map[string]int, per float64) (float64, []string) {
	kinds := make([]string, 0, len(counts))
	n := 0
	for k, c := range counts {
		kinds = append(kinds, k)
		n += c
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(cmp.Compare(counts[b], counts[a]), strings.Compare(a, b)) })
	lines := make([]string, len(kinds))
	for i, k := range kinds {
		lines[i] = fmt.Sprintf("%s %.2f", k, float64(counts[k])/per)
	}
	return float64(n) / per, lines
}
