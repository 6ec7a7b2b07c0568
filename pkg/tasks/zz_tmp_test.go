package tasks

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"jetway/pkg/redact"
)

func TestZZStartLatency(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		t.Skip()
	}
	m := NewManager(Config{Output: Files{Dir: t.TempDir()}.Output, AppendClean: redact.AppendCleanLine})
	defer m.Close()
	var bare, ours []time.Duration
	for i := range 1100 {
		cmd := exec.Command("true")
		t0 := time.Now()
		cmd.Start()
		d := time.Since(t0)
		cmd.Wait()
		cmd = exec.Command("true")
		t0 = time.Now()
		info, err := m.Start(bg, Spec{Summary: "true", Cmd: cmd})
		d2 := time.Since(t0)
		if err != nil {
			t.Fatal(err)
		}
		m.Wait(bg, sid, info.ID, time.Minute)
		if i >= 100 {
			bare = append(bare, d)
			ours = append(ours, d2)
		}
	}
	slices.Sort(bare)
	slices.Sort(ours)
	p := func(s []time.Duration, q int) time.Duration { return s[len(s)*q/100] }
	t.Logf("bare p50 %v p99 %v | ours p50 %v p99 %v | ratio %.2f %.2f", p(bare, 50), p(bare, 99), p(ours, 50), p(ours, 99),
		float64(p(ours, 50))/float64(p(bare, 50)), float64(p(ours, 99))/float64(p(bare, 99)))
}
