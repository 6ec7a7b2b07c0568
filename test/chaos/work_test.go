package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// workState describes what is left in JETWAY_WORK and how each work
// consumer stands, so a missing event can be told apart: still in the
// stream (held, waiting, or never delivered again) or gone from it
// (acked without being recorded).
func workState(ctx context.Context, js jetstream.JetStream, partitions int) string {
	var b strings.Builder
	st, err := js.Stream(ctx, bus.WorkStream(0))
	if err != nil {
		return fmt.Sprintf("work stream: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Sprintf("work stream info: %v", err)
	}
	fmt.Fprintf(&b, "%s: %d messages, first %d, last %d\n", bus.WorkStream(0), info.State.Msgs, info.State.FirstSeq, info.State.LastSeq)
	seq := info.State.FirstSeq
	for n := 0; n < 200 && seq <= info.State.LastSeq; n++ {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			fmt.Fprintf(&b, "  get from %d: %v\n", seq, err)
			break
		}
		fmt.Fprintf(&b, "  seq %d %s ce-id %s\n", m.Sequence, m.Subject, m.Header.Get("ce-id"))
		seq = m.Sequence + 1
	}
	for p := range partitions {
		c, err := js.Consumer(ctx, bus.WorkStream(0), bus.WorkConsumerName(p))
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
