package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/control/groundstop"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
)

// This file holds the operations both transports share: the HTTP handlers
// and the NATS endpoints are thin adapters around them, so auth, limits and
// errors cannot drift apart between the two.

// The request and answer bodies live in pkg/dispatcherapi, the wire
// contract the client imports; these names keep the package's own code and
// its callers short.
type (
	Accepted      = api.Accepted
	InputRequest  = api.InputRequest
	SteerRequest  = api.SteerRequest
	SessionInfo   = api.SessionInfo
	JobInfo       = api.JobInfo
	StopState     = api.StopState
	StopSwitch    = api.StopSwitch
	StopRequest   = api.StopRequest
	BatchAccepted = api.BatchAccepted
	SessionList   = api.SessionList
	JobList       = api.JobList
)

// maxIDLen bounds a client-chosen CE id; it travels as Nats-Msg-Id.
const maxIDLen = 128

// authenticate maps a bearer token to its principal and takes one token
// from the tenant's rate bucket.
func (d *Dispatcher) authenticate(token string) (auth.Principal, error) {
	p, err := d.auth.Authenticate(token)
	if err != nil {
		return auth.Principal{}, err
	}
	if err := d.allow(p.Tenant); err != nil {
		return auth.Principal{}, err
	}
	return p, nil
}

// needsTenant refuses a principal of no tenant (an operator token given
// without one) everything but Ground Stop: every other operation is keyed by
// the caller's tenant, and an empty one must never become a key prefix that
// matches every tenant's records.
func needsTenant(p auth.Principal) error {
	if p.Tenant == "" {
		return fmt.Errorf("%w: this operator token belongs to no tenant; it may only use Ground Stop (give it a tenant to act for one)", auth.ErrForbidden)
	}
	return nil
}

// allow applies the tenant's token bucket. A refused request reserves
// nothing, and its problem says when to come back.
func (d *Dispatcher) allow(tenant string) error {
	if d.cfg.RatePerSecond < 0 {
		return nil
	}
	d.limMu.Lock()
	lim, ok := d.limiters[tenant]
	if !ok {
		lim = rate.NewLimiter(rate.Limit(d.cfg.RatePerSecond), d.cfg.RateBurst)
		d.limiters[tenant] = lim
	}
	d.limMu.Unlock()
	r := lim.Reserve()
	if !r.OK() {
		return problem(http.StatusTooManyRequests, "rate-limited", "Too many requests",
			"the tenant's rate limit admits no requests")
	}
	if delay := r.Delay(); delay > 0 {
		r.Cancel()
		p := problemf(http.StatusTooManyRequests, "rate-limited", "Too many requests",
			"tenant %q is over its limit of %g requests per second (burst %d)", tenant, d.cfg.RatePerSecond, d.cfg.RateBurst)
		p.RetryAfter = retryAfterSeconds(delay)
		return p
	}
	return nil
}

// checkID validates a client-chosen CE id.
func checkID(id string) error {
	if len(id) > maxIDLen {
		return problemf(http.StatusBadRequest, "invalid-id", "Invalid id",
			"id must be at most %d characters, is %d", maxIDLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f {
			return problem(http.StatusBadRequest, "invalid-id", "Invalid id",
				"id may contain only printable ASCII without spaces")
		}
	}
	return nil
}

// newEvent builds a jetway-defined event for the caller's session.
func (d *Dispatcher) newEvent(p auth.Principal, session, id string, payload events.Payload) (event.Event, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return event.Event{}, err
	}
	if err := checkID(id); err != nil {
		return event.Event{}, err
	}
	e, err := events.New(p.Tenant, session, d.cfg.Source, payload)
	if err != nil {
		return event.Event{}, err
	}
	if id != "" {
		e.SetID(id)
	}
	return e, nil
}

// Input publishes an io.jetway.input into one of the caller's sessions.
func (d *Dispatcher) Input(ctx context.Context, p auth.Principal, session string, req InputRequest) (Accepted, error) {
	if strings.TrimSpace(req.Text) == "" {
		return Accepted{}, problem(http.StatusBadRequest, "invalid-data", "Invalid input", "text is empty")
	}
	e, err := d.newEvent(p, session, req.ID, events.Input{Text: req.Text})
	if err != nil {
		return Accepted{}, err
	}
	if err := bindAgent(&e, req.Agent); err != nil {
		return Accepted{}, err
	}
	return d.publishHeld(ctx, p, session, e, req.ID != "")
}

// bindAgent names agent in e (the jetwayagent extension) when a person's
// request asks for one; publish refuses a profile the tenant does not have.
func bindAgent(e *event.Event, agent string) error {
	if agent == "" {
		return nil
	}
	if err := agentName(agent); err != nil {
		return asAgentField(err)
	}
	events.SetAgent(e, agent)
	return nil
}

// Steer publishes an io.jetway.steer into one of the caller's sessions.
func (d *Dispatcher) Steer(ctx context.Context, p auth.Principal, session string, req SteerRequest) (Accepted, error) {
	if strings.TrimSpace(req.Note) == "" {
		return Accepted{}, problem(http.StatusBadRequest, "invalid-data", "Invalid steer", "note is empty")
	}
	e, err := d.newEvent(p, session, req.ID, events.Steer{Note: req.Note})
	if err != nil {
		return Accepted{}, err
	}
	if err := bindAgent(&e, req.Agent); err != nil {
		return Accepted{}, err
	}
	return d.publishHeld(ctx, p, session, e, req.ID != "")
}

// publishHeld publishes a person's event and says in the answer which
// Ground Stop switches hold the session, so "sent" never reads as "being
// worked on" while nothing will run. The switches come from the mirror
// (stopmirror.go); until it is ready they are read from the bucket while
// the event is published. A failed read leaves the answer without them:
// the event is stored, and refusing the request would invite a retry that
// stores nothing new.
func (d *Dispatcher) publishHeld(ctx context.Context, p auth.Principal, session string, e event.Event, chosenID bool) (Accepted, error) {
	if held, ok := d.heldFromMirror(p, session); ok {
		acc, err := d.publish(ctx, p, session, e, chosenID)
		if err == nil && len(held) > 0 {
			acc.Held = held
		}
		return acc, err
	}
	var held []StopSwitch
	var heldErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		held, heldErr = d.covering(ctx, p, p.Tenant, session)
	}()
	acc, err := d.publish(ctx, p, session, e, chosenID)
	<-done
	if err != nil {
		return acc, err
	}
	if heldErr != nil {
		d.log.Warn().Err(heldErr).Str("tenant", p.Tenant).Str("session", session).Msg("read Ground Stop for an answer")
		return acc, nil
	}
	if len(held) > 0 {
		acc.Held = held
	}
	return acc, nil
}

// target reads tenant/session from a CloudEvent's subject attribute and
// checks the caller may publish there.
func target(p auth.Principal, e event.Event) (string, error) {
	subj := e.Subject()
	tenant, session, ok := strings.Cut(subj, "/")
	if !ok {
		return "", problemf(http.StatusBadRequest, "invalid-event", "Invalid CloudEvent",
			"cloudevent attribute subject %q: must be <tenant>/<session>", shortenQ(subj))
	}
	if err := events.ValidateToken("tenant", tenant); err != nil {
		return "", err
	}
	if err := events.ValidateToken("session", session); err != nil {
		return "", err
	}
	if err := p.MayAccess(tenant); err != nil {
		return "", err
	}
	return session, nil
}

// PublishEvent publishes a CloudEvent from another system. Its subject
// attribute names the session (<tenant>/<session>, the caller's tenant);
// its type must be one the caller's token allows.
func (d *Dispatcher) PublishEvent(ctx context.Context, p auth.Principal, e event.Event) (Accepted, error) {
	session, err := target(p, e)
	if err != nil {
		return Accepted{}, err
	}
	return d.publishHeld(ctx, p, session, e, true)
}

// checkEvent runs every check publish runs, without publishing, so a batch
// is refused whole rather than half published.
func (d *Dispatcher) checkEvent(ctx context.Context, p auth.Principal, e event.Event) error {
	session, err := target(p, e)
	if err != nil {
		return err
	}
	_, h, err := d.check(p, session, e)
	if err != nil {
		return err
	}
	return d.agentExists(ctx, p.Tenant, h.Agent)
}

func (d *Dispatcher) check(p auth.Principal, session string, e event.Event) (string, events.HostEvent, error) {
	if err := p.MayPublish(e.Type()); err != nil {
		return "", events.HostEvent{}, err
	}
	subject, err := events.EventsSubject(p.Tenant, session)
	if err != nil {
		return "", events.HostEvent{}, err
	}
	h, err := events.FromEvent(subject, e)
	if err != nil {
		return "", events.HostEvent{}, err
	}
	if id := h.ID; len(id) > maxIDLen || strings.ContainsFunc(id, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return "", events.HostEvent{}, problemf(http.StatusBadRequest, "invalid-event", "Invalid CloudEvent",
			"cloudevent attribute id: must be at most %d characters without control characters", maxIDLen)
	}
	return subject, h, nil
}

// publish is the one path onto JETWAY_EVENTS: permission, contract check,
// binary-mode encoding with the request's trace context, and a JetStream
// publish. A caller-chosen id (chosenID) is first claimed for the tenant's
// session (claimID): an id it already had is answered as a duplicate and
// not stored again.
func (d *Dispatcher) publish(ctx context.Context, p auth.Principal, session string, e event.Event, chosenID bool) (Accepted, error) {
	subject, h, err := d.check(p, session, e)
	if err != nil {
		return Accepted{}, err
	}
	if err := d.agentExists(ctx, p.Tenant, h.Agent); err != nil {
		return Accepted{}, err
	}
	ctx, span := d.tracer.Start(publishParent(ctx, h.Event), "publish event", trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	span.SetAttributes(
		attribute.String("jetway.tenant", p.Tenant),
		attribute.String("jetway.session", session),
		attribute.String("cloudevents.event_id", h.ID),
		attribute.String("cloudevents.event_type", h.Type),
	)
	msg, err := events.Encode(ctx, subject, h.Event)
	if err != nil {
		return Accepted{}, err
	}
	// A message over the server's max_payload can never be stored, however
	// often it is retried: that is the caller's body being too large (413),
	// not the store being down (503). --max-body may well be set above it.
	if limit := d.nc.MaxPayload(); limit > 0 && int64(msgSize(msg)) > limit {
		return Accepted{}, problemf(http.StatusRequestEntityTooLarge, "too-large", "Event too large for the bus",
			"the event takes %d bytes on the bus; the NATS server carries at most %d (its max_payload)", msgSize(msg), limit)
	}
	// Claimed only now, for an event that can be stored: a refused one
	// leaves no claim behind to answer its corrected retry as a duplicate.
	release := func() {}
	if chosenID {
		dup, undo, err := d.claimID(ctx, p.Tenant, session, h.ID)
		if err != nil {
			return Accepted{}, err
		}
		if dup {
			d.metrics.published.WithLabelValues("duplicate").Inc()
			d.log.Debug().Str("tenant", p.Tenant).Str("session", session).Str("id", h.ID).Msg("event is a duplicate")
			return Accepted{ID: h.ID, Duplicate: true}, nil
		}
		release = undo
	}
	ack, err := d.js.PublishMsg(ctx, msg)
	if err != nil {
		release()
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		return Accepted{}, problemf(http.StatusRequestEntityTooLarge, "too-large", "Event too large for the bus",
			"publish to %s: %v (the NATS server carries at most %d bytes)", subject, err, d.nc.MaxPayload())
	}
	if err != nil {
		span.SetStatus(codes.Error, "publish failed")
		return Accepted{}, problemf(http.StatusServiceUnavailable, "unavailable", "Event store unavailable",
			"publish to %s: %v", subject, err)
	}
	outcome := "published"
	if ack.Duplicate {
		outcome = "duplicate"
	}
	d.metrics.published.WithLabelValues(outcome).Inc()
	d.log.Debug().Str("tenant", p.Tenant).Str("session", session).Str("id", h.ID).
		Str("type", h.Type).Uint64("seq", ack.Sequence).Bool("duplicate", ack.Duplicate).Msg("event accepted")
	return Accepted{ID: h.ID, Duplicate: ack.Duplicate}, nil
}

// publishParent picks the parent of the publish span: the caller's trace
// when the request carried one, else the trace the CloudEvent itself carries
// (its traceparent extension), so a sender that traces through the event
// rather than the transport stays in one trace.
func publishParent(ctx context.Context, e event.Event) context.Context {
	if remote, _ := ctx.Value(remoteParentKey{}).(bool); remote {
		return ctx
	}
	return events.ExtractTrace(ctx, e)
}

// Sessions lists the caller's sessions that have a record.
func (d *Dispatcher) Sessions(ctx context.Context, p auth.Principal) ([]SessionInfo, error) {
	entries, err := d.scan(ctx, bus.BucketSessions, p.Tenant+".*")
	if err != nil {
		return nil, err
	}
	out := make([]SessionInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, SessionInfo{
			Session:  strings.TrimPrefix(e.Key(), p.Tenant+"."),
			Revision: e.Revision(),
			Updated:  e.Created(),
			Record:   asJSON(e.Value()),
		})
	}
	return out, nil
}

// Session reads one of the caller's session records.
func (d *Dispatcher) Session(ctx context.Context, p auth.Principal, session string) (SessionInfo, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return SessionInfo{}, err
	}
	sr, err := d.readRecord(ctx, p.Tenant, session)
	if err != nil {
		return SessionInfo{}, err
	}
	if !sr.Found {
		return SessionInfo{}, noSession(p.Tenant, session)
	}
	return sessionInfo(session, sr), nil
}

func sessionInfo(session string, sr storedRecord) SessionInfo {
	return SessionInfo{Session: session, Revision: sr.Revision, Updated: sr.Updated, Record: asJSON(sr.Raw)}
}

// noSession is the answer for a session the caller's tenant has no trace
// of: the same whether it exists in another tenant or nowhere, so a token
// learns nothing about other tenants' sessions.
func noSession(tenant, session string) *Problem {
	return problemf(http.StatusNotFound, "not-found", "No such session",
		"tenant %q has no record of session %q", tenant, session)
}

// Jobs lists the background jobs recorded for one of the caller's
// sessions; none recorded is an empty list, not an error.
func (d *Dispatcher) Jobs(ctx context.Context, p auth.Principal, session string) ([]JobInfo, error) {
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
	return out, nil
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

// StopTarget names the switch a Ground Stop call is about. The zero value
// means the caller's default: the global switch for an operator, the
// caller's own tenant for everyone else — so an old "POST /v1/stop" from a
// tenant admin stops that tenant, never every tenant.
type StopTarget struct {
	// Scope is "" (the default), "global" or "tenant".
	Scope string
	// Tenant names another tenant (operators only); empty is the caller's.
	Tenant  string
	Session string
}

// ScopeByOperator is the Record.By of switches an operator flipped.
const ScopeByOperator = "operator"

// resolveStop turns a target into the switch's tenant and session (both
// empty for the global switch) and the scope to report, refusing what p may
// not address. Reads and writes share it: a tenant may neither flip nor read
// the global switch's reason or another tenant's switch.
func resolveStop(p auth.Principal, t StopTarget) (tenant, session, scope string, err error) {
	switch t.Scope {
	case "", "tenant":
	case "global":
		if t.Tenant != "" || t.Session != "" {
			return "", "", "", problem(http.StatusBadRequest, "bad-request", "Conflicting Ground Stop scope",
				"scope=global names no tenant or session; drop tenant and session, or the scope")
		}
		if err := p.MayOperate(); err != nil {
			return "", "", "", err
		}
		return "", "", "global", nil
	default:
		return "", "", "", problemf(http.StatusBadRequest, "bad-request", "Unknown Ground Stop scope",
			"scope %q: want global or tenant", shortenQ(t.Scope))
	}
	if t.Scope == "" && t.Tenant == "" && t.Session == "" && p.Operator {
		return "", "", "global", nil
	}
	tenant = t.Tenant
	if tenant == "" {
		tenant = p.Tenant
	}
	if tenant == "" {
		return "", "", "", problem(http.StatusBadRequest, "bad-request", "No tenant",
			"this operator token belongs to no tenant; name one with tenant=")
	}
	if err := events.ValidateToken("tenant", tenant); err != nil {
		return "", "", "", err
	}
	if tenant != p.Tenant {
		if err := p.MayOperate(); err != nil {
			return "", "", "", err
		}
	}
	if t.Session == "" {
		return tenant, "", tenant + "/*", nil
	}
	if err := events.ValidateToken("session", t.Session); err != nil {
		return "", "", "", err
	}
	return tenant, t.Session, tenant + "/" + t.Session, nil
}

// stopBy is what a switch records as who set it.
func stopBy(p auth.Principal) string {
	if p.Operator {
		return ScopeByOperator
	}
	return p.Tenant
}

// SetStop turns Ground Stop on: globally (operators only), for a tenant or
// for one session.
func (d *Dispatcher) SetStop(ctx context.Context, p auth.Principal, t StopTarget, req StopRequest) (StopState, error) {
	if err := p.MayAdminister(); err != nil {
		return StopState{}, err
	}
	tenant, session, scope, err := resolveStop(p, t)
	if err != nil {
		return StopState{}, err
	}
	kv, err := d.controlBucket(ctx)
	if err != nil {
		return StopState{}, err
	}
	rec := groundstop.Record{Reason: req.Reason, By: stopBy(p), At: time.Now().UTC()}
	if _, err := groundstop.Set(ctx, kv, tenant, session, rec); err != nil {
		return StopState{}, unavailable("set Ground Stop", err)
	}
	if key, err := groundstop.Key(tenant, session); err == nil {
		d.flipped(key, rec, true)
	}
	d.log.Warn().Str("by", rec.By).Str("tenant", p.Tenant).Str("scope", scope).Str("reason", req.Reason).Msg("Ground Stop on")
	return StopState{GroundStop: true, Scope: scope, Reason: rec.Reason, By: rec.By, At: rec.At}, nil
}

// ClearStop turns Ground Stop off, with the same scopes as SetStop.
func (d *Dispatcher) ClearStop(ctx context.Context, p auth.Principal, t StopTarget) (StopState, error) {
	if err := p.MayAdminister(); err != nil {
		return StopState{}, err
	}
	tenant, session, scope, err := resolveStop(p, t)
	if err != nil {
		return StopState{}, err
	}
	kv, err := d.controlBucket(ctx)
	if err != nil {
		return StopState{}, err
	}
	if err := groundstop.Clear(ctx, kv, tenant, session); err != nil {
		return StopState{}, unavailable("clear Ground Stop", err)
	}
	if key, err := groundstop.Key(tenant, session); err == nil {
		d.flipped(key, groundstop.Record{}, false)
	}
	d.log.Warn().Str("by", stopBy(p)).Str("tenant", p.Tenant).Str("scope", scope).Msg("Ground Stop off")
	return StopState{GroundStop: false, Scope: scope}, nil
}

// Stop reads a Ground Stop switch. Any token may read its own tenant's
// switches; of the global one a tenant learns only whether it is on.
func (d *Dispatcher) Stop(ctx context.Context, p auth.Principal, t StopTarget) (StopState, error) {
	tenant, session, scope, err := resolveStop(p, t)
	if err != nil {
		return StopState{}, err
	}
	kv, err := d.controlBucket(ctx)
	if err != nil {
		return StopState{}, err
	}
	rec, on, err := groundstop.Get(ctx, kv, tenant, session)
	if err != nil {
		return StopState{}, unavailable("read Ground Stop", err)
	}
	st := StopState{GroundStop: on, Scope: scope, Reason: rec.Reason, By: rec.By, At: rec.At}
	if scope == "global" {
		return st, nil
	}
	_, global, err := groundstop.Get(ctx, kv, "", "")
	if err != nil {
		return StopState{}, unavailable("read Ground Stop", err)
	}
	st.GlobalStop = &global
	if session != "" {
		_, tenantOn, err := groundstop.Get(ctx, kv, tenant, "")
		if err != nil {
			return StopState{}, unavailable("read Ground Stop", err)
		}
		st.TenantStop = &tenantOn
		if st.Covering, err = d.covering(ctx, p, tenant, session); err != nil {
			return StopState{}, err
		}
		return st, nil
	}
	sws, err := groundstop.Sessions(ctx, kv, tenant)
	if err != nil {
		return StopState{}, unavailable("list Ground Stop switches", err)
	}
	for _, sw := range sws {
		st.Sessions = append(st.Sessions, StopState{GroundStop: true, Scope: tenant + "/" + sw.Session,
			Reason: sw.Record.Reason, By: sw.Record.By, At: sw.Record.At})
	}
	return st, nil
}

func (d *Dispatcher) controlBucket(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := d.bucket(ctx, bus.BucketControl)
	if err != nil {
		return nil, err
	}
	if kv == nil {
		return nil, problemf(http.StatusServiceUnavailable, "unavailable", "Control bucket missing",
			"bucket %s does not exist; provision the bus first", bus.BucketControl)
	}
	return kv, nil
}

// bucket opens a KV bucket once and caches it. A bucket that does not exist
// yet is (nil, nil): nothing has been recorded, which listings report as an
// empty list.
func (d *Dispatcher) bucket(ctx context.Context, name string) (jetstream.KeyValue, error) {
	d.kvMu.Lock()
	defer d.kvMu.Unlock()
	if kv, ok := d.kvs[name]; ok {
		return kv, nil
	}
	kv, err := d.js.KeyValue(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return nil, nil
	case err != nil:
		return nil, unavailable("open bucket "+name, err)
	}
	d.kvs[name] = kv
	return kv, nil
}

// scan returns the live entries of bucket matching filter, in one watch
// rather than a Get per key. A one-shot read for one request, not a mirror:
// the request needs an answer or an error now, not a restart with backoff.
func (d *Dispatcher) scan(ctx context.Context, bucket, filter string) ([]jetstream.KeyValueEntry, error) {
	kv, err := d.bucket(ctx, bucket)
	if err != nil || kv == nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, unavailable("list "+bucket, err)
	}
	defer w.Stop()
	var out []jetstream.KeyValueEntry
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, unavailable("list "+bucket, errors.New("watch closed early"))
			}
			if e == nil {
				return out, nil
			}
			out = append(out, e)
		case <-ctx.Done():
			return nil, unavailable("list "+bucket, ctx.Err())
		}
	}
}

// msgSize is what a message takes against the server's max_payload: its
// data and its headers as sent.
func msgSize(m *nats.Msg) int {
	n := len(m.Data)
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // "k: v\r\n"
		}
	}
	if len(m.Header) > 0 {
		n += len("NATS/1.0\r\n\r\n")
	}
	return n
}

func unavailable(what string, err error) *Problem {
	return problemf(http.StatusServiceUnavailable, "unavailable", "Service unavailable", "%s: %v", what, err)
}

// asJSON passes a stored value through when it is JSON, and quotes it as a
// JSON string when it is not.
func asJSON(b []byte) json.RawMessage {
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	q, _ := json.Marshal(string(b))
	return q
}

// shortenQ keeps a caller's string short in a problem detail, cutting on
// a rune boundary.
func shortenQ(s string) string {
	const n = 80
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// readyCheck says whether the dispatcher can do its job: connected to NATS
// and JetStream answering.
func (d *Dispatcher) readyCheck(ctx context.Context) error {
	if !d.nc.IsConnected() {
		return fmt.Errorf("nats: %s", d.nc.Status())
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := d.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	return nil
}
