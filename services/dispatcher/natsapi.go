package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"jetway/pkg/auth"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
)

// NATS API subjects (see pkg/dispatcherapi for each one's bodies).
const (
	SubjectInput      = api.SubjectInput
	SubjectSteer      = api.SubjectSteer
	SubjectEvent      = api.SubjectEvent
	SubjectSessions   = api.SubjectSessions
	SubjectJobs       = api.SubjectJobs
	SubjectStop       = api.SubjectStop
	SubjectRecovery   = api.SubjectRecovery
	SubjectTranscript = api.SubjectTranscript
	SubjectJob        = api.SubjectJob
)

// natsAPI is the NATS micro transport: each endpoint reads its request
// into a core's call, as httpAPI does for a route.
type natsAPI struct {
	*cores
}

// NATSRequest is the body of the NATS API requests that name a session.
type NATSRequest = api.NATSRequest

// natsOp is one endpoint's operation: the request read into a core's
// call, for a caller the gate has let through.
type natsOp func(context.Context, auth.Principal, micro.Request) (any, error)

// start registers the jetway-dispatcher micro service on the connection
// (Dispatcher.StartNATS). Several dispatchers share the work through
// micro's queue group.
func (d *natsAPI) start() (micro.Service, error) {
	svc, err := micro.AddService(d.store.nc, micro.Config{
		Name:        ServiceName,
		Version:     semver(d.cfg.Version),
		Metadata:    map[string]string{"build": d.cfg.Version},
		Description: "jetway front door: input, steer, CloudEvents, sessions, transcripts, jobs, recovery policy, agent profiles, Ground Stop",
	})
	if err != nil {
		return nil, fmt.Errorf("dispatcher: start NATS API: %w", err)
	}
	if err := d.addEndpoints(svc); err != nil {
		_ = svc.Stop() // the endpoint that did not start is the error to report
		return nil, err
	}
	return svc, nil
}

// ops maps each endpoint of dispatcherapi.Endpoints to its operation.
func (d *natsAPI) ops() map[string]natsOp {
	return map[string]natsOp{
		"input":      d.natsInput,
		"steer":      d.natsSteer,
		"event":      d.natsEvent,
		"sessions":   d.natsSessions,
		"jobs":       d.natsJobs,
		"stop":       d.natsStop,
		"recovery":   d.natsRecovery,
		"transcript": d.natsTranscript,
		"job":        d.natsJob,
		"agents":     d.natsAgents,
		"cluster":    d.natsCluster,
		"approvals":  d.natsApprovals,
	}
}

// addEndpoints adds exactly the endpoints dispatcherapi.Endpoints names,
// each twice: on jetway.api.<name> and as a tenant account reaches it.
func (d *natsAPI) addEndpoints(svc micro.Service) error {
	ops := d.ops()
	if len(ops) != len(api.Endpoints) {
		return fmt.Errorf("dispatcher: %d NATS endpoints, but dispatcherapi.Endpoints lists %d", len(ops), len(api.Endpoints))
	}
	g := svc.AddGroup(APISubjectPrefix)
	for _, name := range api.Endpoints {
		fn, ok := ops[name]
		if !ok {
			return fmt.Errorf("dispatcher: NATS endpoint %s has no handler", name)
		}
		if err := g.AddEndpoint(name, d.natsHandler(name, fn)); err != nil {
			return fmt.Errorf("dispatcher: add NATS endpoint %s: %w", name, err)
		}
		// The same endpoint as a tenant account reaches it: its import maps
		// the tenant's jetway.api.<name> to jetway.api.<tenant>.<name>, so
		// the subject says which tenant asked and the server routes the
		// reply back into that account, never onto a subject of JETWAY.
		if err := svc.AddEndpoint("tenant_"+name, d.natsHandler(name, fn),
			micro.WithEndpointSubject(api.TenantSubject("*", name))); err != nil {
			return fmt.Errorf("dispatcher: add NATS endpoint %s for tenant accounts: %w", name, err)
		}
	}
	return nil
}

// subjectTenant is the tenant a request came from when it arrived through
// a tenant account's import (jetway.api.<tenant>.<name>), else "".
func subjectTenant(subject string) string {
	rest, ok := strings.CutPrefix(subject, APISubjectPrefix+".")
	if !ok {
		return ""
	}
	tenant, _, ok := strings.Cut(rest, ".")
	if !ok {
		return ""
	}
	return tenant
}

// sameTenant refuses a token of another tenant than the account the
// request came through: the account is where the request came from, the
// token what it may do there. Operators keep their Ground Stop and cluster
// views from any account.
func sameTenant(p auth.Principal, name, subject string) error {
	tenant := subjectTenant(subject)
	if tenant == "" || tenant == p.Tenant {
		return nil
	}
	if p.Operator && (name == "stop" || name == "cluster") {
		return nil
	}
	return fmt.Errorf("%w: a token of tenant %q may not act through tenant %q's NATS account", auth.ErrForbidden, p.Tenant, tenant)
}

// semverRE is the SemVer 2.0 shape micro insists on.
var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// semver returns v without a leading "v" when it is SemVer, else 0.0.0: a
// dev build ("dev", a git describe) must not keep the service from
// starting. The build string itself travels in the service metadata.
func semver(v string) string {
	v = strings.TrimPrefix(v, "v")
	if semverRE.MatchString(v) {
		return v
	}
	return "0.0.0"
}

// natsHeaderCarrier reads trace headers case-insensitively: NATS header
// names are case-sensitive, while clients spell traceparent every which way.
type natsHeaderCarrier micro.Headers

func (c natsHeaderCarrier) Get(key string) string {
	for k, v := range c {
		if strings.EqualFold(k, key) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}
func (c natsHeaderCarrier) Set(key, value string) { c[key] = []string{value} }
func (c natsHeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// natsHandler is one endpoint as micro calls it: traced, counted and
// timed, answered with the operation's JSON or with the problem it met.
func (d *natsAPI) natsHandler(name string, fn natsOp) micro.HandlerFunc {
	route := APISubjectPrefix + "." + name
	return func(req micro.Request) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ctx = propagation.TraceContext{}.Extract(ctx, natsHeaderCarrier(req.Headers()))
		ctx = context.WithValue(ctx, remoteParentKey{}, trace.SpanContextFromContext(ctx).IsRemote())
		ctx, span := d.tracer.Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()

		status := http.StatusOK
		defer func() {
			span.SetAttributes(attribute.Int("jetway.status", status))
			d.metrics.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
			d.metrics.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}()

		res, err := d.call(ctx, name, fn, req)
		if err != nil {
			status = d.refuse(req, route, err)
			return
		}
		if _, ok := res.(Accepted); ok {
			status = http.StatusAccepted
		}
		_ = req.RespondJSON(res)
	}
}

// call lets the request through the gate, then checks what the endpoint
// name and the subject it came on require, and only then runs fn.
func (d *natsAPI) call(ctx context.Context, name string, fn natsOp, req micro.Request) (any, error) {
	p, err := d.gate.authenticate(auth.BearerToken(natsHeaderCarrier(req.Headers()).Get("Authorization")))
	if err != nil {
		return nil, err
	}
	if err := sameTenant(p, name, req.Subject()); err != nil {
		return nil, err
	}
	if name != "stop" && name != "cluster" {
		if err := needsTenant(p); err != nil {
			return nil, err
		}
	}
	if int64(len(req.Data())) > d.cfg.MaxBodyBytes {
		return nil, problemf(http.StatusRequestEntityTooLarge, "too-large", "Request body too large",
			"the body is over the %d byte limit", d.cfg.MaxBodyBytes)
	}
	return fn(ctx, p, req)
}

// refuse answers err as a micro error whose code is the HTTP status and
// whose data is the problem+json body, counts and logs it, and returns
// the status.
func (d *natsAPI) refuse(req micro.Request, route string, err error) int {
	pr := toProblem(err)
	d.metrics.refused.WithLabelValues(pr.Slug()).Inc()
	d.log.Info().Str("subject", route).Int("status", pr.Status).Str("problem", pr.Slug()).
		Str("detail", pr.Detail).Msg("request refused")
	out := *pr
	out.Instance = route
	body, _ := json.Marshal(out)
	_ = req.Error(strconv.Itoa(pr.Status), pr.Title, body,
		micro.WithHeaders(micro.Headers{"Content-Type": []string{ContentTypeProblem}}))
	return pr.Status
}

func decodeNATS(req micro.Request, optional bool) (NATSRequest, error) {
	var r NATSRequest
	data := req.Data()
	if optional && len(strings.TrimSpace(string(data))) == 0 {
		return r, nil
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, problemf(http.StatusBadRequest, "bad-request", "Malformed JSON body", "%v", err)
	}
	return r, nil
}

func (d *natsAPI) natsInput(ctx context.Context, p auth.Principal, req micro.Request) (any, error) {
	r, err := decodeNATS(req, false)
	if err != nil {
		return nil, err
	}
	return d.events.Input(ctx, p, r.Session, InputRequest{Text: r.Text, ID: r.ID, Agent: r.Agent})
}

func (d *natsAPI) natsSteer(ctx context.Context, p auth.Principal, req micro.Request) (any, error) {
	r, err := decodeNATS(req, false)
	if err != nil {
		return nil, err
	}
	return d.events.Steer(ctx, p, r.Session, SteerRequest{Note: r.Note, ID: r.ID, Agent: r.Agent})
}

// natsEvent takes a CloudEvent in the NATS binding, binary (ce- headers)
// or structured mode, read by pkg/events as the stream's consumers read it.
func (d *natsAPI) natsEvent(ctx context.Context, p auth.Principal, req micro.Request) (any, error) {
	h := nats.Header(req.Headers())
	e, err := events.ReadEvent(h, req.Data())
	if err != nil {
		return nil, err
	}
	return d.events.PublishEvent(ctx, p, e)
}

func (d *natsAPI) natsSessions(ctx context.Context, p auth.Principal, req micro.Request) (any, error) {
	r, err := decodeNATS(req, true)
	if err != nil {
		return nil, err
	}
	if r.Session != "" {
		return d.sessions.SessionDetail(ctx, p, r.Session)
	}
	ss, err := d.sessions.Sessions(ctx, p)
	if err != nil {
		return nil, err
	}
	return SessionList{Sessions: ss}, nil
}

func (d *natsAPI) natsJobs(ctx context.Context, p auth.Principal, req micro.Request) (any, error) {
	r, err := decodeNATS(req, false)
	if err != nil {
		return nil, err
	}
	jobs, err := d.jobs.Jobs(ctx, p, r.Session)
	if err != nil {
		return nil, err
	}
	return JobList{Jobs: jobs}, nil
}

func (d *natsAPI) natsStop(ctx context.Context, p auth.Principal, req micro.Request) (any, error) {
	r, err := decodeNATS(req, true)
	if err != nil {
		return nil, err
	}
	t := StopTarget{Scope: r.Scope, Tenant: r.Tenant, Session: r.Session}
	switch r.Action {
	case "on":
		return d.groundStop.SetStop(ctx, p, t, StopRequest{Reason: r.Reason})
	case "off":
		return d.groundStop.ClearStop(ctx, p, t)
	case "", "get":
		return d.groundStop.Stop(ctx, p, t)
	}
	return nil, problemf(http.StatusBadRequest, "bad-request", "Unknown action",
		"action %q: want on, off or get", shortenQ(r.Action))
}

func (d *natsAPI) natsRecovery(ctx context.Context, p auth.Principal, req micro.Request) (any, error) {
	r, err := decodeNATS(req, false)
	if err != nil {
		return nil, err
	}
	switch r.Action {
	case "set":
		return d.sessions.SetRecovery(ctx, p, r.Session, RecoveryRequest{Policy: r.Policy, MaxAttempts: r.MaxAttempts})
	case "clear":
		return d.sessions.ClearRecovery(ctx, p, r.Session)
	case "", "get":
		return d.sessions.Recovery(ctx, p, r.Session)
	}
	return nil, problemf(http.StatusBadRequest, "bad-request", "Unknown action",
		"action %q: want set, clear or get", shortenQ(r.Action))
}

func (d *natsAPI) natsTranscript(ctx context.Context, p auth.Principal, req micro.Request) (any, error) {
	r, err := decodeNATS(req, false)
	if err != nil {
		return nil, err
	}
	return d.sessions.Transcript(ctx, p, r.Session, r.After, r.Limit)
}

func (d *natsAPI) natsJob(ctx context.Context, p auth.Principal, req micro.Request) (any, error) {
	r, err := decodeNATS(req, false)
	if err != nil {
		return nil, err
	}
	switch r.Action {
	case "", "output":
		return d.jobs.JobOutput(ctx, p, r.Session, r.Job, JobOutputRequest{Offset: r.Offset, Limit: r.Limit, Tail: r.Tail, Grep: r.Grep})
	case "kill":
		return d.jobs.KillJob(ctx, p, r.Session, r.Job)
	}
	return nil, problemf(http.StatusBadRequest, "bad-request", "Unknown action",
		"action %q: want output or kill", shortenQ(r.Action))
}

func (d *natsAPI) natsAgents(ctx context.Context, p auth.Principal, req micro.Request) (any, error) {
	r, err := decodeNATS(req, true)
	if err != nil {
		return nil, err
	}
	action := r.Action
	if action == "" {
		action = "list"
		if r.Name != "" {
			action = "get"
		}
	}
	switch action {
	case "list":
		return d.agents.Agents(ctx, p)
	case "get":
		return d.agents.Agent(ctx, p, r.Name)
	case "put":
		if r.Profile == nil {
			pr := problem(http.StatusBadRequest, "invalid-agent", "Invalid agent profile",
				`profile: required for put: {"action":"put","name":"…","profile":{"instructions":"…"}}`)
			pr.Field = "profile"
			return nil, pr
		}
		return d.agents.PutAgent(ctx, p, r.Name, *r.Profile)
	case "delete":
		return d.agents.DeleteAgent(ctx, p, r.Name)
	}
	return nil, problemf(http.StatusBadRequest, "bad-request", "Unknown action",
		"action %q: want list, get, put or delete", shortenQ(action))
}

func (d *natsAPI) natsCluster(ctx context.Context, p auth.Principal, _ micro.Request) (any, error) {
	return d.cluster.Cluster(ctx, p)
}

func (d *natsAPI) natsApprovals(ctx context.Context, p auth.Principal, req micro.Request) (any, error) {
	r, err := decodeNATS(req, true)
	if err != nil {
		return nil, err
	}
	switch r.Action {
	case "", "list":
		as, err := d.approvals.Approvals(ctx, p, r.Session)
		if err != nil {
			return nil, err
		}
		return ApprovalList{Approvals: as}, nil
	case "decide":
		return d.approvals.Decide(ctx, p, r.Session, r.Approval,
			DecisionRequest{Decision: r.Decision, Reason: r.Reason, Answer: r.Answer, Input: r.Input})
	}
	return nil, problemf(http.StatusBadRequest, "bad-request", "Unknown action",
		"action %q: want list or decide", shortenQ(r.Action))
}
