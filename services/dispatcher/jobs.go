package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
	"jetway/services/jobs/jobsapi"
)

// Job output and kill go to the session's jobs worker through the jobs
// service's own API (services/jobs/client), with the dispatcher's NATS
// identity: the worker serves requests for any tenant, so the tenant is
// the caller's, taken from its token, never from the request.

// jobsCore is a session's background jobs: the records the jobs service
// keeps (listed here) and each job's output and kill, asked of the
// session's jobs worker (below).
type jobsCore struct {
	*store
	log zerolog.Logger
}

// Jobs lists the background jobs recorded for one of the caller's
// sessions; none recorded is an empty list, not an error.
func (d *jobsCore) Jobs(ctx context.Context, p auth.Principal, session string) ([]JobInfo, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return nil, err
	}
	prefix := p.Tenant + "." + session + "."
	entries, err := d.scan(ctx, bus.BucketJobs, prefix+">")
	if err != nil {
		return nil, err
	}
	out := make([]JobInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, JobInfo{
			Job:      strings.TrimPrefix(e.Key(), prefix),
			Revision: e.Revision(),
			Updated:  e.Created(),
			Record:   asJSON(withoutHostPath(e.Value())),
		})
	}
	d.liveFigures(ctx, p.Tenant, session, out)
	return out, nil
}

// liveFigures brings the records of running jobs up to date from the
// session's jobs worker. The worker stores a job's record when the job
// starts and when it ends, not as its output grows, so a running job's
// stored line said "running for 0s · 0 B / 0 lines" for as long as it
// ran; the worker's own listing computes the figures as it answers. A
// worker that does not answer leaves the stored records, which are still
// right about everything but the figures.
func (d *jobsCore) liveFigures(ctx context.Context, tenant, session string, jobs []JobInfo) {
	running := false
	for _, j := range jobs {
		var r struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(j.Record, &r) == nil && r.Status == "running" {
			running = true
			break
		}
	}
	if !running {
		return
	}
	jc, err := d.jobsClient()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	live, err := jc.List(ctx, tenant, session)
	if err != nil {
		d.log.Debug().Err(err).Str("tenant", tenant).Str("session", session).Msg("live job figures")
		return
	}
	byID := make(map[string]jobsapi.Job, len(live))
	for _, j := range live {
		byID[j.ID] = j
	}
	for i := range jobs {
		if j, ok := byID[jobs[i].Job]; ok {
			jobs[i].Record = overlay(jobs[i].Record, j)
		}
	}
}

// overlay is a stored job record with the fields of the worker's live
// view of the job written over it (the record's own, such as its worker,
// kept), without the host path.
func overlay(record json.RawMessage, live jobsapi.Job) json.RawMessage {
	var rec map[string]json.RawMessage
	if json.Unmarshal(record, &rec) != nil {
		return record
	}
	b, err := json.Marshal(live)
	if err != nil {
		return record
	}
	var fresh map[string]json.RawMessage
	if json.Unmarshal(b, &fresh) != nil {
		return record
	}
	for k, v := range fresh {
		rec[k] = v
	}
	delete(rec, "path")
	out, err := json.Marshal(rec)
	if err != nil {
		return record
	}
	return out
}

// withoutHostPath is a job record without its "path": the output file's
// place on the jobs worker's disk, which tells a tenant the worker's
// layout and means nothing at another machine. The record's "ref" names
// the output, and GET …/jobs/{id}/output reads it.
func withoutHostPath(record []byte) []byte {
	var rec map[string]json.RawMessage
	if json.Unmarshal(record, &rec) != nil {
		return record
	}
	if _, ok := rec["path"]; !ok {
		return record
	}
	delete(rec, "path")
	b, err := json.Marshal(rec)
	if err != nil {
		return record
	}
	return b
}

// jobControlType is the event type a token's globs must admit to kill a
// job: ending the agent's work is the person's say over the session, like
// a steer.
const jobControlType = "io.jetway.steer"

type (
	// JobOutput answers GET /v1/sessions/{session}/jobs/{id}/output.
	JobOutput = api.JobOutput
	// JobOutputRequest is that route's query.
	JobOutputRequest = api.JobOutputRequest
	// JobSummary answers POST /v1/sessions/{session}/jobs/{id}/kill.
	JobSummary = api.JobSummary
)

// JobOutput reads lines of one of the caller's jobs' output: a range, the
// tail or a grep, as the jobs service offers them.
func (d *jobsCore) JobOutput(ctx context.Context, p auth.Principal, session, job string, req JobOutputRequest) (JobOutput, error) {
	if err := checkJobOutput(req); err != nil {
		return JobOutput{}, err
	}
	jr, err := d.jobRequest(ctx, p, session, job)
	if err != nil {
		return JobOutput{}, err
	}
	jc, err := d.jobsClient()
	if err != nil {
		return JobOutput{}, err
	}
	res, err := jc.Output(ctx, jobsapi.OutputRequest{JobRequest: jr, Offset: req.Offset, Limit: req.Limit, Tail: req.Tail, Grep: req.Grep})
	if err != nil {
		return JobOutput{}, jobsProblem(p.Tenant, session, job, err)
	}
	lines := res.Lines
	if lines == nil {
		lines = []string{}
	}
	return JobOutput{Lines: lines, Offset: res.Offset, Total: res.Total, More: res.More, Matched: res.Matched, Job: jobSummary(res.Job)}, nil
}

// KillJob ends one of the caller's jobs, its whole process tree, and
// returns it ended. Killing a job that already ended returns it as it is.
func (d *jobsCore) KillJob(ctx context.Context, p auth.Principal, session, job string) (JobSummary, error) {
	if err := p.MayPublish(jobControlType); err != nil {
		return JobSummary{}, problemf(http.StatusForbidden, "forbidden", "Forbidden",
			"killing a job needs a token that may steer (%s): %s", jobControlType, trimPrefix(err))
	}
	jr, err := d.jobRequest(ctx, p, session, job)
	if err != nil {
		return JobSummary{}, err
	}
	jc, err := d.jobsClient()
	if err != nil {
		return JobSummary{}, err
	}
	j, err := jc.Kill(ctx, jr.Tenant, jr.Session, jr.ID)
	if err != nil {
		return JobSummary{}, jobsProblem(p.Tenant, session, job, err)
	}
	d.log.Info().Str("tenant", p.Tenant).Str("session", session).Str("job", job).Str("status", string(j.Status)).Msg("job killed")
	return jobSummary(j), nil
}

// jobRequest checks the names and that the session has a jobs worker: a
// session never bound to one has no jobs, and asking the jobs client would
// bind it to one (the runner's business, not a reader's).
func (d *jobsCore) jobRequest(ctx context.Context, p auth.Principal, session, job string) (jobsapi.JobRequest, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return jobsapi.JobRequest{}, err
	}
	if err := events.ValidateToken("job", job); err != nil {
		return jobsapi.JobRequest{}, err
	}
	jc, err := d.jobsClient()
	if err != nil {
		return jobsapi.JobRequest{}, err
	}
	w, err := jc.Binding(ctx, p.Tenant, session)
	if err != nil {
		return jobsapi.JobRequest{}, jobsProblem(p.Tenant, session, job, err)
	}
	if w == "" {
		return jobsapi.JobRequest{}, problemf(http.StatusNotFound, "not-found", "No such job",
			"session %q of tenant %q has no jobs", session, p.Tenant)
	}
	return jobsapi.JobRequest{SessionRequest: jobsapi.SessionRequest{Tenant: p.Tenant, Session: session}, ID: job}, nil
}

// checkJobOutput refuses a request the jobs service would misread: the
// modes are exclusive and the numbers not negative.
func checkJobOutput(r JobOutputRequest) error {
	switch {
	case r.Offset < 0 || r.Limit < 0 || r.Tail < 0:
		return problem(http.StatusBadRequest, "bad-request", "Invalid output request",
			"offset, limit and tail must not be negative")
	case r.Tail > 0 && r.Grep != "":
		return problem(http.StatusBadRequest, "bad-request", "Invalid output request",
			"tail and grep are two ways to read; give one")
	case (r.Tail > 0 || r.Grep != "") && r.Offset > 0:
		return problem(http.StatusBadRequest, "bad-request", "Invalid output request",
			"offset pages a plain read; it does not go with tail or grep")
	}
	return nil
}

// jobsProblem maps a jobs service error to the problem the caller sees.
func jobsProblem(tenant, session, job string, err error) error {
	var je *jobsapi.Error
	if !errors.As(err, &je) {
		return unavailable("jobs service", err)
	}
	switch je.Code {
	case jobsapi.CodeNotFound:
		return problemf(http.StatusNotFound, "not-found", "No such job",
			"session %q of tenant %q has no job %q", session, tenant, job)
	case jobsapi.CodeBadRequest:
		return problem(http.StatusBadRequest, "bad-request", "Invalid output request", je.Message)
	case jobsapi.CodeUnavailable:
		return problemf(http.StatusServiceUnavailable, "unavailable", "Jobs worker unavailable", "%s", je.Message)
	}
	return problemf(http.StatusBadGateway, "jobs-failed", "Jobs service failed", "%s", je.Message)
}

func jobSummary(j jobsapi.Job) api.JobSummary {
	return api.JobSummary{ID: j.ID, Program: j.Program, Command: j.Summary, Status: string(j.Status),
		ExitCode: j.ExitCode, Started: j.Started, Ended: j.Ended, Lines: j.Lines, Bytes: j.Bytes,
		Foreground: j.Foreground, Line: j.Line}
}

// jobOutputParams reads ?offset=&limit=&tail=&grep=.
func jobOutputParams(r *http.Request) (JobOutputRequest, error) {
	q := r.URL.Query()
	req := JobOutputRequest{Grep: q.Get("grep")}
	for name, dst := range map[string]*int{"offset": &req.Offset, "limit": &req.Limit, "tail": &req.Tail} {
		s := q.Get(name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return req, problemf(http.StatusBadRequest, "bad-request", "Invalid "+name,
				"%s=%q: want a whole number, 0 or more", name, shortenQ(s))
		}
		*dst = n
	}
	return req, nil
}
