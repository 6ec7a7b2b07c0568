package notifier

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"jetway/pkg/events"
)

// Headline is what one source event comes to: the note people read and the
// session it belongs to.
type Headline struct {
	Tenant, Session string
	Note            events.HeadlineNote
	// Source is the event the headline is about (for its trace context).
	Source event.Event
}

// HeadlineFor reads a message from jetway.jobevents.… or jetway.out.… and
// returns its headline, or false when the event is not one people are told
// about (text deltas, tool calls and results). An error means the message
// cannot be read at all; it will never make a headline.
func HeadlineFor(subject string, h nats.Header, data []byte) (Headline, bool, error) {
	sub, err := events.ParseSubject(subject)
	if err != nil {
		return Headline{}, false, err
	}
	switch sub.Kind {
	case events.KindJobEvents, events.KindEvents, events.KindAgentEvents:
		he, err := events.Decode(subject, h, data)
		if err != nil {
			return Headline{}, false, err
		}
		switch he.Payload.(type) {
		case events.JobExited, events.JobOverdue, events.JobNotice, events.AgentFinished, events.AgentProgress:
		default:
			return Headline{}, false, nil
		}
		text, ok := he.Headline()
		if !ok {
			return Headline{}, false, nil
		}
		return Headline{Tenant: he.Tenant, Session: he.Session, Source: he.Event,
			Note: events.HeadlineNote{Text: text, About: he.Type, Event: he.ID}}, true, nil
	case events.KindOut:
		e, err := events.ReadEvent(h, data)
		if err != nil {
			return Headline{}, false, err
		}
		text, ok, err := outHeadline(e)
		if err != nil || !ok {
			return Headline{}, false, err
		}
		note := events.HeadlineNote{Text: text, About: e.Type(), Event: e.ID()}
		if e.Type() == events.TypeApprovalRequested {
			var a events.ApprovalRequested
			_ = unmarshalData(e, &a) // read once already by outHeadline
			note.Approval = a.Approval
		}
		return Headline{Tenant: sub.Tenant, Session: sub.Session, Source: e, Note: note}, true, nil
	}
	return Headline{}, false, fmt.Errorf("notifier: no headlines from %s subjects", sub.Kind)
}

// outHeadline picks the run output events people are told about.
func outHeadline(e event.Event) (string, bool, error) {
	switch e.Type() {
	case events.TypeRunStarted:
		var r events.RunStarted
		if err := unmarshalData(e, &r); err != nil {
			return "", false, err
		}
		return events.RunStartedHeadline(r), true, nil
	case events.TypeRunEnded:
		var r events.RunEnded
		if err := unmarshalData(e, &r); err != nil {
			return "", false, err
		}
		return events.RunEndedHeadline(r), true, nil
	case events.TypeRunRefused:
		var r events.RunRefused
		if err := unmarshalData(e, &r); err != nil {
			return "", false, err
		}
		return events.RunRefusedHeadline(r), true, nil
	case events.TypeApprovalRequested:
		var a events.ApprovalRequested
		if err := unmarshalData(e, &a); err != nil {
			return "", false, err
		}
		return events.ApprovalRequestedHeadline(a), true, nil
	}
	return "", false, nil
}

func unmarshalData(e event.Event, v any) error {
	if err := json.Unmarshal(e.Data(), v); err != nil {
		return fmt.Errorf("%s data: %w", e.Type(), err)
	}
	return nil
}

// handle turns one source message into its headline and acks it once the
// headline and its webhook deliveries are stored. A message that can never
// make a headline is terminated so it is not redelivered forever; a failure
// to store is retried after a pause.
func (n *Notifier) handle(ctx context.Context, src source, m jetstream.Msg) {
	hl, ok, err := HeadlineFor(m.Subject(), m.Headers(), m.Data())
	if err != nil {
		n.log.Warn().Err(err).Str("subject", m.Subject()).Msg("unreadable event, no headline")
		n.metrics.unreadable.Inc()
		_ = m.Term()
		return
	}
	if !ok {
		_ = m.Ack()
		return
	}
	if err := n.Notify(ctx, hl); err != nil {
		n.log.Error().Err(err).Str("subject", m.Subject()).Str("event", hl.Note.Event).Msg("headline not stored, will retry")
		_ = m.NakWithDelay(time.Second)
		return
	}
	if err := m.Ack(); err != nil {
		// Harmless: the redelivery dedupes to the same headline and deliveries.
		n.log.Debug().Err(err).Str("consumer", src.durable).Msg("ack")
	}
}

// Notify publishes hl on the session's notify subject and queues a delivery
// for each of the tenant's webhooks that wants it. Calling it again for the
// same source event stores nothing new.
func (n *Notifier) Notify(ctx context.Context, hl Headline) (err error) {
	if hl.Source.Context != nil {
		ctx = events.ExtractTrace(ctx, hl.Source)
	}
	ctx, span := n.tracer.Start(ctx, "notify", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("jetway.tenant", hl.Tenant), attribute.String("jetway.session", hl.Session),
			attribute.String("jetway.about", hl.Note.About)))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()

	e, err := events.New(hl.Tenant, hl.Session, n.cfg.Source, hl.Note)
	if err != nil {
		return fmt.Errorf("notifier: build headline: %w", err)
	}
	e.SetID(derivedID("headline", hl.Tenant, hl.Session, hl.Note.About, hl.Note.Event))
	subject, err := events.NotifySubject(hl.Tenant, hl.Session)
	if err != nil {
		return err
	}
	msg, err := events.Encode(ctx, subject, e)
	if err != nil {
		return fmt.Errorf("notifier: encode headline: %w", err)
	}
	ack, err := n.js.PublishMsg(ctx, msg)
	if err != nil {
		return fmt.Errorf("notifier: publish headline on %s: %w", subject, err)
	}
	if !ack.Duplicate {
		n.metrics.headlines.WithLabelValues(hl.Note.About).Inc()
		n.log.Info().Str("tenant", hl.Tenant).Str("session", hl.Session).Str("headline", hl.Note.Text).Msg("headline")
	}
	// The webhook body carries the same trace context as the NATS message.
	events.InjectTrace(ctx, &e)
	for _, hook := range n.cfg.Webhooks[hl.Tenant] {
		if !hook.Wants(hl.Note.About) {
			continue
		}
		if err := n.enqueue(ctx, hl, e, hook); err != nil {
			return err
		}
	}
	return nil
}
