package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/services/jobs"
	jobsclient "jetway/services/jobs/client"
	"jetway/services/jobs/jobsapi"
)

// startJobsWorker serves a real jobs worker on the fixture's bus until the
// test ends.
func (f *fixture) startJobsWorker(t *testing.T) {
	t.Helper()
	w, err := jobs.New(jobs.Config{NC: f.nc, WorkerID: "w1", Root: t.TempDir(), Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("jobs worker: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("jobs worker did not stop")
		}
	})
	select {
	case <-w.Ready():
	case err := <-done:
		t.Fatalf("jobs worker ended before ready: %v", err)
	case <-time.After(waitFor):
		t.Fatal("jobs worker not ready")
	}
}

// startJob starts a background job in default/s1 as a runner would.
func (f *fixture) startJob(t *testing.T, command string) jobsapi.Job {
	t.Helper()
	jc, err := jobsclient.New(jobsclient.Config{NC: f.nc})
	if err != nil {
		t.Fatal(err)
	}
	res, err := jc.Start(context.Background(), jobsapi.StartRequest{
		SessionRequest: jobsapi.SessionRequest{Tenant: "default", Session: "s1"}, Command: command})
	if err != nil {
		t.Fatalf("start %q: %v", command, err)
	}
	return res.Job
}

var sleeperPID = regexp.MustCompile(`sleeper (\d+)`)

func alive(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestJobOutput_and_kill_through_the_dispatcher_reach_the_real_job_of_the_callers_session_only(t *testing.T) {
	f := newFixture(t)
	f.startJobsWorker(t)
	job := f.startJob(t, `echo build line one; echo build line two; sleep 300 & echo "sleeper $!"; wait`)
	base := fmt.Sprintf("/v1/sessions/s1/jobs/%s", job.ID)

	var out JobOutput
	testutil.Eventually(t, waitFor, "the job to print its sleeper's pid", func() bool {
		out = decode[JobOutput](t, f.do("GET", base+"/output", tokUser, nil), http.StatusOK)
		return out.Total >= 3
	})

	if len(out.Lines) != 3 || out.Lines[0] != "build line one" || out.Lines[1] != "build line two" || out.Offset != 1 {
		t.Fatalf("output = %+v, want the job's three lines from line 1", out)
	}
	m := sleeperPID.FindStringSubmatch(out.Lines[2])
	if m == nil {
		t.Fatalf("line 3 = %q, want the sleeper's pid", out.Lines[2])
	}
	pid, _ := strconv.Atoi(m[1])
	if !alive(pid) || out.Job.Status != "running" {
		t.Fatalf("the job's sleeper %d is not running before the kill (status %s)", pid, out.Job.Status)
	}

	tail := decode[JobOutput](t, f.do("GET", base+"/output?tail=1", tokUser, nil), http.StatusOK)
	if len(tail.Lines) != 1 || tail.Lines[0] != out.Lines[2] {
		t.Errorf("tail=1 = %q", tail.Lines)
	}
	grep := decode[JobOutput](t, f.do("GET", base+"/output?grep=line%20t", tokUser, nil), http.StatusOK)
	if grep.Matched != 1 || len(grep.Lines) != 1 || grep.Lines[0] != "2: build line two" {
		t.Errorf("grep = %+v, want line 2 alone", grep)
	}
	page := decode[JobOutput](t, f.do("GET", base+"/output?offset=2&limit=1", tokUser, nil), http.StatusOK)
	if len(page.Lines) != 1 || page.Lines[0] != "build line two" || !page.More {
		t.Errorf("offset=2&limit=1 = %+v", page)
	}
	c := f.client(t, tokUser)
	viaClient, err := c.JobOutput(context.Background(), "s1", job.ID, JobOutputRequest{Grep: "two"})
	if err != nil || viaClient.Matched != 1 {
		t.Errorf("client grep = %+v (%v)", viaClient, err)
	}
	f.serveNATS(t)
	resp := natsRequest(t, f, SubjectJob, tokUser, fmt.Sprintf(`{"session":"s1","job":%q,"tail":1}`, job.ID))
	if !strings.Contains(string(resp.Data), out.Lines[2]) {
		t.Errorf("NATS output: %s", resp.Data)
	}
	problemOf(t, f.do("GET", base+"/output?tail=1&grep=x", tokUser, nil), http.StatusBadRequest)
	problemOf(t, f.do("GET", base+"/output?grep=(", tokUser, nil), http.StatusBadRequest)

	// The session's detail shows it running.
	if _, err := f.sessions().Create(context.Background(), "default.s1", []byte(`{"state":"idle"}`)); err != nil {
		t.Fatal(err)
	}
	d := decode[SessionDetail](t, f.do("GET", "/v1/sessions/s1", tokUser, nil), http.StatusOK)
	if len(d.Jobs) != 1 || d.Jobs[0].ID != job.ID || d.Jobs[0].Status != "running" || d.JobsError != "" {
		t.Fatalf("detail jobs = %+v (%q), want job %s running", d.Jobs, d.JobsError, job.ID)
	}

	// Another tenant reaches neither its output nor its kill switch; a
	// token that may not steer may not kill.
	problemOf(t, f.do("GET", base+"/output", tokAcme, nil), http.StatusNotFound)
	problemOf(t, f.do("POST", base+"/kill", tokAcme, nil), http.StatusForbidden)
	problemOf(t, f.do("POST", base+"/kill", tokAcmeAdmin, nil), http.StatusNotFound)
	if !alive(pid) {
		t.Fatal("a refused kill killed the job")
	}
	problemOf(t, f.do("GET", "/v1/sessions/s1/jobs/999/output", tokUser, nil), http.StatusNotFound)

	killed, err := c.KillJob(context.Background(), "s1", job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if killed.ID != job.ID || killed.Status != "killed" || killed.Ended.IsZero() {
		t.Fatalf("kill answered %+v, want the job killed", killed)
	}
	testutil.Eventually(t, waitFor, "the job's sleeper to be gone", func() bool { return !alive(pid) })
	after := decode[JobOutput](t, f.do("GET", base+"/output", tokUser, nil), http.StatusOK)
	if after.Job.Status != "killed" || len(after.Lines) < 3 {
		t.Fatalf("output after the kill = %+v, want the lines kept and the job killed", after)
	}
}
