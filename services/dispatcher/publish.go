package dispatcher

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"jetway/pkg/auth"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
)

// eventsCore is what goes into a session: input, steer and resume from a
// person, CloudEvents from other systems. Every event takes one path onto
// JETWAY_EVENTS (publish), with the agent profile it names checked by the
// agents core, a caller-chosen id claimed once (dedupe.go) and the Ground
// Stop switches that hold the session named in the answer by the stop core.
type eventsCore struct {
	*store
	// source is the CloudEvents source of the events built here.
	source  string
	log     zerolog.Logger
	tracer  trace.Tracer
	metrics *metrics

	agents     *agentsCore
	groundStop *stopCore

	// noIDBucket logs once that duplicate answers are off (claimID).
	noIDBucket sync.Once
}

// maxIDLen bounds a client-chosen CE id; it travels as Nats-Msg-Id.
const maxIDLen = 128

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
func (d *eventsCore) newEvent(p auth.Principal, session, id string, payload events.Payload) (event.Event, error) {
	if err := events.ValidateToken("session", session); err != nil {
		return event.Event{}, err
	}
	if err := checkID(id); err != nil {
		return event.Event{}, err
	}
	e, err := events.New(p.Tenant, session, d.source, payload)
	if err != nil {
		return event.Event{}, err
	}
	if id != "" {
		e.SetID(id)
	}
	return e, nil
}

// Input publishes an io.jetway.input into one of the caller's sessions.
func (d *eventsCore) Input(ctx context.Context, p auth.Principal, session string, req InputRequest) (Accepted, error) {
	if strings.TrimSpace(req.Text) == "" {
		return Accepted{}, problem(http.StatusBadRequest, "invalid-data", "Invalid input", "text is empty")
	}
	return d.fromPerson(ctx, p, session, req.ID, req.Agent, events.Input{Text: req.Text})
}

// fromPerson publishes what a person sent (input, steer) with the id and
// agent profile the request chose, if any.
func (d *eventsCore) fromPerson(ctx context.Context, p auth.Principal, session, id, agent string, payload events.Payload) (Accepted, error) {
	e, err := d.newEvent(p, session, id, payload)
	if err != nil {
		return Accepted{}, err
	}
	if err := bindAgent(&e, agent); err != nil {
		return Accepted{}, err
	}
	return d.publishHeld(ctx, p, session, e, id != "")
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
func (d *eventsCore) Steer(ctx context.Context, p auth.Principal, session string, req SteerRequest) (Accepted, error) {
	if strings.TrimSpace(req.Note) == "" {
		return Accepted{}, problem(http.StatusBadRequest, "invalid-data", "Invalid steer", "note is empty")
	}
	return d.fromPerson(ctx, p, session, req.ID, req.Agent, events.Steer{Note: req.Note})
}

// publishHeld publishes a person's event and says in the answer which
// Ground Stop switches hold the session, so "sent" never reads as "being
// worked on" while nothing will run. The switches come from the mirror
// (stopmirror.go); until it is ready they are read from the bucket while
// the event is published. A failed read leaves the answer without them:
// the event is stored, and refusing the request would invite a retry that
// stores nothing new.
func (d *eventsCore) publishHeld(ctx context.Context, p auth.Principal, session string, e event.Event, chosenID bool) (Accepted, error) {
	if held, ok := d.groundStop.heldFromMirror(ctx, p, session); ok {
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
		held, heldErr = d.groundStop.coveringSession(ctx, p, p.Tenant, session)
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
func (d *eventsCore) PublishEvent(ctx context.Context, p auth.Principal, e event.Event) (Accepted, error) {
	session, err := target(p, e)
	if err != nil {
		return Accepted{}, err
	}
	return d.publishHeld(ctx, p, session, e, true)
}

// checkEvent runs every check publish runs, without publishing, so a batch
// is refused whole rather than half published.
func (d *eventsCore) checkEvent(ctx context.Context, p auth.Principal, e event.Event) error {
	session, err := target(p, e)
	if err != nil {
		return err
	}
	_, h, err := d.check(p, session, e)
	if err != nil {
		return err
	}
	return d.agents.agentExists(ctx, p.Tenant, h.Agent)
}

func (d *eventsCore) check(p auth.Principal, session string, e event.Event) (string, events.HostEvent, error) {
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
func (d *eventsCore) publish(ctx context.Context, p auth.Principal, session string, e event.Event, chosenID bool) (Accepted, error) {
	subject, h, err := d.check(p, session, e)
	if err != nil {
		return Accepted{}, err
	}
	if err := d.agents.agentExists(ctx, p.Tenant, h.Agent); err != nil {
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

// ResumeNote is the steer a bare resume sends: an interrupted session
// waits for a person, and this is the person saying "go on".
const ResumeNote = "Go on with the interrupted work: check what the earlier run finished before repeating anything."

// ResumeRequest is the optional body of POST /v1/sessions/{session}/resume.
type ResumeRequest = api.ResumeRequest

// Resume sends an interrupted session on: a steer (the person's word, with
// precedence) that starts a Steered run over the interrupted work. On a
// session that is not interrupted it is an ordinary steer.
func (d *eventsCore) Resume(ctx context.Context, p auth.Principal, session string, req ResumeRequest) (Accepted, error) {
	note := strings.TrimSpace(req.Note)
	if note == "" {
		note = ResumeNote
	}
	return d.Steer(ctx, p, session, SteerRequest{Note: note, ID: req.ID})
}
