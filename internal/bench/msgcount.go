package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// FigRunnerMsgsPerEvent names the messages a runner's connection sends and
// receives per event under sustained load.
const FigRunnerMsgsPerEvent = "runner messages per event on its connection, 1 runner sustained"

// msgsGoal is the most messages per event a runner's connection may cost:
// a floor consumer needs about two (the delivery and its ack).
const msgsGoal = 2.5

// errNoServer: message counts are read from the embedded server's
// connection stats, which a bench against another server cannot read.
var errNoServer = errors.New("counted from the embedded server's connection stats; not available with --nats")

// connMsgs sums the messages the server counted in and out on the
// connections named names: what a connection costs, read from the
// server's own stats rather than a tap on the client.
func (e *env) connMsgs(names ...string) (int64, error) {
	if e.srv == nil {
		return 0, errNoServer
	}
	cz, err := e.srv.Connz(&server.ConnzOptions{Limit: 1 << 16})
	if err != nil {
		return 0, fmt.Errorf("connz: %w", err)
	}
	var sum int64
	found := 0
	for _, c := range cz.Conns {
		if slices.Contains(names, c.Name) {
			sum += c.InMsgs + c.OutMsgs
			found++
		}
	}
	if found != len(names) {
		return 0, fmt.Errorf("connz: %d of the connections %v found", found, names)
	}
	return sum, nil
}

// FigRunnerIdleMsgs names what a held partition costs a runner's
// connection while no event comes: the price of a larger P.
const FigRunnerIdleMsgs = "runner idle messages/s per held partition"

// idleWindow is how long the idle cost is counted: several pull expiries
// (PinnedTTL/2), so each partition's pulls renew a few times within it.
const idleWindow = 6 * time.Second

// idleCost counts the messages on a quiet runner's connection over
// idleWindow and reports them per second per partition it holds. Each
// held partition keeps a pull request waiting at the server and renews it
// every PinnedTTL/2, so a runner holding P partitions pays about P times
// this with no work at all.
func (e *env) idleCost(ctx context.Context, conn string, held int) {
	const goal = "reported (the cost of P)"
	if held <= 0 {
		e.skip(FigRunnerIdleMsgs, "msgs/s", goal, errors.New("the runner's heartbeat claims no partition"))
		return
	}
	tp, err := startTap(e.url)
	if err != nil {
		e.skip(FigRunnerIdleMsgs, "msgs/s", goal, err)
		return
	}
	before, err := e.connMsgs(conn)
	if err != nil {
		tp.stop()
		e.skip(FigRunnerIdleMsgs, "msgs/s", goal, err)
		return
	}
	t0 := time.Now()
	if !sleepCtx(ctx, idleWindow) {
		tp.stop()
		e.skip(FigRunnerIdleMsgs, "msgs/s", goal, ctx.Err())
		return
	}
	after, err := e.connMsgs(conn)
	counts := tp.stop()
	if err != nil {
		e.skip(FigRunnerIdleMsgs, "msgs/s", goal, err)
		return
	}
	secs := time.Since(t0).Seconds()
	v := float64(after-before) / secs / float64(held)
	seen := 0
	for _, c := range counts {
		seen += c
	}
	counts["in: pushes (pull expiries and heartbeats, watch updates; the connection's count less the tapped)"] = int(after-before) - seen
	_, lines := kindLines(counts, secs*float64(held))
	e.add(figure(FigRunnerIdleMsgs, "msgs/s", v).info(goal).note("messages in and out on one idle runner's connection over %.1f s, holding %d partitions: %.1f msgs/s in all; per held partition per second, by kind: %s; P = 256 would cost one runner about %.0f msgs/s doing nothing", secs, held, float64(after-before)/secs, strings.Join(lines, "; "), v*256))
}
