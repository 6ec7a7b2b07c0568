package jobs_test

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"jetway/pkg/workspace"
	"jetway/services/jobs"
	"jetway/services/jobs/jobsapi"
)

// mountsUnder lists the mount points under dir (/proc/self/mountinfo).
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields[4])
		}
	}
	return out
}

// cappedEnv is an env whose worker caps each workspace at 16 MiB and 300
// files. The test fails rather than skips where the worker is root and
// still cannot cap (CI runs as root: a missing e2fsprogs must show).
func cappedEnv(t *testing.T) (*env, func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("disk caps need root (loop-mounted images)")
	}
	e := newEnv(t)
	t.Cleanup(func() {
		if m := mountsUnder(t, e.root); len(m) > 0 {
			t.Errorf("mounts left after the worker stopped: %v", m)
			for k := len(m) - 1; k >= 0; k-- {
				_ = syscall.Unmount(m[k], syscall.MNT_DETACH)
			}
		}
	})
	w, err := jobs.New(jobs.Config{NC: e.nc, WorkerID: "w1", Root: e.root, Grace: 200 * time.Millisecond,
		WorkspaceSize: 16 << 20, WorkspaceFiles: 300})
	if err != nil {
		t.Fatal(err)
	}
	stop := e.run(w)
	t.Cleanup(stop)
	if got := serviceInfo(t, e).Metadata[jobs.MetadataDiskCap]; got != "ext4 image per workspace: 16 MiB, 300 files" {
		t.Fatalf("metadata disk_cap = %q: a root worker must cap workspaces (is e2fsprogs installed?)", got)
	}
	return e, stop
}

// A session's workspace is its own file system: a command writing past the
// size, one making files past the count, one writing to $TMPDIR, and the
// write_file tool all fail, and what the model reads names the cap. The
// workspace survives a restart of the worker, and no mount outlives it.
func TestA_write_over_the_workspace_disk_cap_fails_and_names_the_cap(t *testing.T) {
	t.Parallel()
	e, stop := cappedEnv(t)
	const named = "disk cap of 16 MiB and 300 files (the jobs worker's --workspace-size and --workspace-files"

	at := time.Now()
	if _, err := e.cli.Write(bg, tenant, session, workspace.WriteRequest{Path: "keep.txt", Content: "kept\n"}); err != nil {
		t.Fatal(err)
	}
	// Measured, not asserted: the session's first call makes and mounts
	// its image.
	t.Logf("the first write_file of a session (image made and mounted) took %s", time.Since(at).Round(time.Millisecond))
	res, err := e.cli.Run(bg, req("head -c 32M /dev/zero > big; echo wrote $?"))
	if err != nil || !strings.Contains(res.Output, "No space left on device") || !strings.Contains(res.Output, named) {
		t.Fatalf("a 32 MiB write into a 16 MiB workspace answered %+v, %v; want it refused, naming the cap", res, err)
	}
	_, err = e.cli.Write(bg, tenant, session, workspace.WriteRequest{Path: "more.txt", Content: strings.Repeat("x", 64<<10)})
	if ae := wantCode(t, err, jobsapi.CodeConflict, jobsapi.ErrConflict); !strings.Contains(ae.Message, named) {
		t.Errorf("write_file into a full workspace: %q, want the cap named", ae.Message)
	}
	res, err = e.cli.Run(bg, req("rm big; head -c 32M /dev/zero > $TMPDIR/big; echo wrote $?"))
	if err != nil || !strings.Contains(res.Output, "No space left on device") || !strings.Contains(res.Output, named) {
		t.Errorf("a 32 MiB write into $TMPDIR answered %+v, %v; the temporary directory must count too", res, err)
	}
	res, err = e.cli.Run(bg, req("rm -f $TMPDIR/big; mkdir -p many && cd many && i=0; while [ $i -lt 400 ] && : > f$i; do i=$((i+1)); done; echo made $i"))
	if err != nil || !strings.Contains(res.Output, named) || strings.Contains(res.Output, "made 400") {
		t.Errorf("400 files under a 300-file cap answered %+v, %v", res, err)
	}
	if res, err := e.cli.Run(bg, req("rm -r many; echo fine > ok.txt && cat ok.txt")); err != nil || res.Output != "fine" {
		t.Errorf("after deleting, a write = %+v, %v; want room again and no note", res, err)
	}

	stop()
	if m := mountsUnder(t, e.root); len(m) != 0 {
		t.Fatalf("the stopped worker left mounts: %v", m)
	}
	e.startWorker("w1", func(c *jobs.Config) { c.WorkspaceSize, c.WorkspaceFiles = 16<<20, 300 })
	res, err = e.cli.Run(bg, req("cat keep.txt ok.txt; df -P . | tail -1 | awk '{print $2}'"))
	lines := strings.Split(res.Output, "\n")
	if kib, _ := strconv.Atoi(lines[len(lines)-1]); err != nil || !strings.HasPrefix(res.Output, "kept\nfine\n") || kib <= 0 || kib > 16<<10 {
		t.Errorf("after a restart the workspace reads %+v, %v; want its files back, on its 16 MiB image", res, err)
	}
}

// Without a cap (turned off here; a worker that cannot mount says why
// instead) the worker says so in its metadata, and a workspace grows past
// what a cap would have allowed.
func TestA_worker_without_a_disk_cap_says_so(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1", func(c *jobs.Config) { c.WorkspaceSize, c.WorkspaceFiles = -1, -1 })
	if got := serviceInfo(t, e).Metadata[jobs.MetadataDiskCap]; got != "none (turned off by --workspace-size 0 and --workspace-files 0)" {
		t.Errorf("metadata disk_cap = %q", got)
	}
	if res, err := e.cli.Run(bg, req("head -c 20M /dev/zero > big && wc -c < big")); err != nil || res.Output != "20971520" {
		t.Errorf("a 20 MiB write without a cap = %+v, %v", res, err)
	}
	if m := mountsUnder(t, e.root); len(m) != 0 {
		t.Errorf("an uncapped worker mounted %v", m)
	}
}
