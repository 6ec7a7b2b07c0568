package jobs

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// A write an answer waits for goes ahead of other tasks' queued items, but
// never ahead of its own task's: "publish the end, then record it" holds
// per task.
func TestOutbox_a_waited_for_write_passes_other_tasks_but_not_its_own(t *testing.T) {
	o := newOutbox(nil, nil, nil, zerolog.Nop())
	o.publish("s/1", &nats.Msg{Subject: "end of 1"})
	o.persist("s/1")
	o.publish("s/2", &nats.Msg{Subject: "end of 2"})
	o.persistSent("s/3") // a new job's record: first in line
	o.persistSent("s/2") // behind job 2's own end event
	var got []string
	for _, it := range o.queue {
		if it.msg != nil {
			got = append(got, it.msg.Subject)
		} else {
			got = append(got, "record of "+it.task)
		}
	}
	want := []string{"record of s/3", "end of 1", "record of s/1", "end of 2", "record of s/2"}
	if len(got) != len(want) {
		t.Fatalf("queue %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("queue %q, want %q", got, want)
		}
	}
}
