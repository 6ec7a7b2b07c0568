package bench

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// spin burns CPU on this goroutine until the process has used want more
// of it, or the deadline passes.
func spin(t *testing.T, want time.Duration) {
	t.Helper()
	start, err := processCPU()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	x := 0
	for {
		for i := range 100_000 {
			x ^= i * 31
		}
		now, err := processCPU()
		if err != nil {
			t.Fatal(err)
		}
		if now-start >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process's CPU moved %v in 10 s of spinning, want %v", now-start, want)
		}
	}
}

func TestCPU_clock_counts_the_work_this_process_did_and_the_cores_it_kept_busy(t *testing.T) {
	clock := startCPU()
	spin(t, 50*time.Millisecond)
	span, err := clock.stop()
	if err != nil {
		t.Fatal(err)
	}
	if span.cpu < 50*time.Millisecond {
		t.Fatalf("cpu = %v after spinning 50 ms of it", span.cpu)
	}
	// Busy, but never more cores than the machine has.
	if c := span.cores(); c <= 0 || c > float64(runtime.NumCPU())+0.5 {
		t.Fatalf("cores = %v over %v of CPU in %v on %d CPUs", c, span.cpu, span.wall, runtime.NumCPU())
	}
	if got, want := span.perItem(10), float64(span.cpu.Microseconds())/10; got != want {
		t.Fatalf("perItem(10) = %v µs, want %v", got, want)
	}
}

func TestCPU_per_event_against_another_server_says_why_it_has_no_value(t *testing.T) {
	e := &env{cfg: Config{Progress: func(string) {}}}
	e.cpuPerEvent(cpuSpan{cpu: time.Second, wall: time.Second}, nil, 1000)
	if len(e.results) != 1 {
		t.Fatalf("results = %v", e.results)
	}
	r := e.results[0]
	if r.Value != nil || !strings.Contains(r.Note, "--nats") {
		t.Fatalf("figure with no embedded server = %+v, want no value and the reason", r)
	}
}
