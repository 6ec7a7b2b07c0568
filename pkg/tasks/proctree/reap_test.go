package proctree

import (
	"os/exec"
	"testing"
	"time"
)

func TestZombieChild_names_the_exited_child_and_leaves_it_to_Wait(t *testing.T) {
	c := exec.Command("true")
	startMu.RLock()
	err := c.Start()
	if err == nil {
		track(c.Process.Pid)
	}
	startMu.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	defer untrack(c.Process.Pid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pid, ok := zombieChild(); ok {
			if pid == c.Process.Pid {
				break
			}
			// An orphan an earlier test left: reap it and look again.
			reapOrphans()
			continue
		}
		if time.Now().After(deadline) {
			t.Fatal("the exited child never showed as a zombie")
		}
		time.Sleep(time.Millisecond)
	}
	// WNOWAIT: the status is still there for exec.Cmd.Wait.
	if err := c.Wait(); err != nil {
		t.Errorf("Wait after zombieChild: %v", err)
	}
	if pid, ok := zombieChild(); ok && pid == c.Process.Pid {
		t.Error("the child is still a zombie after Wait")
	}
}
