package proctree

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

func TestEnded_trees_cgroup_is_reused_empty_with_the_next_trees_own_limits(t *testing.T) {
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

	// A tree with limits is born into it too, under its own limits, and
	// hits them; the next tree, under limits of its own, finds the earlier
	// ones replaced and none of the earlier hits counted as its own; one
	// without limits finds them lifted.
	if h.Features().V2Pids || h.pids != "" {
		// (The tree before was killed through cgroup.kill, which keeps its
		// cgroup from reuse: this one may be born into a new one.)
		limited := runTree(t, h, Limits{Processes: 1}, exec.Command("/bin/sh", "-c", "/bin/true & wait"))
		if hit := limited.LimitHit(); !strings.Contains(hit, "process limit (1)") {
			t.Errorf("the limited tree's limit hit = %q, want the process limit", hit)
		}
		var out strings.Builder
		cmd := exec.Command("/bin/sh", "-c", "cat /proc/self/cgroup >/dev/null; /bin/true & wait; echo forked")
		cmd.Stdout = &out
		next := runTree(t, h, Limits{Processes: 64}, cmd)
		if next.Cgroup() != limited.Cgroup() {
			t.Errorf("the next tree was born into %s, want the limited tree's, kept: %s", next.Cgroup(), limited.Cgroup())
		}
		if !strings.Contains(out.String(), "forked") || next.LimitHit() != "" {
			t.Errorf("the next tree in the reused cgroup: output %q, limit hit %q; want it to fork freely and hit nothing", out.String(), next.LimitHit())
		}
		if next.pidsDir != limited.pidsDir {
			t.Errorf("the next tree's v1 pids cgroup %q, want the kept %q", next.pidsDir, limited.pidsDir)
		}
		free := runTree(t, h, Limits{}, exec.Command("true"))
		if b, _ := os.ReadFile(filepath.Join(free.Cgroup(), "pids.max")); h.Features().V2Pids && strings.TrimSpace(string(b)) != "max" {
			t.Errorf("pids.max of a reused cgroup for a tree without limits = %q, want max", b)
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
