package bus_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
)

// A deployment provisioned before sub-agents has no JETWAY_AGENTEVENTS and
// shards with two sources; provisioning again adds the stream and the
// source in place, and a runner's sub-agent event then reaches the log
// of record (through its shard) under its own subject.
func TestProvision_adds_the_agent_events_stream_to_a_deployment_made_before_it(t *testing.T) {
	s := bustest.StartServerWith(t, 2)
	_, js := bustest.Connect(t, s.ClientURL())
	ctx := testContext(t)
	cfg := bus.ProvisionConfig{Partitions: 2}
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	// Back to the earlier shape: the shard without the agent source, and
	// no agent stream.
	ev, err := js.Stream(ctx, bus.WorkStream(0))
	if err != nil {
		t.Fatal(err)
	}
	old := ev.CachedInfo().Config
	var kept []*jetstream.StreamSource
	for _, src := range old.Sources {
		if src.Name != bus.StreamAgentEvents {
			kept = append(kept, src)
		}
	}
	old.Sources = kept
	if _, err := js.UpdateStream(ctx, old); err != nil {
		t.Fatalf("the earlier shape: %v", err)
	}
	if err := js.DeleteStream(ctx, bus.StreamAgentEvents); err != nil {
		t.Fatal(err)
	}

	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provision over the earlier shape: %v", err)
	}
	ag, err := js.Stream(ctx, bus.StreamAgentEvents)
	if err != nil {
		t.Fatalf("stream %s: %v", bus.StreamAgentEvents, err)
	}
	if c := ag.CachedInfo().Config; c.AllowMsgSchedules || c.AllowRollup || !c.DenyPurge || !c.DenyDelete || c.Duplicates == 0 {
		t.Errorf("%s: schedules %v, roll-ups %v, purge %v, delete %v, dedupe %s; want a runner-only stream with a dedupe window",
			bus.StreamAgentEvents, c.AllowMsgSchedules, c.AllowRollup, !c.DenyPurge, !c.DenyDelete, c.Duplicates)
	}
	if _, err := js.Publish(ctx, "jetway.agentevents.t1.s1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the sub-agent event in the log of record", func() bool {
		st, err := js.Stream(ctx, bus.StreamEvents)
		if err != nil {
			return false
		}
		_, err = st.GetLastMsgForSubject(ctx, "jetway.agentevents.t1.s1")
		return err == nil
	})
}
