package deploytest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"jetway/deploy/certs"
	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// TestSpreader_brings_the_leaders_back_and_may_do_nothing_else gathers
// the leaders of every stream the spreader keeps spread onto one node, as
// nats-server leaves them after the other nodes restarted, and runs the
// real `jetway-provision -spread-only` as the spreader user: each group is
// spread again, so the user's rights are enough for its work. Then, as the
// spreader, it tries every JetStream API operation the server defines on
// every stream the deployment holds, publishes on every stream's own
// subjects, acks and flow control, and listens on the other services'
// inboxes and the bus: all refused but the stream info and leader
// step-down on the streams it spreads.
func TestSpreader_brings_the_leaders_back_and_may_do_nothing_else(t *testing.T) {
	d := render(t, renderOptions{})
	d.startCluster()
	d.provision()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := d.connect("admin")
	l, err := bus.ReadLayout(ctx, admin.js)
	if err != nil {
		t.Fatal(err)
	}
	groups := bus.LeaderGroups(l)
	var spread []string
	for _, g := range groups {
		spread = append(spread, g...)
	}

	// cluster reads a stream's leader and whether node is a current
	// replica of it. While a stream elects, its info goes unanswered:
	// each look is cut short rather than waiting out the client's timeout.
	cluster := func(stream, node string) (leader string, current bool, err error) {
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		s, err := admin.js.Stream(lctx, stream)
		if err != nil {
			return "", false, err
		}
		ci := s.CachedInfo().Cluster
		if ci == nil || ci.Leader == "" {
			return "", false, fmt.Errorf("%s has no leader yet", stream)
		}
		for _, p := range ci.Replicas {
			if p != nil && p.Name == node && p.Current && !p.Offline {
				current = true
			}
		}
		return ci.Leader, current, nil
	}
	leaderOf := func(stream string) (string, error) {
		leader, _, err := cluster(stream, "")
		return leader, err
	}
	var node string
	testutil.EventuallyNil(t, 30*time.Second, "a leader of "+spread[0], func() (err error) {
		node, err = leaderOf(spread[0])
		return err
	})
	for _, stream := range spread {
		testutil.EventuallyNil(t, 30*time.Second, stream+" led by "+node, func() error {
			leader, current, err := cluster(stream, node)
			switch {
			case err != nil:
				return err
			case leader == node:
				return nil
			case !current: // handed the lead now, it would lose the election
				return fmt.Errorf("%s is not a current replica of %s yet", node, stream)
			}
			return bustest.StepDownTo(admin.Conn, stream, node)
		})
	}

	spreader := testutil.Binary(t, "jetway/deploy/provision", "")
	run, runCancel := context.WithTimeout(ctx, time.Minute)
	defer runCancel()
	cmd := exec.CommandContext(run, spreader, "-spread-only")
	cmd.Env = []string{
		"NATS_URL=" + d.urls(),
		"NATS_USER=spreader",
		"NATS_PASSWORD=" + d.passwords["spreader"],
		"NATS_CA=" + d.secret(certs.CAFile),
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("jetway-provision -spread-only as spreader: %v\n%s", err, out)
	}
	t.Logf("jetway-provision -spread-only:\n%s", out)
	for _, g := range groups {
		leads := map[string]int{}
		for _, stream := range g {
			leader, err := leaderOf(stream)
			if err != nil {
				t.Fatal(err)
			}
			leads[leader]++
		}
		counts := make([]int, 0, 3)
		for _, n := range leads {
			counts = append(counts, n)
		}
		for len(counts) < 3 {
			counts = append(counts, 0) // a node that leads none of them
		}
		if slices.Max(counts)-slices.Min(counts) > 1 {
			t.Errorf("after the spreader, the leaders of %v are %v: not spread", g, leads)
		}
	}

	s := d.connect("spreader")
	refused := func(subject string) {
		t.Helper()
		if err := s.Publish(subject, []byte(`{}`)); err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		publishViolation(t, s, subject)
	}

	// Its work on every stream it spreads is allowed, whether or not this
	// run's spreading happened to move that one: a malformed request is
	// answered (refused as bad JSON, nothing moves) where a right missing
	// would leave it unanswered.
	for _, stream := range spread {
		for _, op := range []string{server.JSApiStreamInfo, server.JSApiStreamLeaderStepDown} {
			subject := fillAPI(op, stream)
			if _, err := s.Request(subject, []byte("not json"), 5*time.Second); err != nil {
				t.Errorf("the spreader's %s: %v, want an answer (it is its work)", subject, err)
			}
		}
	}

	names := admin.js.StreamNames(ctx)
	var streams []string
	for name := range names.Name() {
		streams = append(streams, name)
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(streams)
	if len(streams) < len(spread)+3 {
		t.Fatalf("the deployment holds streams %v: too few to attack", streams)
	}
	tried := 0
	for _, op := range jsAPI {
		if !strings.Contains(op, "*") {
			refused(op)
			tried++
			continue
		}
		for _, stream := range streams {
			subject := fillAPI(op, stream)
			if slices.Contains(spread, stream) && (op == server.JSApiStreamInfo || op == server.JSApiStreamLeaderStepDown) {
				continue // its work, done above
			}
			refused(subject)
			tried++
		}
	}
	for _, stream := range streams {
		info, err := admin.js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		for _, subj := range info.CachedInfo().Config.Subjects {
			refused(fillWildcards(subj))
		}
		refused("$JS.ACK." + stream + ".x.1.1.1.1.1.1")
		refused("$JS.FC." + stream + ".x")
		tried += 2
	}
	for _, subj := range []string{"jetway.events.acme.s1", "jetway.api.acme.sessions", "jetway.jobs.jobs-1.start", "$SRV.PING", "$KV.jetway_control.groundstop"} {
		refused(subj)
		tried++
	}
	inboxes := []string{">", "jetway.>", "$JS.API.>", "$KV.>", "$SRV.>", "_INBOX.>"}
	for _, u := range serviceUsers {
		if u != "spreader" {
			inboxes = append(inboxes, bus.ServiceInbox(u)+".>")
		}
	}
	for _, subj := range inboxes {
		s.refuseSubscribe(t, subj)
		tried++
	}
	t.Logf("the spreader was refused %d subjects over %d streams", tried, len(streams))
	s.noViolation(t)
}

// jsAPI is every JetStream API subject nats-server defines, each stream or
// consumer name a wildcard: the spreader is tried on all of them.
var jsAPI = []string{
	server.JSApiAccountInfo, server.JSApiStreams, server.JSApiStreamList,
	server.JSApiStreamCreate, server.JSApiStreamUpdate, server.JSApiStreamInfo, server.JSApiStreamDelete,
	server.JSApiStreamPurge, server.JSApiStreamSnapshot, server.JSApiStreamRestore,
	server.JSApiMsgDelete, server.JSApiMsgGet, server.JSDirectMsgGet, server.JSDirectGetLastBySubject,
	server.JSApiConsumerCreate, server.JSApiConsumerCreateEx, server.JSApiDurableCreate,
	server.JSApiConsumers, server.JSApiConsumerList, server.JSApiConsumerInfo, server.JSApiConsumerDelete,
	server.JSApiConsumerPause, server.JSApiConsumerUnpin, wildcards(server.JSApiRequestNextT), wildcards(server.JSApiConsumerResetT),
	server.JSApiStreamRemovePeer, server.JSApiStreamEvacuatePeer, server.JSApiStreamCancelMove,
	server.JSApiStreamLeaderStepDown, server.JSApiConsumerLeaderStepDown,
	server.JSApiConsumerRemovePeer, server.JSApiConsumerEvacuatePeer,
	server.JSApiLeaderStepDown, server.JSApiRemoveServer, server.JSApiEvacuateServer, server.JSApiMetaRescue,
	server.JSApiAccountPurge, server.JSApiServerStreamMove, server.JSApiServerStreamCancelMove,
}

// wildcards is the form of an API subject template (the server defines
// some only so) with a wildcard for each name.
func wildcards(template string) string { return strings.ReplaceAll(template, "%s", "*") }

// fillAPI makes an API subject for stream from op: the first wildcard is
// the stream, any other a consumer or filter named x.
func fillAPI(op, stream string) string {
	return fillWildcards(strings.Replace(op, "*", stream, 1))
}

// fillWildcards replaces each wildcard token of subject by x.
func fillWildcards(subject string) string {
	tokens := strings.Split(subject, ".")
	for i, tok := range tokens {
		if tok == "*" || tok == ">" {
			tokens[i] = "x"
		}
	}
	return strings.Join(tokens, ".")
}

// publishViolation waits until the server has told c a publish was
// refused. The subject it names is the one it checked, which for a subject
// the partition mapping rewrites is the mapped one, so any refused publish
// counts; c's publishes are waited for one at a time, so it is this one.
func publishViolation(t testing.TB, c *client, subject string) {
	t.Helper()
	c.awaitViolation(t, fmt.Sprintf("the spreader's publish on %q was not refused within 10s", subject), func(err error) bool {
		return strings.Contains(err.Error(), "Publish")
	})
}
