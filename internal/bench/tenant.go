package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
)

// Names of the tenant account figures.
const (
	FigTenantSyncP50 = "tenant account publish p50 (through its import)"
	FigTenantSyncP99 = "tenant account publish p99 (through its import)"
	FigTenantAsync   = "tenant account async publish rate (through its import)"
)

// benchTenant is the tenant account the bench publishes through.
const benchTenant = "bench"

// benchPartitions is P on the bench's own server: its partition mapping,
// which the runner figures' streams are provisioned with.
const benchPartitions = bus.DefaultPartitions

// benchAccounts writes the account layout for the bench's embedded server:
// the services' account as in production, with its partition mapping and
// the transport floor's beside it (floorMapping), entered by any client
// without credentials (no_auth_user, so the bench and the processes it
// starts connect as before), and one tenant account with a credential.
func benchAccounts(dir string) (conf string, creds bus.TenantCredentials, err error) {
	creds = bus.TenantCredentials{Dir: filepath.Join(dir, "tenants")}
	if _, err := creds.Ensure(benchTenant, ""); err != nil {
		return "", creds, err
	}
	if err := creds.WriteTenantsConf(filepath.Join(dir, "tenants.conf")); err != nil {
		return "", creds, err
	}
	conf = filepath.Join(dir, "accounts.conf")
	text := bus.DevAccountsConf("bench", "bench", "tenants.conf", benchPartitions) + "no_auth_user: bench\n"
	const block = "    mappings: {\n"
	if !strings.Contains(text, block) {
		return "", creds, fmt.Errorf("bench: accounts: no %q block in the JETWAY account to add the floor's mapping to", strings.TrimSpace(block))
	}
	m := floorMapping(benchPartitions)
	text = strings.Replace(text, block, fmt.Sprintf("%s      %q: %q\n", block, m.From, m.To), 1)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return "", creds, fmt.Errorf("bench: accounts: %w", err)
	}
	return conf, creds, nil
}

// measureTenant times what an outside system pays to publish an event
// through its tenant account: the import maps the subject into JETWAY,
// JETWAY's mapping puts the partition in (jetway.events.<p>.<tenant>.…),
// and the stream's ack is routed back. It runs right after the raw figures and
// compares with them; it needs the bench's own server (the layout).
func (e *env) measureTenant(ctx context.Context) {
	const goal = "≤ 2× raw"
	if e.tenantCreds.Dir == "" {
		for _, f := range []string{FigTenantSyncP50, FigTenantSyncP99, FigTenantAsync} {
			e.skip(f, "ms", goal, fmt.Errorf("the bench runs against --nats %s, not its own server with the account layout", e.url))
		}
		return
	}
	msg, err := sampleEvent()
	if err != nil {
		e.skip(FigTenantSyncP50, "ms", goal, err)
		return
	}
	name := "BENCH_TENANT_" + uid()
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{"jetway.events.*." + benchTenant + ".*"}, Storage: jetstream.FileStorage, Replicas: 1,
	}); err != nil {
		e.skip(FigTenantSyncP50, "ms", goal, fmt.Errorf("create stream: %w", err))
		return
	}
	defer func() { _ = e.js.DeleteStream(context.WithoutCancel(ctx), name) }()
	opt, err := nats.NkeyOptionFromSeed(e.tenantCreds.Path(benchTenant, ""))
	if err != nil {
		e.skip(FigTenantSyncP50, "ms", goal, err)
		return
	}
	nc, err := nats.Connect(e.url, opt, nats.Name("jetway-bench-tenant"))
	if err != nil {
		e.skip(FigTenantSyncP50, "ms", goal, fmt.Errorf("connect as tenant %s: %w", benchTenant, err))
		return
	}
	defer nc.Close()
	// A tenant account has no JetStream API, but a publish with a reply
	// gets the stream's PubAck back through the import: the client's
	// publish calls need only that.
	tjs, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(2*time.Minute))
	if err != nil {
		e.skip(FigTenantSyncP50, "ms", goal, err)
		return
	}
	out := func(subject string) *nats.Msg {
		return &nats.Msg{Subject: subject, Header: withoutMsgID(msg.Header), Data: msg.Data}
	}
	e.progress("tenant account: %d sync publishes through the import", e.sizes.RawSamples)
	var sync samples
	for i := range e.sizes.RawSamples + e.sizes.RawSamples/10 {
		t0 := time.Now()
		if _, err := tjs.PublishMsg(ctx, out("jetway.events.sync")); err != nil {
			e.skip(FigTenantSyncP50, "ms", goal, fmt.Errorf("sync publish: %w", err))
			return
		}
		if i >= e.sizes.RawSamples/10 {
			sync = append(sync, time.Since(t0))
		}
	}
	e.add(figure(FigTenantSyncP50, "ms", sync.pct(50)).vs("raw js sync publish p50", e.base.syncP50).
		goal(goal, sync.pct(50) <= 2*e.base.syncP50).note("%d publishes from tenant %s's account, each awaiting its ack", len(sync), benchTenant))
	e.add(figure(FigTenantSyncP99, "ms", sync.pct(99)).vs("raw js sync publish p99", e.base.syncP99).info("-"))

	n := e.sizes.RawMessages
	e.progress("tenant account: %d async publishes through the import", n)
	t0 := time.Now()
	for range n {
		if _, err := tjs.PublishMsgAsync(out("jetway.events.async")); err != nil {
			e.skip(FigTenantAsync, "msgs/s", goal, fmt.Errorf("async publish: %w", err))
			return
		}
	}
	wctx, cancel := deadline(ctx, 2*time.Minute)
	defer cancel()
	select {
	case <-tjs.PublishAsyncComplete():
	case <-wctx.Done():
		e.skip(FigTenantAsync, "msgs/s", goal, fmt.Errorf("async publishes not acked: %w", wctx.Err()))
		return
	}
	r := rate(n, time.Since(t0))
	// Informational: every request through a service import makes the
	// server track a response mapping back to the tenant's reply subject,
	// which is what keeps the reply inside the tenant's account. Only
	// systems publishing straight onto the bus pay it; the dispatcher
	// publishes in JETWAY.
	e.add(figure(FigTenantAsync, "msgs/s", r).vs("raw js async publish rate", e.base.asyncRate).info("-").
		note("%d messages, each acked back through the import", n))
}
