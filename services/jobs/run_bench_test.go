package jobs_test

import (
	"sort"
	"testing"
	"time"

	"jetway/services/jobs/jobsapi"
)

// BenchmarkRun times client Run calls of `true` against a worker in this
// process: the command confined (the worker's default), answered after it
// ended. It reports the p50 and p99 of a call.
func BenchmarkRun(b *testing.B) {
	e := newEnv(b)
	e.startWorker("w1")
	r := jobsapi.StartRequest{SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session}, Command: "true", TimeoutMS: 60_000}
	for range 20 { // warm: the workspace, the rule set, the view
		if _, err := e.cli.Run(bg, r); err != nil {
			b.Fatal(err)
		}
	}
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		res, err := e.cli.Run(bg, r)
		if err != nil || !res.Ended {
			b.Fatalf("run: %+v %v", res, err)
		}
		d = append(d, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkStart times client Start calls of `true` (answered once the
// command started), each followed by a wait for its end, against a worker
// in this process, and reports the p50 and p99 of a Start.
func BenchmarkStart(b *testing.B) {
	e := newEnv(b)
	e.startWorker("w1")
	r := jobsapi.StartRequest{SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session}, Command: "true"}
	d := make([]time.Duration, 0, b.N)
	for i := range b.N + 20 { // the first 20 warm the session up
		t0 := time.Now()
		res, err := e.cli.Start(bg, r)
		if err != nil {
			b.Fatalf("start: %v", err)
		}
		if i >= 20 {
			d = append(d, time.Since(t0))
		}
		if _, err := e.cli.Status(bg, tenant, session, res.Job.ID, time.Minute); err != nil {
			b.Fatalf("status: %v", err)
		}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, "p99-ms")
}
