package proctree

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// runTree starts cmd in h, waits for it and closes its tree.
func runTree(t *testing.T, h *Host, lim Limits, cmd *exec.Cmd) *Tree {
	t.Helper()
	tr, err := h.Start(cmd, lim)
	if err != nil {
		t.Fatal(err)
	}
	_ = tr.Wait()
	tr.Close()
	return tr
}

func TestEnded_trees_cgroup_is_reused_empty_and_only_without_limits(t *testing.T) {
	h := newHost(t, Config{})
	if h.Cgroup() == "" {
		t.Skip("no writable cgroup v2 here")
	}
	first := runTree(t, h, Limits{}, exec.Command("true"))
	dir := first.Cgroup()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("an empty cgroup without limits was not kept: %v", err)
	}

	// The next tree is born into it, alone.
	tr, lines := start(t, h, Limits{}, `echo $$; exec sleep 5`)
	if tr.Cgroup() != dir {
		t.Fatalf("next tree's cgroup %s, want the kept %s", tr.Cgroup(), dir)
	}
	if !lines.Scan() {
		t.Fatal("no pid from the tree")
	}
	pid, _ := strconv.Atoi(lines.Text())
	if procs := readPids(filepath.Join(dir, "cgroup.procs")); !slices.Equal(procs, []int{pid}) {
		t.Errorf("cgroup.procs = %v, want only the new root %d", procs, pid)
	}
	if err := tr.KillNow(); err != nil {
		t.Fatal(err)
	}
	_ = tr.Wait()
	tr.Close()

	// A tree with limits written into its v2 cgroup gets a new one and
	// leaves none to reuse.
	if h.Features().V2Pids {
		limited := runTree(t, h, Limits{Processes: 8}, exec.Command("true"))
		if limited.Cgroup() == dir {
			t.Error("a tree with a process limit was born into a reused cgroup")
		}
		if _, err := os.Stat(limited.Cgroup()); err == nil {
			t.Error("the cgroup of a tree with limits was kept for reuse")
		}
	}
	h.Close()
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("kept cgroup %s outlived the host", dir)
	}
}

func TestCgroup_with_a_child_cgroup_is_not_reused(t *testing.T) {
	h := newHost(t, Config{})
	if h.Cgroup() == "" {
		t.Skip("no writable cgroup v2 here")
	}
	tr, err := h.Start(exec.Command("true"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_ = tr.Wait()
	if err := os.Mkdir(filepath.Join(tr.Cgroup(), "made-by-the-task"), 0o755); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	if _, err := os.Stat(tr.Cgroup()); err == nil {
		t.Errorf("cgroup %s with a child cgroup was kept", tr.Cgroup())
	}
}

func TestTree_after_a_killed_one_is_not_killed_at_birth(t *testing.T) {
	// A process born into a cgroup that cgroup.kill was once written to
	// was SIGKILLed at birth on this kernel: such a cgroup must never be
	// handed to a later tree.
	h := newHost(t, Config{})
	killed, _ := start(t, h, Limits{}, `sleep 5`)
	if err := killed.KillNow(); err != nil {
		t.Fatal(err)
	}
	_ = killed.Wait()
	killed.Close()
	for range 3 {
		tr, err := h.Start(exec.Command("true"), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Wait(); err != nil {
			t.Fatalf("a tree started after a killed one ended with %v (cgroup %s, the killed one's %s)", err, tr.Cgroup(), killed.Cgroup())
		}
		tr.Close()
	}
}
