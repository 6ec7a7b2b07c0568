package bench

import (
	"errors"
	"fmt"
	"slices"

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
