package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// leaderWait bounds how long SpreadLeaders waits for a stream to elect the
// node it stepped down to, currentWait how long for a replica to catch up
// before it is handed the lead, and spreadStep one request. While the
// stream has no leader an info request goes unanswered (on loopback the
// election took 20-120 ms), so each look then is cut short at
// electionPoll: waiting out spreadStep made every move take 5 s.
const (
	leaderWait   = 10 * time.Second
	currentWait  = 2 * time.Second
	spreadStep   = 5 * time.Second
	electionPoll = 250 * time.Millisecond
)

// SpreadLeaders moves the leaders of streams until no node leads two more
// of them than another node that could take one over (a replica of that
// stream), and returns how many it moved: K streams of three replicas on
// three nodes end with K/3 leaders a node, give or take one. Sharding the
// event path over several streams adds server capacity only if their
// leaders sit on different nodes, and nats-server elects them wherever it
// likes.
//
// It is greedy: it steps down the leader with the most to give in favour
// of its least loaded replica, and waits until that replica leads before
// the next move. Streams already spread cost one info request each and no
// step-down, so provisioning may call it every time; a single server, or
// streams of one replica, have nothing to move (0, nil).
//
// Only a current replica is handed the lead: one that lags would need the
// old leader to catch up, and the election would go elsewhere. A replica
// is not current for a moment after every election, until it acknowledges
// the new leader; SpreadLeaders waits up to currentWait for it, then does
// without it. A stream without a leader is left as it is. Needs
// nats-server 2.11 or later (a step-down's preferred server).
func SpreadLeaders(ctx context.Context, js jetstream.JetStream, streams []string) (moved int, err error) {
	var shards []*shard
	for _, name := range streams {
		if slices.ContainsFunc(shards, func(sh *shard) bool { return sh.name == name }) {
			continue
		}
		info, err := streamInfo(ctx, js, name)
		if err != nil {
			return 0, fmt.Errorf("bus: spread leaders: stream %s: %w", name, err)
		}
		sh := &shard{name: name}
		sh.read(info)
		shards = append(shards, sh)
	}
	// Each move lowers the sum of the squared counts by at least 2, and a
	// wait either drops a replica or lets the next round move: the bound
	// is only a guard against a cluster changing under us.
	for guard := 3 * len(shards) * (len(shards) + 1); guard > 0; guard-- {
		leads := map[string]int{} // node name: how many of streams it leads
		for _, sh := range shards {
			if sh.leader != "" {
				leads[sh.leader]++
			}
		}
		var from *shard
		var to *peer
		gap := 1 // a move must close a gap of 2 or more
		for _, sh := range shards {
			for _, p := range sh.peers {
				g := leads[sh.leader] - leads[p.name]
				if g > gap || (g == gap && to != nil && p.current && !to.current) {
					from, to, gap = sh, p, g
				}
			}
		}
		if from == nil {
			return moved, nil
		}
		if !to.current {
			info, ok, err := waitCurrent(ctx, js, from.name, to.name)
			switch {
			case err != nil:
				return moved, fmt.Errorf("bus: spread leaders: stream %s: %w", from.name, err)
			case ok:
				from.read(info)
			default:
				from.peers = slices.DeleteFunc(from.peers, func(p *peer) bool { return p == to })
			}
			continue
		}
		if err := moveLeader(ctx, js, from.name, to.name); err != nil {
			return moved, fmt.Errorf("bus: spread leaders: move stream %s from %s to %s: %w", from.name, from.leader, to.name, err)
		}
		moved++
		old := from.leader
		from.leader = to.name
		to.name = old // the old leader follows now, as current as it was
	}
	return moved, nil
}

// shard is what SpreadLeaders knows of one stream: its leader and the
// replicas that might lead in its place (none if there is no leader or
// nothing to move).
type shard struct {
	name   string
	leader string
	peers  []*peer
}

type peer struct {
	name    string
	current bool
}

func (sh *shard) read(info *jetstream.StreamInfo) {
	sh.leader, sh.peers = "", nil
	ci := info.Cluster
	if ci == nil || ci.Leader == "" {
		return // a single server's stream, or no leader to move yet
	}
	sh.leader = ci.Leader
	for _, p := range ci.Replicas {
		if p != nil && !p.Offline && p.Name != "" {
			sh.peers = append(sh.peers, &peer{name: p.Name, current: p.Current})
		}
	}
}

// waitCurrent polls stream's info until its replica name is current and
// returns that info, and true; false if it is not within currentWait.
func waitCurrent(ctx context.Context, js jetstream.JetStream, stream, name string) (*jetstream.StreamInfo, bool, error) {
	deadline := time.Now().Add(currentWait)
	for {
		info, err := streamInfo(ctx, js, stream)
		if err != nil {
			return nil, false, err
		}
		if ci := info.Cluster; ci != nil && slices.ContainsFunc(ci.Replicas, func(p *jetstream.PeerInfo) bool {
			return p != nil && p.Name == name && p.Current && !p.Offline
		}) {
			return info, true, nil
		}
		if time.Now().After(deadline) {
			return nil, false, nil
		}
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// moveLeader asks stream's leader to step down in favour of server (a peer
// of the stream) and waits until server leads it.
func moveLeader(ctx context.Context, js jetstream.JetStream, stream, server string) error {
	req, err := json.Marshal(stepDownRequest{Placement: &stepDownPlacement{Preferred: server}})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, spreadStep)
	defer cancel()
	msg, err := js.Conn().RequestWithContext(rctx, APIPrefix(js)+"STREAM.LEADER.STEPDOWN."+stream, req)
	if err != nil {
		return fmt.Errorf("step-down request: %w", err)
	}
	var resp stepDownResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("step-down response %q: %w", msg.Data, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("step-down refused: %w", resp.Error)
	}
	if !resp.Success {
		return fmt.Errorf("step-down not confirmed: %s", msg.Data)
	}
	// The old leader steps down at once; the preferred peer is elected
	// after its campaign, which an info request cannot reach meanwhile.
	deadline := time.Now().Add(leaderWait)
	last := "none"
	for {
		info, err := streamInfoWithin(ctx, js, stream, electionPoll)
		if err == nil && info.Cluster != nil {
			if info.Cluster.Leader == server {
				return nil
			}
			if info.Cluster.Leader != "" {
				last = info.Cluster.Leader
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not elected within %s (leader seen: %s)", server, leaderWait, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// streamInfo reads stream's info fresh, each request bounded on its own.
func streamInfo(ctx context.Context, js jetstream.JetStream, stream string) (*jetstream.StreamInfo, error) {
	return streamInfoWithin(ctx, js, stream, spreadStep)
}

func streamInfoWithin(ctx context.Context, js jetstream.JetStream, stream string, d time.Duration) (*jetstream.StreamInfo, error) {
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	s, err := js.Stream(rctx, stream)
	if err != nil {
		return nil, err
	}
	return s.CachedInfo(), nil
}

// stepDownRequest is the server's JSApiLeaderStepdownRequest: a preferred
// server in its placement names the peer to hand leadership to (nats.go's
// Placement has no such field).
type stepDownRequest struct {
	Placement *stepDownPlacement `json:"placement,omitempty"`
}

type stepDownPlacement struct {
	Preferred string `json:"preferred"`
}

type stepDownResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Success bool                `json:"success,omitempty"`
}

// keepSpreadMin is KeepSpread's interval when it is given none.
const keepSpreadMin = time.Second

// KeepSpread spreads the leaders of each group (SpreadLeaders, a group at
// a time) every interval, until ctx ends; the first round comes after one
// interval, not at once, since it runs after a provisioning that may
// just have changed the log's sources, when moving the log's leader can
// make it copy events twice (docs/ARCHITECTURE.md). nats-server moves
// a leader away from a node that stops and never back: after a restart
// one node can lead two shards while another leads none, and SpreadLeaders
// run once at provisioning cannot see that. A round with the leaders
// already spread costs one info request per stream. A round that fails
// (the cluster electing, a node away) is told to progress and the next
// one tries again.
//
// An interval of zero or less is taken as keepSpreadMin: a ticker needs a
// positive one.
func KeepSpread(ctx context.Context, js jetstream.JetStream, groups [][]string, every time.Duration, progress func(string)) {
	if every <= 0 {
		every = keepSpreadMin
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, g := range groups {
			moved, err := SpreadLeaders(ctx, js, g)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				progress(fmt.Sprintf("leaders of %s not spread: %v", strings.Join(g, ", "), err))
			case moved > 0:
				progress(fmt.Sprintf("%d leaders of %s moved so that each node leads its share", moved, strings.Join(g, ", ")))
			}
		}
	}
}
