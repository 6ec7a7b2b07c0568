package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/control/sessionrec"
	"jetway/pkg/workspace"
	"jetway/services/jobs/jobsapi"
)

// A run that is no longer its session's live run — its runner was frozen
// or cut off while another recovered the session — starts no command, in
// the foreground or the background, and writes no file; the refusal says
// why, and the run the session record names starts its commands as before.
func TestA_run_that_is_no_longer_the_session_s_live_run_cannot_start_a_command(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	kv, err := bus.OpenBucket(ctx, e.js, bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := sessionrec.Put(ctx, kv, sessionrec.Record{Tenant: tenant, Session: session, State: sessionrec.StateRunning, Run: "r-old", Runner: "r1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	fenced := func(run, command string) jobsapi.StartRequest {
		r := req(command)
		r.Fence, r.Run = run, run
		return r
	}
	live, err := e.cli.Run(bg, fenced("r-old", "echo live"))
	if err != nil || !live.Ended {
		t.Fatalf("the live run's command: %+v, %v", live, err)
	}
	// The job's record keeps the run it was started for: the evidence the
	// chaos checker holds against the session's run sequence.
	jobsKV, err := bus.OpenBucket(ctx, e.js, bus.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, 10*time.Second, "the live run's job recorded with its fence", func() error {
		keys, err := jobsKV.ListKeys(ctx)
		if err != nil {
			return err
		}
		for k := range keys.Keys() {
			ent, err := jobsKV.Get(ctx, k)
			if err != nil {
				return err
			}
			var rec struct {
				ID      string    `json:"id"`
				Fence   string    `json:"fence"`
				Started time.Time `json:"started"`
			}
			if err := json.Unmarshal(ent.Value(), &rec); err != nil {
				return err
			}
			if rec.ID == live.Job.ID {
				if rec.Fence != "r-old" || rec.Started.IsZero() {
					return fmt.Errorf("record %s: fence %q, started %v; want r-old and a start", k, rec.Fence, rec.Started)
				}
				return nil
			}
		}
		return errors.New("no record of job " + live.Job.ID)
	})

	// Another runner recovers the session as run r-new.
	if _, err := sessionrec.Put(ctx, kv, sessionrec.Record{Tenant: tenant, Session: session, State: sessionrec.StateRunning, Run: "r-new", Runner: "r2"}, rev); err != nil {
		t.Fatal(err)
	}
	_, err = e.cli.Run(bg, fenced("r-old", "echo stale"))
	if !errors.Is(err, jobsapi.ErrConflict) {
		t.Fatalf("the stale run's foreground command: %v, want a conflict", err)
	}
	for _, want := range []string{"r-old", "no longer", "live run", "run r-new on runner r2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if _, err := e.cli.Start(bg, fenced("r-old", "sleep 100")); !errors.Is(err, jobsapi.ErrConflict) {
		t.Fatalf("the stale run's background job: %v, want a conflict", err)
	}
	stale := jobsapi.SessionRequest{Tenant: tenant, Session: session, Fence: "r-old"}
	if _, err := e.cli.WriteFor(bg, stale, workspace.WriteRequest{Path: "stale.txt", Content: "x"}); !errors.Is(err, jobsapi.ErrConflict) {
		t.Fatalf("the stale run's write_file: %v, want a conflict", err)
	}
	if jobs, err := e.cli.List(bg, tenant, session); err != nil || len(jobs) != 1 {
		t.Fatalf("jobs of the session: %d (%v), want only the live run's one", len(jobs), err)
	}
	if res, err := e.cli.Run(bg, fenced("r-new", "echo recovered")); err != nil || !res.Ended {
		t.Fatalf("the recovering run's command: %+v, %v", res, err)
	}
}
