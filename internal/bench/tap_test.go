package bench

import (
	"testing"

	"github.com/nats-io/nats.go"

	"jetway/pkg/bus"
)

// A subscriber to ">" sees a push consumer's deliveries (watch updates, a
// stream sourcing the session records) under the stored message's own
// subject; they are not the runner's writes again.
func TestThe_tap_counts_a_write_once_and_not_its_deliveries(t *testing.T) {
	for _, c := range []struct {
		subject, reply, want string
	}{
		{"$KV." + bus.BucketSessions + ".t1.s1", benchRunnerInbox + ".abcdefghijklmnopqrstuv.1", "out: session record write"},
		{"$KV." + bus.BucketSessions + ".t1.s1", "$JS.ACK.KV_jetway_sessions.jetway-sessions-by-partition-source.1.2.3.4.5.0", ""},
		{"$KV." + bus.BucketSessionsByPartition + ".0.t1.s1", "$JS.ACK.KV_jetway_sessions_by_partition.w1.1.2.3.4.5.0", ""},
		{"jetway.out.t1.s1", "$JS.ACK.JETWAY_OUT.c.1.2.3.4.5.0", ""},
		{"$JS.ACK.JETWAY_WORK_0.c.1.2.3.4.5.0", "", "out: ack"},
	} {
		if got := msgKind(&nats.Msg{Subject: c.subject, Reply: c.reply, Header: nats.Header{}}); got != c.want {
			t.Errorf("%s (reply %s) counted as %q, want %q", c.subject, c.reply, got, c.want)
		}
	}
}
