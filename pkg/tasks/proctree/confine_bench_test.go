package proctree

import (
	"os/exec"
	"sort"
	"testing"
	"time"
)

// benchmarkStart times starting `/bin/sh -c true` and waiting for its end,
// b.N times, and reports the p50 and p99 of a start to end.
func benchmarkStart(b *testing.B, lim Limits, c func(dir string) *Confinement) {
	benchmarkStartOn(b, Config{Grace: 200 * time.Millisecond}, lim, c)
}

func benchmarkStartOn(b *testing.B, cfg Config, lim Limits, c func(dir string) *Confinement) {
	h, err := NewHost(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.Close)
	dir := b.TempDir()
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command("/bin/sh", "-c", "true")
		cmd.Dir = dir
		cmd.Env = MinimalEnv()
		var conf *Confinement
		if c != nil {
			conf = c(dir)
		}
		t0 := time.Now()
		tr, err := h.StartConfined(cmd, lim, conf)
		if err != nil {
			b.Fatal(err)
		}
		if err := tr.Wait(); err != nil {
			b.Fatalf("run %d: %v", i, err)
		}
		d = append(d, time.Since(t0))
		tr.Close()
	}
	b.StopTimer()
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, "p99-ms")
}

func confinedTo(dir string) *Confinement {
	c := SystemConfinement()
	c.ReadWrite = []string{dir}
	return &c
}

func BenchmarkStart_plain(b *testing.B) { benchmarkStart(b, Limits{}, nil) }

func BenchmarkStart_shim_with_limits(b *testing.B) {
	benchmarkStart(b, Limits{Memory: 2 << 30, Processes: 1024, CPUTime: time.Hour}, nil)
}

func BenchmarkStart_confined_with_limits(b *testing.B) {
	if LandlockABI() < MinLandlockABI {
		b.Skip("no Landlock")
	}
	benchmarkStart(b, Limits{Memory: 2 << 30, Processes: 1024, CPUTime: time.Hour}, confinedTo)
}

// The confinement alone (the helper, Landlock, seccomp, the view), and
// without the view, to tell its mounts' share.
func BenchmarkStart_confined(b *testing.B) {
	if LandlockABI() < MinLandlockABI {
		b.Skip("no Landlock")
	}
	benchmarkStart(b, Limits{}, confinedTo)
}

func BenchmarkStart_confined_without_view(b *testing.B) {
	if LandlockABI() < MinLandlockABI {
		b.Skip("no Landlock")
	}
	benchmarkStartOn(b, Config{Grace: 200 * time.Millisecond, NoView: true}, Limits{}, confinedTo)
}
