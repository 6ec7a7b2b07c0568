package bench

import (
	"os"
	"os/exec"
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
