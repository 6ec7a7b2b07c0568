// Package notifier turns what happens in sessions into what a person reads:
// one headline per job exit, job overdue, run start, run end, refusal and
// change of a session's Ground Stop switch.
// It publishes each headline as an io.jetway.headline CloudEvent on
// jetway.notify.<tenant>.<session> (where terminals follow it over SSE) and
// POSTs it to the tenant's webhooks.
//
// # Guarantees
//
// The notifier reads JETWAY_EVENTS (jetway.jobevents.>) and JETWAY_OUT
// (jetway.out.>) through durable consumers and acks a source message only
// after its headline is stored on the notify subject and a delivery record
// per matching webhook is stored in the jetway_webhooks bucket. So:
//
//   - Headlines: exactly one per source event on the notify subject. A
//     redelivered source event builds a headline with the same id (derived
//     from the source CE id), which JetStream drops as a duplicate
//     (Nats-Msg-Id) within the stream's duplicate window.
//   - Webhooks: at least once. Delivery records are created only if absent
//     and are kept (marked delivered) for Config.DeliveryRetention, so a
//     redelivered source event does not post again. A restarted notifier
//     picks pending records up from the bucket and carries on; deliveries
//     are claimed with a lease (CAS on the record), so several notifiers
//     share the work and one that dies mid-POST is taken over after the
//     lease. A POST that succeeded but whose record update was lost (crash
//     in between) is sent again: receivers dedupe on the CloudEvent id.
//   - A delivery that fails Retry.Attempts times becomes a dead letter in
//     jetway_webhooks_dead, listed by DeadLetters, the micro endpoint
//     jetway.notifier.deadletters and DeadLettersHandler.
//
// A brand-new durable starts with new messages: a first deploy does not
// replay days of history into webhooks. Once created, a durable keeps its
// place across restarts.
package notifier

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"jetway/pkg/bus"
	"jetway/pkg/egress"
	"jetway/pkg/events"
)

// Names of what the notifier owns on the bus.
const (
	// ConsumerEvents reads job events from JETWAY_EVENTS.
	ConsumerEvents = "notifier-events"
	// ConsumerAgentEvents reads sub-agent events (a child's end or
	// progress, for its parent's headlines) from JETWAY_EVENTS.
	ConsumerAgentEvents = "notifier-agentevents"
	// ConsumerOut reads run output from JETWAY_OUT.
	ConsumerOut = "notifier-out"
	// BucketDeliveries holds one record per webhook delivery.
	BucketDeliveries = "jetway_webhooks"
	// BucketDeadLetters holds deliveries that ran out of attempts.
	BucketDeadLetters = "jetway_webhooks_dead"
	// ServiceName is the NATS micro service name (see `nats micro ls`).
	ServiceName = "jetway-notifier"
	// SubjectDeadLetters answers {"tenant":"…"} with that tenant's dead letters.
	SubjectDeadLetters = "jetway.notifier.deadletters"
)

// Defaults for zero Config fields.
const (
	DefaultSource            = "jetway/notifier"
	DefaultAckWait           = 30 * time.Second
	DefaultRetryBase         = time.Second
	DefaultRetryMax          = 5 * time.Minute
	DefaultRetryAttempts     = 8
	DefaultHTTPTimeout       = 10 * time.Second
	DefaultDeliveryRetention = 24 * time.Hour
	DefaultConcurrency       = 8
)

// Retry says how often and how patiently a webhook is tried: the n-th retry
// waits Base·2^(n-1), at most Max; after Attempts tries in all the delivery
// is a dead letter.
type Retry struct {
	Base     time.Duration
	Max      time.Duration
	Attempts int
}

// Delay is the wait after the given number of failed attempts (≥ 1).
func (r Retry) Delay(failed int) time.Duration {
	d := r.Base
	for i := 1; i < failed && d < r.Max; i++ {
		d *= 2
	}
	return min(d, r.Max)
}

// Config is everything a Notifier needs; Conn is required.
type Config struct {
	Conn *nats.Conn
	// Webhooks are the receivers per tenant (see LoadWebhooks).
	Webhooks Webhooks
	// Source is the CloudEvents source of headlines (DefaultSource).
	Source string
	// AckWait is how long a source message may stay un-acked before it is
	// delivered again (DefaultAckWait).
	AckWait time.Duration
	// Retry is the webhook backoff (Default* when zero).
	Retry Retry
	// HTTPClient posts webhooks; nil makes one with HTTPTimeout that refuses
	// non-public targets (see WebhookAllowHosts). Whichever client, redirects
	// are never followed.
	HTTPClient *http.Client
	// WebhookAllowHosts are the host names (or IP literals), as written in
	// webhook URLs, that may resolve to loopback, link-local, private,
	// unspecified or multicast addresses. Everything else must be public:
	// a tenant's webhook must not reach into the operator's network.
	WebhookAllowHosts []string
	// LegacySignature also sends the old body-only X-Jetway-Signature, for
	// receivers not yet checking Jetway-Signature. It can be replayed: turn
	// it on only while receivers move over.
	LegacySignature bool
	// HTTPTimeout bounds one webhook POST (DefaultHTTPTimeout). A claim on
	// a delivery lasts twice as long, so a live notifier is never overtaken.
	HTTPTimeout time.Duration
	// DeliveryRetention is how long a delivery record is kept, delivered or
	// pending (DefaultDeliveryRetention). It must be well above Retry.Max:
	// a pending record not retried within it is dropped.
	DeliveryRetention time.Duration
	// Concurrency bounds simultaneous webhook POSTs (DefaultConcurrency).
	Concurrency int
	// Replicas of the notifier's buckets and consumers (default 1).
	Replicas int

	Logger         *zerolog.Logger
	Registry       prometheus.Registerer
	TracerProvider trace.TracerProvider
	// Version is reported by the micro service (default "0.0.0").
	Version string
}

// Notifier is the running service. Build it with New, start it with Run.
type Notifier struct {
	cfg     Config
	id      string
	js      jetstream.JetStream
	log     zerolog.Logger
	tracer  trace.Tracer
	metrics *metrics
	http    *http.Client

	ready     chan struct{}
	readyOnce sync.Once

	deliveries jetstream.KeyValue
	dead       jetstream.KeyValue
	wake       chan struct{}
}

// New checks cfg and builds a Notifier; nothing touches the bus until Run.
func New(cfg Config) (*Notifier, error) {
	if cfg.Conn == nil {
		return nil, errors.New("notifier: Config.Conn is required")
	}
	if err := cfg.Webhooks.Validate(); err != nil {
		return nil, fmt.Errorf("notifier: %w", err)
	}
	if cfg.Source == "" {
		cfg.Source = DefaultSource
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.Retry.Base <= 0 {
		cfg.Retry.Base = DefaultRetryBase
	}
	if cfg.Retry.Max <= 0 {
		cfg.Retry.Max = DefaultRetryMax
	}
	cfg.Retry.Max = max(cfg.Retry.Max, cfg.Retry.Base)
	if cfg.Retry.Attempts <= 0 {
		cfg.Retry.Attempts = DefaultRetryAttempts
	}
	if cfg.HTTPTimeout <= 0 {
		cfg.HTTPTimeout = DefaultHTTPTimeout
	}
	if cfg.DeliveryRetention <= 0 {
		cfg.DeliveryRetention = DefaultDeliveryRetention
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	cfg.Version = microVersion(cfg.Version)
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = cfg.Logger.With().Str("service", "notifier").Logger()
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	js, err := bus.JetStream(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("notifier: %w", err)
	}
	hc := webhookClient(cfg.HTTPTimeout, cfg.WebhookAllowHosts)
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		c.CheckRedirect = egress.NoRedirects
		hc = &c
	}
	host, _ := os.Hostname()
	return &Notifier{
		cfg:     cfg,
		id:      fmt.Sprintf("%s-%d-%s", host, os.Getpid(), events.NewID()[:8]),
		js:      js,
		log:     log,
		tracer:  tp.Tracer("jetway/services/notifier"),
		metrics: m,
		http:    hc,
		ready:   make(chan struct{}),
		wake:    make(chan struct{}, 1),
	}, nil
}

// Ready is closed once the consumers, buckets and micro service are set up
// and headlines flow.
func (n *Notifier) Ready() <-chan struct{} { return n.ready }

// Run sets up the notifier's buckets and consumers, then turns source
// events into headlines and delivers webhooks until ctx is done. It expects
// JETWAY_EVENTS and JETWAY_OUT to exist (bus.Provision).
func (n *Notifier) Run(ctx context.Context) error {
	if err := n.setup(ctx); err != nil {
		return err
	}
	svc, err := n.startMicro()
	if err != nil {
		return err
	}
	defer func() {
		if err := svc.Stop(); err != nil {
			n.log.Warn().Err(err).Msg("stop the notifier's micro service")
		}
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := n.watchGroundStop(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	for _, loop := range []func() error{
		func() error { return n.runDeliveries(ctx) },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := loop(); err != nil && ctx.Err() == nil {
				select {
				case errc <- err:
				default:
				}
				cancel()
			}
		}()
	}
	var ccs []jetstream.ConsumeContext
	for _, src := range n.sources() {
		cons, err := n.consumer(ctx, src)
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		cc, err := cons.Consume(func(m jetstream.Msg) { n.handle(ctx, src, m) },
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				n.log.Debug().Err(err).Str("consumer", src.durable).Msg("consume")
			}))
		if err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("notifier: consume %s: %w", src.durable, err)
		}
		ccs = append(ccs, cc)
	}
	n.readyOnce.Do(func() { close(n.ready) })
	n.log.Info().Str("id", n.id).Int("webhook_tenants", len(n.cfg.Webhooks)).Msg("notifier running")
	<-ctx.Done()
	for _, cc := range ccs {
		cc.Drain()
		<-cc.Closed()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// setup creates the delivery and dead-letter buckets (idempotently).
func (n *Notifier) setup(ctx context.Context) error {
	var err error
	n.deliveries, err = n.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      BucketDeliveries,
		Description: "jetway webhook deliveries, pending and recently delivered",
		History:     1,
		TTL:         n.cfg.DeliveryRetention,
		Storage:     jetstream.FileStorage,
		Replicas:    n.cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("notifier: bucket %s: %w", BucketDeliveries, err)
	}
	n.dead, err = n.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      BucketDeadLetters,
		Description: "jetway webhook deliveries that ran out of attempts",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    n.cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("notifier: bucket %s: %w", BucketDeadLetters, err)
	}
	return nil
}

// source is one stream the notifier reads headlines from.
type source struct {
	stream, durable, filter string
}

func (n *Notifier) sources() []source {
	return []source{
		// Job and sub-agent events from the streams their writers publish
		// into: one hop, as the runners have from those streams to the
		// session's shard, where the log of record is a hop further.
		{stream: bus.StreamJobEvents, durable: ConsumerEvents, filter: bus.SubjectJobEvents},
		{stream: bus.StreamAgentEvents, durable: ConsumerAgentEvents, filter: bus.SubjectAgentEvents},
		{stream: bus.StreamOut, durable: ConsumerOut, filter: bus.SubjectOut},
	}
}

func (n *Notifier) consumer(ctx context.Context, src source) (jetstream.Consumer, error) {
	cons, err := n.js.CreateOrUpdateConsumer(ctx, src.stream, jetstream.ConsumerConfig{
		Durable:       src.durable,
		Description:   "jetway notifier: headlines from " + src.filter,
		FilterSubject: src.filter,
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       n.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 1000,
		Replicas:      n.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("notifier: consumer %s on %s: %w", src.durable, src.stream, err)
	}
	return cons, nil
}

// derivedID is a stable id made from another: the same source event always
// gives the same headline id and delivery key, which is what makes a
// redelivery a duplicate rather than a second headline.
func derivedID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	b := h.Sum(nil)
	b[6] = b[6]&0x0f | 0x50 // UUID version 5 (name-based, SHA)
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

var semver = regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// microVersion is v as the micro service accepts it (SemVer without a
// leading v); a build stamped "dev" or with a git describe reports 0.0.0.
func microVersion(v string) string {
	v = strings.TrimPrefix(v, "v")
	if semver.MatchString(v) {
		return v
	}
	return "0.0.0"
}
