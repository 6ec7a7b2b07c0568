package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/nats-io/nats.go/micro"
	"jetway/pkg/bus/bustest"
	"jetway/services/jobs/jobsapi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMemSplit_parts_add_up_to_the_resident_set(t *testing.T) {
	m, err := readMemSplit(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.Anon <= 0 || m.File <= 0 {
		t.Fatalf("split %+v: every part of a running Go test should be resident", m)
	}
	// The kernel defines VmRSS as the sum of the three; read in one go they agree.
	if sum := m.Anon + m.File + m.Shmem; sum != m.RSS {
		t.Fatalf("RssAnon+RssFile+RssShmem = %d, VmRSS = %d", sum, m.RSS)
	}
}

func TestMemSampler_keeps_the_reading_of_a_live_child_and_says_so_in_the_note(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	s := sampleMem(cmd.Process.Pid, time.Millisecond)
	m, err := s.stop()
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.Anon+m.File+m.Shmem != m.RSS {
		t.Fatalf("peak %+v is not a whole reading of a live process", m)
	}
	if again, err := s.stop(); err != nil || again != m {
		t.Fatalf("a second stop gave %+v, %v; want %+v", again, err, m)
	}
	note := m.describe(nil)
	for _, want := range []string{"RssAnon", "RssFile", "MiB"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}
}

func TestMemSampler_of_a_gone_process_reports_why(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	_, err := sampleMem(cmd.Process.Pid, time.Millisecond).stop()
	if err == nil {
		t.Fatal("no error for a process that has exited and been reaped")
	}
	if note := (memSplit{}).describe(err); !strings.Contains(note, "no RSS split") {
		t.Fatalf("note %q does not say the split is missing", note)
	}
}

func TestInstalled_copies_the_binary_whole_and_runnable(t *testing.T) {
	dir := t.TempDir()
	path, err := installed("/bin/true", dir)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile("/bin/true")
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("copy differs from /bin/true (%d vs %d bytes, err %v)", len(got), len(want), err)
	}
	if err := exec.Command(path).Run(); err != nil {
		t.Fatalf("the copy does not run: %v", err)
	}
	if _, err := installed(filepath.Join(dir, "missing"), dir); err == nil || !strings.Contains(err.Error(), "copy the jetway binary") {
		t.Fatalf("a missing binary gave %v", err)
	}
}

func TestFilePmdMapped_reads_the_huge_file_mappings_of_a_live_process(t *testing.T) {
	if got := filePmdMapped(os.Getpid()); !strings.HasPrefix(got, "FilePmdMapped ") || !strings.HasSuffix(got, "kB at the end") {
		t.Fatalf("own process: %q", got)
	}
}

func TestWorkerPing_finds_the_one_worker_among_several(t *testing.T) {
	srv := bustest.StartServer(t)
	nc, _ := bustest.Connect(t, srv.ClientURL())
	ids := map[string]string{}
	for _, w := range []string{"w1", "w2", "w3"} {
		svc, err := micro.AddService(nc, micro.Config{Name: jobsapi.ServiceName, Version: "0.0.1", Metadata: map[string]string{jobsapi.MetadataWorker: w}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Stop() })
		ids[w] = svc.Info().ID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subj, err := workerPing(ctx, nc, "w2")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := nc.Request(subj, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var p micro.Ping
	if err := json.Unmarshal(msg.Data, &p); err != nil || p.ID != ids["w2"] {
		t.Fatalf("ping answered by %+v (err %v), want w2's instance %s", p, err, ids["w2"])
	}
	if _, err := workerPing(ctx, nc, "nobody"); err == nil || !strings.Contains(err.Error(), "nobody") {
		t.Fatalf("an absent worker gave %v", err)
	}
}
