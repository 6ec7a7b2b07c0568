package partition

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// newClusterEnv is newEnv on a three-node cluster, the work consumers
// replicated on all three: a reset goes through the consumer's Raft log
// there, as in a deployment.
func newClusterEnv(t *testing.T, partitions int, ackWait time.Duration) *env {
	t.Helper()
	cl := bustest.StartClusterWith(t, 3, bustest.ClusterConfig{Partitions: partitions})
	_, js := bustest.Connect(t, cl.URLs()...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Replicas: 3, Partitions: partitions, WorkAckWait: ackWait, WorkPinnedTTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, urls: cl.URLs(), js: js, p: partitions}
}

// A member that takes partitions over from a dead one while events keep
// coming resets each consumer, which hands out the dead member's messages
// again. Whatever the new holder then lets go un-acked (as a runner does
// with the events of a session it lost) comes back, even after the
// consumers' leaders moved. A reset that a delivery raced left those
// messages out of the consumer's replicated state: the new leader never
// delivered them again (see await). Four partitions are four takeovers,
// each a chance for a delivery to race its reset.
func TestA_takeover_under_load_loses_no_message_through_a_consumer_leader_change(t *testing.T) {
	e := newClusterEnv(t, 4, 2*time.Second)
	var sessions []string
	for n := range e.p {
		sessions = append(sessions, e.sessionIn(n))
	}
	dying := e.startMember("dying", nil, func(int) bool { return true }) // holds, never acks
	var sent []string
	for i := range 5 {
		for _, s := range sessions {
			body := fmt.Sprintf("%s-old-%d", s, i)
			e.publish(s, body)
			sent = append(sent, body)
		}
	}
	testutil.Eventually(t, 20*time.Second, "the messages to be out to the dying member", func() bool {
		return len(dying.bodies()) == len(sent)
	})
	dying.nc.Close() // SIGKILL, as far as NATS can tell

	// The next member lets the first deliveries of each session go
	// un-acked, and acks the rest (and those, when they come again). An
	// ack that is not answered could have landed, so the acks are sent,
	// not confirmed.
	const letGo = 20
	var mu sync.Mutex
	acked, seen, dropped := map[string]bool{}, map[string]bool{}, map[int]int{}
	next := e.startMember("next", func(m *member, d Delivery) {
		body := string(d.Msg.Data())
		mu.Lock()
		drop := !seen[body] && dropped[d.Partition] < letGo
		seen[body] = true
		if drop {
			dropped[d.Partition]++
		}
		mu.Unlock()
		if drop {
			return
		}
		// An ack sent counts: one lost on its way brings the message again.
		if d.Msg.Ack() == nil {
			mu.Lock()
			acked[body] = true
			mu.Unlock()
		}
	}, nil)

	// Events keep coming, one at a time as fast as the cluster stores
	// them, while the dead member's pins lapse and the next member takes
	// the partitions over.
	stop, done := make(chan struct{}), make(chan struct{})
	var bodies []string // the publisher's until done is closed
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s := sessions[i%len(sessions)]
			body := fmt.Sprintf("%s-new-%d", s, i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := e.js.Publish(ctx, "jetway.events.t1."+s, []byte(body))
			cancel()
			if err != nil {
				t.Errorf("publish %s: %v", body, err)
				return
			}
			bodies = append(bodies, body)
		}
	}()
	// Stopped before the cluster is, however the test ends: a publish
	// failing on a stopped cluster must not report into a finished test.
	halt := sync.OnceFunc(func() { close(stop); <-done })
	defer halt()
	testutil.Eventually(t, 20*time.Second, "the next member to take every partition and let messages of each go", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for n := range e.p {
			if dropped[n] < letGo {
				return false
			}
		}
		return len(next.g.Held()) == e.p
	})
	halt()
	sent = append(sent, bodies...)

	layout, err := bus.ReadLayout(t.Context(), e.js)
	if err != nil {
		t.Fatal(err)
	}
	for n := range e.p {
		stepDownConsumer(t, e.js, layout.Stream(n), bus.WorkConsumerName(n))
	}

	testutil.EventuallyNil(t, 60*time.Second, "every message acked", func() error {
		mu.Lock()
		defer mu.Unlock()
		var missing []string
		for _, body := range sent {
			if !acked[body] {
				missing = append(missing, body)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d of %d never came back: %v", len(missing), len(sent), missing[:min(len(missing), 10)])
		}
		return nil
	})
}

// stepDownConsumer moves a consumer's leader to another node and waits
// until one leads it again.
func stepDownConsumer(t *testing.T, js jetstream.JetStream, stream, consumer string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		t.Fatal(err)
	}
	before := c.CachedInfo().Cluster.Leader
	subj := fmt.Sprintf("%sCONSUMER.LEADER.STEPDOWN.%s.%s", bus.APIPrefix(js), stream, consumer)
	testutil.EventuallyNil(t, 20*time.Second, "the consumer's leader to step down", func() error {
		msg, err := js.Conn().Request(subj, nil, 2*time.Second)
		if err != nil {
			return err
		}
		var resp struct {
			Error *struct{ Description string } `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			return err
		}
		if resp.Error != nil {
			return fmt.Errorf("step down: %s", resp.Error.Description)
		}
		return nil
	})
	testutil.EventuallyNil(t, 20*time.Second, "a new leader of the consumer", func() error {
		ictx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		info, err := c.Info(ictx)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" || info.Cluster.Leader == before {
			return fmt.Errorf("led by %q", info.Cluster.Leader)
		}
		return nil
	})
}

// Why await pulls one message at a time, shown on the server alone: a
// reset asked for just before a pull request, on one connection, with
// messages out to another puller. The request is served with the
// consumer's old position before the reset is applied, so the reset's
// redeliveries of the messages out come after a delivery past them in
// the consumer's replicated state, which then leaves them out: once the
// consumer's leader moves, they are neither pending nor delivered again.
// Should a server release fix this, the test fails, and await's care is
// no longer needed.
func TestA_reset_that_a_delivery_races_leaves_messages_out_of_the_replicated_state(t *testing.T) {
	cl := bustest.StartCluster(t, 3)
	_, js := bustest.Connect(t, cl.URLs()...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// A cluster just formed may not count every peer as online yet.
	var st jetstream.Stream
	testutil.EventuallyNil(t, 20*time.Second, "the stream placed on the three nodes", func() (err error) {
		st, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "RACE", Subjects: []string{"race.>"}, Retention: jetstream.InterestPolicy, Replicas: 3})
		return err
	})
	for attempt := range 5 {
		name := fmt.Sprintf("c%d", attempt)
		lost, raced := raceReset(ctx, t, cl, js, st, name)
		if !raced {
			t.Logf("attempt %d: the pull was served after the reset; trying again", attempt)
			continue
		}
		if lost == 0 {
			t.Fatalf("a delivery raced the reset and every message out came again: the server keeps them now (the one-message pulls of await are no longer needed)")
		}
		t.Logf("a delivery raced the reset: %d of the messages out never came again after the consumer's leader moved", lost)
		return
	}
	t.Skip("no delivery raced a reset in 5 attempts")
}

// raceReset runs one race on a new consumer of st: five messages out to
// one puller, then a reset and a pull for the rest pipelined on a
// connection to the consumer's leader, then the leader moved. raced says
// the pull was served before the reset applied (its first delivery kept
// the old consumer sequence); lost is how many of the ten messages, none
// ever acked, were not delivered again.
func raceReset(ctx context.Context, t *testing.T, cl *bustest.Cluster, js jetstream.JetStream, st jetstream.Stream, name string) (lost int, raced bool) {
	t.Helper()
	subject := "race." + name
	var cons jetstream.Consumer
	testutil.EventuallyNil(t, 20*time.Second, "the consumer placed on the three nodes", func() (err error) {
		cons, err = st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: name, FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second, Replicas: 3})
		return err
	})
	for i := range 10 {
		if _, err := js.Publish(ctx, subject, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	out, err := cons.Fetch(5, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range out.Messages() {
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var leaderURL string
	for _, nd := range cl.Nodes {
		if nd.Name() == info.Cluster.Leader {
			leaderURL = nd.ClientURL()
		}
	}
	nc, _ := bustest.Connect(t, leaderURL)
	deliveries := make(chan *nats.Msg, 64)
	inbox := nats.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, deliveries)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	resetReply := nats.NewInbox()
	answer, err := nc.SubscribeSync(resetReply)
	if err != nil {
		t.Fatal(err)
	}
	pull, _ := json.Marshal(map[string]any{"batch": 100, "expires": int64(2 * time.Second)})
	api := bus.APIPrefix(js)
	if err := nc.PublishRequest(api+"CONSUMER.RESET.RACE."+name, resetReply, nil); err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest(api+"CONSUMER.MSG.NEXT.RACE."+name, inbox, pull); err != nil {
		t.Fatal(err)
	}
	if _, err := answer.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("reset: %v", err)
	}
	// Wait for the reset to hand the last message out: delivered once, or
	// twice when the pull raced the reset (its first delivery then keeps
	// the old consumer sequence, past the five out), unless the pull ends
	// first: a raced pull may be ended by the reset, or expire, before the
	// reset's deliveries reach it.
	first, lastSeen, want, over := true, 0, 1, false
	for timeout := time.After(10 * time.Second); !over && (first || lastSeen < want); {
		select {
		case m := <-deliveries:
			if m.Reply == "" {
				over = true // a status: the pull is over, nothing more comes on it
				continue
			}
			md, err := m.Metadata()
			if err != nil {
				t.Fatalf("delivery metadata: %v", err)
			}
			if first {
				raced, first = md.Sequence.Consumer > 1, false
				if raced {
					want = 2
				}
			}
			if md.Sequence.Stream == 10 {
				lastSeen++
			}
		case <-timeout:
			t.Fatalf("the reset's deliveries did not reach the last message within 10s (raced %v, last seen %d times)", raced, lastSeen)
		}
	}
	stepDownConsumer(t, js, "RACE", name)
	seen := map[uint64]bool{}
	deadline := time.Now().Add(8 * time.Second) // four AckWaits
	for time.Now().Before(deadline) && len(seen) < 10 {
		b, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		for m := range b.Messages() {
			if md, err := m.Metadata(); err == nil {
				seen[md.Sequence.Stream] = true
			}
		}
	}
	return 10 - len(seen), raced
}
