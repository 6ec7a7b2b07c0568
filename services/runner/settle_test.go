package runner

import (
	"testing"
	"time"
)

// Acks past ackedMemory are forgotten at the first prune after it, the
// oldest first or not, and those within it are kept.
func TestAcks_forget_what_is_past_ackedMemory_and_keep_the_rest(t *testing.T) {
	now := time.Now()
	var k acks
	k.prune() // nothing acked: nothing to do
	k.mark(1, now.Add(-ackedMemory/2))
	k.mark(2, now.Add(-ackedMemory-time.Second)) // older than the one before
	k.mark(3, now)
	k.mark(0, now.Add(-time.Hour)) // no sequence: not counted
	k.prune()
	if k.settling(2) || !k.settling(1) || !k.settling(3) || k.settling(0) {
		t.Fatalf("after a prune: %v", k.acked)
	}
	if !k.oldest.Equal(now.Add(-ackedMemory / 2)) {
		t.Errorf("oldest %v, want the time of 1", k.oldest)
	}
	k.mark(4, now.Add(-2*ackedMemory))
	k.prune()
	if k.settling(4) || len(k.acked) != 2 {
		t.Errorf("after marking an old ack and pruning: %v", k.acked)
	}
}
