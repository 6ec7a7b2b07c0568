package dispatcher

import (
	"context"
	"net/http"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/micro"

	"jetway/pkg/auth"
	api "jetway/pkg/dispatcherapi"
)

// The Dispatcher's Go API, for a program that runs the dispatcher inside
// itself (jetway dev, the deploy tests): the two transports, and each
// operation of the cores as one line, so that what a Go caller gets is
// what a request over HTTP or NATS gets.

// Handler returns the HTTP API. It can be mounted on any server (jetway dev
// mounts it next to the other services); Run serves it on Config.Addr.
func (d *Dispatcher) Handler() http.Handler { return (&httpAPI{d.cores}).handler() }

// StartNATS registers the jetway-dispatcher micro service on the
// connection. Several dispatchers share the work through micro's queue group.
func (d *Dispatcher) StartNATS() (micro.Service, error) { return (&natsAPI{d.cores}).start() }

// Input publishes an io.jetway.input into one of the caller's sessions.
func (d *Dispatcher) Input(ctx context.Context, p auth.Principal, session string, req InputRequest) (Accepted, error) {
	return d.events.Input(ctx, p, session, req)
}

// Steer publishes an io.jetway.steer into one of the caller's sessions.
func (d *Dispatcher) Steer(ctx context.Context, p auth.Principal, session string, req SteerRequest) (Accepted, error) {
	return d.events.Steer(ctx, p, session, req)
}

// Resume sends an interrupted session on.
func (d *Dispatcher) Resume(ctx context.Context, p auth.Principal, session string, req ResumeRequest) (Accepted, error) {
	return d.events.Resume(ctx, p, session, req)
}

// PublishEvent publishes a CloudEvent from another system.
func (d *Dispatcher) PublishEvent(ctx context.Context, p auth.Principal, e event.Event) (Accepted, error) {
	return d.events.PublishEvent(ctx, p, e)
}

// Sessions lists the caller's sessions that have a record.
func (d *Dispatcher) Sessions(ctx context.Context, p auth.Principal) ([]SessionInfo, error) {
	return d.sessions.Sessions(ctx, p)
}

// Session reads one of the caller's session records.
func (d *Dispatcher) Session(ctx context.Context, p auth.Principal, session string) (SessionInfo, error) {
	return d.sessions.Session(ctx, p, session)
}

// SessionDetail reads what a person needs to know about one of the
// caller's sessions.
func (d *Dispatcher) SessionDetail(ctx context.Context, p auth.Principal, session string) (SessionDetail, error) {
	return d.sessions.SessionDetail(ctx, p, session)
}

// Layovers lists one of the caller's sessions' layovers.
func (d *Dispatcher) Layovers(ctx context.Context, p auth.Principal, session string) ([]api.Layover, error) {
	return d.sessions.Layovers(ctx, p, session)
}

// CancelLayover cancels one of the caller's sessions' layovers; it reports
// whether there was one.
func (d *Dispatcher) CancelLayover(ctx context.Context, p auth.Principal, session string) (bool, error) {
	return d.sessions.CancelLayover(ctx, p, session)
}

// Recovery reads one of the caller's sessions' recovery override and the
// settings in effect.
func (d *Dispatcher) Recovery(ctx context.Context, p auth.Principal, session string) (RecoveryState, error) {
	return d.sessions.Recovery(ctx, p, session)
}

// SetRecovery stores req as the session's recovery override.
func (d *Dispatcher) SetRecovery(ctx context.Context, p auth.Principal, session string, req RecoveryRequest) (RecoveryState, error) {
	return d.sessions.SetRecovery(ctx, p, session, req)
}

// ClearRecovery removes the session's recovery override.
func (d *Dispatcher) ClearRecovery(ctx context.Context, p auth.Principal, session string) (RecoveryState, error) {
	return d.sessions.ClearRecovery(ctx, p, session)
}

// Transcript reads a page of one of the caller's sessions' transcript.
func (d *Dispatcher) Transcript(ctx context.Context, p auth.Principal, session string, after uint64, limit int) (TranscriptPage, error) {
	return d.sessions.Transcript(ctx, p, session, after, limit)
}

// Jobs lists the background jobs recorded for one of the caller's sessions.
func (d *Dispatcher) Jobs(ctx context.Context, p auth.Principal, session string) ([]JobInfo, error) {
	return d.jobs.Jobs(ctx, p, session)
}

// JobOutput reads lines of one of the caller's jobs' output.
func (d *Dispatcher) JobOutput(ctx context.Context, p auth.Principal, session, job string, req JobOutputRequest) (JobOutput, error) {
	return d.jobs.JobOutput(ctx, p, session, job, req)
}

// KillJob ends one of the caller's jobs and returns it ended.
func (d *Dispatcher) KillJob(ctx context.Context, p auth.Principal, session, job string) (JobSummary, error) {
	return d.jobs.KillJob(ctx, p, session, job)
}

// Agents lists the caller's tenant's agent profiles.
func (d *Dispatcher) Agents(ctx context.Context, p auth.Principal) (AgentList, error) {
	return d.agents.Agents(ctx, p)
}

// Agent reads one of the caller's tenant's agent profiles.
func (d *Dispatcher) Agent(ctx context.Context, p auth.Principal, name string) (Agent, error) {
	return d.agents.Agent(ctx, p, name)
}

// PutAgent stores a profile as the caller's tenant's agent name.
func (d *Dispatcher) PutAgent(ctx context.Context, p auth.Principal, name string, a Agent) (Agent, error) {
	return d.agents.PutAgent(ctx, p, name, a)
}

// DeleteAgent deletes one of the caller's tenant's profiles.
func (d *Dispatcher) DeleteAgent(ctx context.Context, p auth.Principal, name string) (api.AgentDeleted, error) {
	return d.agents.DeleteAgent(ctx, p, name)
}

// Stop reads a Ground Stop switch.
func (d *Dispatcher) Stop(ctx context.Context, p auth.Principal, t StopTarget) (StopState, error) {
	return d.groundStop.Stop(ctx, p, t)
}

// SetStop turns Ground Stop on: globally (operators only), for a tenant or
// for one session.
func (d *Dispatcher) SetStop(ctx context.Context, p auth.Principal, t StopTarget, req StopRequest) (StopState, error) {
	return d.groundStop.SetStop(ctx, p, t, req)
}

// ClearStop turns Ground Stop off, with the same scopes as SetStop.
func (d *Dispatcher) ClearStop(ctx context.Context, p auth.Principal, t StopTarget) (StopState, error) {
	return d.groundStop.ClearStop(ctx, p, t)
}

// Cluster reads who does the work (operators only).
func (d *Dispatcher) Cluster(ctx context.Context, p auth.Principal) (Cluster, error) {
	return d.cluster.Cluster(ctx, p)
}

// Approvals lists the approvals waiting in one of the caller's sessions
// ("" for all of the tenant's).
func (d *Dispatcher) Approvals(ctx context.Context, p auth.Principal, session string) ([]api.Approval, error) {
	return d.approvals.Approvals(ctx, p, session)
}

// Decide takes a person's decision on an approval of the caller's session.
func (d *Dispatcher) Decide(ctx context.Context, p auth.Principal, session, id string, req DecisionRequest) (api.Approval, error) {
	return d.approvals.Decide(ctx, p, session, id, req)
}

// SignInCode makes a one-time code that signs the console in as token
// (POST /v1/signin/codes), for jetway dev to print as it starts.
func (d *Dispatcher) SignInCode(ctx context.Context, token string) (api.SignInCode, error) {
	p, err := d.gate.authenticate(token)
	if err != nil {
		return api.SignInCode{}, err
	}
	return d.signIn.CreateCode(ctx, p, token)
}
