package jobs_test

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/events"
	"jetway/pkg/tasks"
	"jetway/services/jobs"
	"jetway/services/jobs/jobsapi"
)

func (e *env) setStop(tenant, session string, on bool) {
	e.t.Helper()
	control, err := e.js.KeyValue(bg, bus.BucketControl)
	if err != nil {
		e.t.Fatal(err)
	}
	if on {
		if _, err := groundstop.Set(bg, control, tenant, session, groundstop.Record{Reason: "operator secret reason", By: "op"}); err != nil {
			e.t.Fatal(err)
		}
		return
	}
	if err := groundstop.Clear(bg, control, tenant, session); err != nil {
		e.t.Fatal(err)
	}
}

// The reproduction: a background and a foreground heartbeat kept
// writing for 15 s after the switch. Now both stop within a second, the
// foreground call's answer and both exit events say Ground Stop killed
// them (without the switch's reason, which may not be the tenant's to
// read), nothing new starts under the switch, and lifting it restarts
// nothing.
func TestGround_Stop_kills_a_sessions_background_and_foreground_commands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	sub := e.subscribe(tenant, session)
	other := e.subscribe(tenant, "s2")
	bgBeat, fgBeat, otherBeat := e.wsFile(session, "bg"), e.wsFile(session, "fg"), e.wsFile("s2", "other")

	e.start(testutil.Heartbeat(t, "bg"))
	o := req(testutil.Heartbeat(t, "other"))
	o.Session = "s2"
	if _, err := e.cli.Start(bg, o); err != nil {
		t.Fatal(err)
	}
	var fg jobsapi.StartResponse
	var fgErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := req(testutil.Heartbeat(t, "fg"))
		r.TimeoutMS, r.Run = 60_000, "r1"
		fg, fgErr = e.cli.Run(bg, r)
	}()
	testutil.Eventually(t, 15*time.Second, "both heartbeats to beat", func() bool {
		return testutil.FileSize(bgBeat) > 0 && testutil.FileSize(fgBeat) > 0 && testutil.FileSize(otherBeat) > 0
	})

	at := time.Now()
	e.setStop(tenant, session, true)
	// Measured, not asserted: how long from the switch's write to both
	// commands listed killed.
	testutil.Eventually(t, 5*time.Second, "both commands killed", func() bool {
		n := 0
		for _, j := range mustList(t, e) {
			if j.Status == tasks.Killed {
				n++
			}
		}
		return n == 2
	})
	t.Logf("both commands were killed %s after the switch was set", time.Since(at).Round(time.Millisecond))
	testutil.HeartbeatsGone(t, at, "bg", "fg")
	a := testutil.FileSize(otherBeat)
	testutil.Eventually(t, 5*time.Second, "another session's heartbeat to go on", func() bool { return testutil.FileSize(otherBeat) > a })

	wg.Wait()
	if fgErr != nil || !fg.Ended || fg.Job.Status != tasks.Killed || !strings.HasSuffix(fg.Output, jobs.GroundStopNote) {
		t.Errorf("the foreground call answered %+v, %v; want its command killed, saying Ground Stop", fg, fgErr)
	}
	got := map[uint64]events.JobExited{}
	for len(got) < 2 {
		ev, _ := sub.next()
		if x, ok := ev.Payload.(events.JobExited); ok {
			got[x.ID] = x
		}
	}
	for id, x := range got {
		n, _ := events.Notice(x)
		if x.Status != events.StatusKilled || !strings.Contains(n, "killed by Ground Stop") || strings.Contains(n, "secret reason") {
			t.Errorf("job %d's exit notice = %q; want killed by Ground Stop, without the switch's reason", id, n)
		}
	}

	_, err := e.cli.Start(bg, req("true"))
	if ae := wantCode(t, err, jobsapi.CodeConflict, jobsapi.ErrConflict); !strings.Contains(ae.Message, "Ground Stop") {
		t.Errorf("a start under the switch: %q", ae.Message)
	}

	e.setStop(tenant, session, false)
	testutil.EventuallyNil(t, 10*time.Second, "a start once the switch is lifted", func() error {
		_, err := e.cli.Run(bg, req("true"))
		return err
	})
	for _, j := range mustList(t, e) {
		if j.Status == tasks.Running {
			t.Errorf("job %s runs after the switch was lifted: %s", j.ID, j.Line)
		}
	}
	for _, f := range []string{"bg", "fg"} {
		if n := testutil.ProcessesWith(testutil.HeartbeatMarker(t, f)); len(n) > 0 {
			t.Errorf("heartbeat %s runs again after the switch was lifted: pids %v", f, n)
		}
	}
	if len(other.ch) != 0 {
		t.Error("another session's job ended")
	}
}

// wsFile is the path of a file in a session's workspace.
func (e *env) wsFile(session, name string) string {
	return filepath.Join(e.root, tenant, session, name)
}

func mustList(t *testing.T, e *env) []jobsapi.Job {
	t.Helper()
	js, err := e.cli.List(bg, tenant, session)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// A sub-agent's commands run under its own session; its root's switch
// covers it. The runner sends the lineage with each start, and the worker
// kills by it.
func TestGround_Stop_of_a_root_session_kills_its_sub_agents_commands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	child, unrelated := e.wsFile("s1-a1-a1", "child"), e.wsFile("s9", "unrelated")
	r := req(testutil.Heartbeat(t, "child"))
	r.Session, r.Lineage = "s1-a1-a1", []string{"s1", "s1-a1"}
	if _, err := e.cli.Start(bg, r); err != nil {
		t.Fatal(err)
	}
	u := req(testutil.Heartbeat(t, "unrelated"))
	u.Session = "s9"
	if _, err := e.cli.Start(bg, u); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "both heartbeats to beat", func() bool {
		return testutil.FileSize(child) > 0 && testutil.FileSize(unrelated) > 0
	})
	at := time.Now()
	e.setStop(tenant, "s1", true)
	testutil.HeartbeatsGone(t, at, "child")
	a := testutil.FileSize(unrelated)
	testutil.Eventually(t, 5*time.Second, "the unrelated session's heartbeat to go on", func() bool { return testutil.FileSize(unrelated) > a })

	// The worker remembers the lineage: a later call that does not send
	// it is refused as well.
	r = req("true")
	r.Session = "s1-a1-a1"
	_, err := e.cli.Start(bg, r)
	wantCode(t, err, jobsapi.CodeConflict, jobsapi.ErrConflict)
}
