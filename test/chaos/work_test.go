package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// workState describes what is left in the work shards and how each work
// consumer stands, so a missing event can be told apart: still in its
// shard (held, waiting, or never delivered again) or gone from it (acked
// without being recorded).
func workState(ctx context.Context, js jetstream.JetStream, partitions int) string {
	var b strings.Builder
	for k := range workShards {
		shardState(ctx, &b, js, bus.WorkStream(k))
	}
	for p := range partitions {
		c, err := js.Consumer(ctx, bus.WorkStreamOf(p, workShards), bus.WorkConsumerName(p))
		if err != nil {
			fmt.Fprintf(&b, "consumer %d: %v\n", p, err)
			continue
		}
		ci, err := c.Info(ctx)
		if err != nil {
			fmt.Fprintf(&b, "consumer %d info: %v\n", p, err)
			continue
		}
		pin := ""
		for _, g := range ci.PriorityGroups {
			pin += g.PinnedClientID
		}
		fmt.Fprintf(&b, "consumer %d: delivered stream %d consumer %d, ack floor stream %d, ack pending %d, redelivered %d, pending %d, waiting %d, pin %q\n",
			p, ci.Delivered.Stream, ci.Delivered.Consumer, ci.AckFloor.Stream, ci.NumAckPending, ci.NumRedelivered, ci.NumPending, ci.NumWaiting, pin)
	}
	return b.String()
}

// shardState lists the first 200 messages left in one shard.
func shardState(ctx context.Context, b *strings.Builder, js jetstream.JetStream, name string) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		fmt.Fprintf(b, "%s: %v\n", name, err)
		return
	}
	info, err := st.Info(ctx)
	if err != nil {
		fmt.Fprintf(b, "%s info: %v\n", name, err)
		return
	}
	fmt.Fprintf(b, "%s: %d messages, first %d, last %d\n", name, info.State.Msgs, info.State.FirstSeq, info.State.LastSeq)
	seq := info.State.FirstSeq
	for n := 0; n < 200 && seq <= info.State.LastSeq; n++ {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			fmt.Fprintf(b, "  get from %d: %v\n", seq, err)
			break
		}
		fmt.Fprintf(b, "  seq %d %s ce-id %s\n", m.Sequence, m.Subject, m.Header.Get("ce-id"))
		seq = m.Sequence + 1
	}
}
