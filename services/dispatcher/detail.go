package dispatcher

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/control/sessionrec"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
	jobsclient "jetway/services/jobs/client"
)

// SessionDetail is the answer of GET /v1/sessions/{session}.
type SessionDetail = api.SessionDetail

// DefaultAgent is the agent profile a session runs with until an event
// binds it to another (pkg/control/agents).
const DefaultAgent = agents.DefaultName

// jobsAnswerWithin bounds how long a detail waits for the session's jobs
// worker: a worker that is down must not make the session unreadable.
const jobsAnswerWithin = 3 * time.Second

// SessionDetail reads what a person needs to know about one of the
// caller's sessions: its state, the Ground Stop switches that hold it, the
// events waiting for it, its running jobs, layovers and recovery rule. A
// session with no record and nothing waiting is not found, as on the other
// session routes.
func (d *sessionsCore) SessionDetail(ctx context.Context, p auth.Principal, session string) (SessionDetail, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return SessionDetail{}, err
	}
	sr, err := d.readRecord(ctx, p.Tenant, session)
	if err != nil {
		return SessionDetail{}, err
	}
	pending, err := d.pendingEvents(ctx, p.Tenant, session)
	if err != nil {
		return SessionDetail{}, err
	}
	if !sr.Found && pending == 0 {
		return SessionDetail{}, noSession(p.Tenant, session)
	}
	out := SessionDetail{
		SessionInfo:   sessionInfo(session, sr),
		State:         sr.Rec.State,
		Cause:         sr.Rec.Cause,
		Reason:        sr.Rec.Reason,
		Since:         sr.Rec.Since,
		Runs:          sr.Rec.Runs,
		Agent:         sr.Rec.Agent,
		PendingEvents: pending,
		Jobs:          []api.JobSummary{},
	}
	if !sr.Found {
		out.SessionInfo.Record = nil
	}
	if out.State == "running" {
		out.Run = sr.Rec.Run
	}
	if out.Agent == "" {
		out.Agent = DefaultAgent
	}
	if out.GroundStop, err = d.groundStop.covering(ctx, p, p.Tenant, session, sr.Rec.Lineage...); err != nil {
		return SessionDetail{}, err
	}
	if out.Layovers, err = d.Layovers(ctx, p, session); err != nil {
		return SessionDetail{}, err
	}
	if out.Waiting, err = waitingApprovals(ctx, d.store, p.Tenant, session); err != nil {
		return SessionDetail{}, err
	}
	if waitsForAPerson(out.State, sr.Rec.Run, out.Waiting) {
		out.State = "waiting"
	}
	if out.Recovery, err = d.recoveryOf(ctx, p.Tenant, session, sr); err != nil {
		return SessionDetail{}, err
	}
	out.Jobs, out.JobsError = d.runningJobs(ctx, p.Tenant, session)
	out.MCP = d.mcpStates(ctx, p.Tenant, session, sr.Rec)
	if out.Children, err = d.children(ctx, p.Tenant, sr.Rec); err != nil {
		return SessionDetail{}, err
	}
	if len(sr.Rec.Lineage) > 0 {
		out.Parent, out.Root = sr.Rec.Parent(), sr.Rec.Root()
	}
	return out, nil
}

// children reads the state of each sub-agent a session started from the
// sub-agent's own record.
func (d *sessionsCore) children(ctx context.Context, tenant string, rec sessionrec.Record) ([]api.ChildSummary, error) {
	out := make([]api.ChildSummary, 0, len(rec.Children))
	for _, ch := range rec.Children {
		cr, err := d.readRecord(ctx, tenant, ch.Session)
		if err != nil {
			return nil, err
		}
		c := api.ChildSummary{Session: ch.Session, Agent: ch.Agent, State: cr.Rec.State, Since: cr.Rec.Since,
			Number: ch.Number, Runs: cr.Rec.Runs, Reason: cr.Rec.Reason, Started: ch.Started}
		if c.Agent == "" {
			c.Agent = DefaultAgent
		}
		if c.State == sessionrec.StateRunning {
			c.Run = cr.Rec.Run
		}
		out = append(out, c)
	}
	return out, nil
}

// covering lists the Ground Stop switches that are on and cover
// tenant/session (groundstop.Covering: with lineage, a sub-agent's
// ancestors' too), widest first, read from the bucket.
func (d *stopCore) covering(ctx context.Context, p auth.Principal, tenant, session string, lineage ...string) ([]StopSwitch, error) {
	kv, err := d.controlBucket(ctx)
	if err != nil {
		return nil, err
	}
	scopes := groundstop.Covering(tenant, session, lineage)
	type got struct {
		rec groundstop.Record
		on  bool
		err error
	}
	res := make([]got, len(scopes))
	var wg sync.WaitGroup
	for i, s := range scopes {
		wg.Go(func() {
			res[i].rec, res[i].on, res[i].err = groundstop.Get(ctx, kv, s.Tenant, s.Session)
		})
	}
	wg.Wait()
	out := []StopSwitch{}
	for i, r := range res {
		if r.err != nil {
			return nil, unavailable("read Ground Stop", r.err)
		}
		if r.on {
			out = append(out, switchOf(p, groundstop.Covered{Scope: scopes[i], Record: r.rec}))
		}
	}
	return out, nil
}

// coveringSession is covering with the session's lineage read from its
// record, for the callers that have not read it.
func (d *stopCore) coveringSession(ctx context.Context, p auth.Principal, tenant, session string) ([]StopSwitch, error) {
	sr, err := d.readRecord(ctx, tenant, session)
	if err != nil {
		return nil, err
	}
	return d.covering(ctx, p, tenant, session, sr.Rec.Lineage...)
}

// switchOf is a switch that is on as p may read it: of the global switch a
// tenant learns when it was set, not by whom or why.
func switchOf(p auth.Principal, c groundstop.Covered) StopSwitch {
	sw := StopSwitch{Scope: c.Scope.Name, Since: c.Record.At, By: c.Record.By, Reason: c.Record.Reason}
	if c.Scope.Name == "ancestor" {
		sw.Session = c.Scope.Session
	}
	if c.Scope.Name == "global" && !p.Operator {
		sw.By, sw.Reason = "", ""
	}
	return sw
}

// pendingEvents counts the session's events still in its work shard: a
// runner acks an event only once the turn that hands it to the model is
// recorded (and the shard lets it go once acked and logged, a moment
// later), so what is there has not reached the model.
func (d *sessionsCore) pendingEvents(ctx context.Context, tenant, session string) (int, error) {
	st, p, err := d.workStreamOf(ctx, tenant, session)
	if err != nil || st == nil {
		return 0, err
	}
	filter := bus.SessionFilter(p, tenant, session)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, unavailable("count pending events", err)
	}
	n := 0
	for subj, c := range info.State.Subjects {
		if strings.HasSuffix(subj, "."+tenant+"."+session) {
			n += int(c)
		}
	}
	return n, nil
}

// workStreamOf opens the work shard of a session's partition, and says
// the partition; nil when the shards do not exist yet.
func (d *store) workStreamOf(ctx context.Context, tenant, session string) (jetstream.Stream, int, error) {
	d.kvMu.Lock()
	l := d.layout
	d.kvMu.Unlock()
	if l.Partitions == 0 {
		if st, err := d.stream(ctx, bus.WorkStream(0)); err != nil || st == nil {
			return nil, 0, err
		}
		read, err := bus.ReadLayout(ctx, d.js)
		if err != nil {
			return nil, 0, unavailable("read the work layout", err)
		}
		d.kvMu.Lock()
		d.layout, l = read, read
		d.kvMu.Unlock()
	}
	p := bus.PartitionFor(tenant, session, l.Partitions)
	st, err := d.stream(ctx, l.Stream(p))
	return st, p, err
}

// stream opens a stream once and caches it; (nil, nil) when it does not
// exist.
func (d *store) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	d.kvMu.Lock()
	defer d.kvMu.Unlock()
	if st, ok := d.streams[name]; ok {
		return st, nil
	}
	st, err := d.js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, nil
	case err != nil:
		return nil, unavailable("open stream "+name, err)
	}
	d.streams[name] = st
	return st, nil
}

// jobsClient is the jobs service's client on the dispatcher's connection,
// made at first use.
func (d *store) jobsClient() (*jobsclient.Client, error) {
	d.jobsOnce.Do(func() {
		d.jobs, d.jobsErr = jobsclient.New(jobsclient.Config{NC: d.nc, Timeout: 10 * time.Second})
	})
	if d.jobsErr != nil {
		return nil, unavailable("jobs client", d.jobsErr)
	}
	return d.jobs, nil
}

// runningJobs asks the session's jobs worker for its running jobs. A
// session never bound to a worker has none; a worker that does not answer
// is reported as the reason, not as a failed detail.
func (d *sessionsCore) runningJobs(ctx context.Context, tenant, session string) ([]api.JobSummary, string) {
	jc, err := d.jobsClient()
	if err != nil {
		return []api.JobSummary{}, err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, jobsAnswerWithin)
	defer cancel()
	jobs, err := jc.List(ctx, tenant, session)
	if err != nil {
		return []api.JobSummary{}, err.Error()
	}
	out := []api.JobSummary{}
	for _, j := range jobs {
		if j.Ended.IsZero() {
			out = append(out, jobSummary(j))
		}
	}
	return out, ""
}

// waitsForAPerson reports whether a session in state waits for a person:
// idle with an approval pending, or running a run that is itself held in
// a call until a person answers (an MCP server's question). A run that
// started after an earlier run's approval is not waiting for it.
func waitsForAPerson(state, run string, pending []api.Approval) bool {
	for _, a := range pending {
		if state == "idle" || (state == "running" && a.Run == run) {
			return true
		}
	}
	return false
}
