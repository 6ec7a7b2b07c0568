package deploytest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
)

// TestPermissions runs every user of deploy/nats/accounts.conf, and a user
// of a tenant's own account, against a real three-node cluster: each
// boundary the design depends on refuses (a service's permissions) or
// leads nowhere (a tenant's account), and each user's own job still works.
func TestPermissions(t *testing.T) {
	d := render(t, renderOptions{})
	d.startCluster()
	d.provision()
	admin := d.connect("admin")

	// stored reports whether a message was stored on subject, as the admin
	// sees it.
	stored := func(t *testing.T, stream, subject string) bool {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := admin.js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.GetLastMsgForSubject(ctx, subject)
		return err == nil
	}
	pubAck := func(t *testing.T, c *client, subject string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.js.Publish(ctx, subject, []byte(`{}`)); err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
	}

	// tenantTries publishes on subject from a tenant's account, then waits
	// for a PubAck of its own session on the same connection, so whatever
	// the server would do with the first is done when it returns.
	tenantTries := func(t *testing.T, c *client, subjects ...string) {
		t.Helper()
		for _, s := range subjects {
			if err := c.Publish(s, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		pubAck(t, c, "jetway.events.barrier")
		c.noViolation(t)
	}

	t.Run("tenant_publishes_into_its_own_sessions", func(t *testing.T) {
		acme := d.connect("tenant-acme")
		// Its own view: jetway.events.<session>, stored as
		// jetway.events.acme.<session> in JETWAY.
		pubAck(t, acme, "jetway.events.s1")
		acme.noViolation(t)
		if !stored(t, bus.StreamEvents, "jetway.events.acme.s1") {
			t.Error("acme's event is not in jetway.events.acme.s1")
		}

		// A plain publish needs no inbox at all: the stream stores it.
		plain := d.connect("tenant-acme")
		if err := plain.Publish("jetway.events.plain", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		plain.noViolation(t)
		testutil.Eventually(t, 30*time.Second, "plain publish stored", func() bool { return stored(t, bus.StreamEvents, "jetway.events.acme.plain") })
	})

	t.Run("tenant_cannot_publish_into_another_tenant", func(t *testing.T) {
		// No subject of acme's account leads to globex's sessions: naming
		// globex, or itself, in the subject leads nowhere.
		acme := d.connect("tenant-acme")
		tenantTries(t, acme, "jetway.events.globex.s1", "jetway.events.acme.globex")
		for _, s := range []string{"jetway.events.globex.s1", "jetway.events.acme.globex.s1", "jetway.events.acme.acme.globex"} {
			if stored(t, bus.StreamEvents, s) {
				t.Errorf("acme's event landed on %s", s)
			}
		}
	})

	t.Run("tenant_cannot_forge_a_job_event", func(t *testing.T) {
		acme := d.connect("tenant-acme")
		tenantTries(t, acme, "jetway.jobevents.acme.s1", "jetway.jobevents.s1")
		for _, s := range []string{"jetway.jobevents.acme.s1", "jetway.jobevents.s1"} {
			if stored(t, bus.StreamJobEvents, s) || stored(t, bus.StreamEvents, s) {
				t.Errorf("a tenant's forged job event was stored on %s", s)
			}
		}
	})

	t.Run("only_runners_publish_sub_agent_events", func(t *testing.T) {
		for _, user := range []string{"dispatcher", "jobs", "notifier"} {
			c := d.connect(user)
			c.refusePublish(t, "jetway.agentevents.acme.s1")
		}
		tenantTries(t, d.connect("tenant-acme"), "jetway.agentevents.acme.s1", "jetway.agentevents.s1")
		if stored(t, bus.StreamAgentEvents, "jetway.agentevents.acme.s1") {
			t.Error("a sub-agent event from someone other than a runner was stored")
		}
		run := d.connect("runner")
		pubAck(t, run, "jetway.agentevents.acme.s1")
		run.noViolation(t)
	})

	t.Run("tenant_cannot_listen_to_other_inboxes_or_the_api", func(t *testing.T) {
		// Everyone on node-1 (nats.DontRandomize and the URL list's order),
		// so a message published and flushed before the barrier reaches
		// acme's subscription before it.
		one := nats.DontRandomize()
		acme := d.connect("tenant-acme", one)
		// Anything at all in acme's account: it may subscribe to it, and
		// hears only its own.
		all, err := acme.SubscribeSync(">")
		if err != nil {
			t.Fatal(err)
		}
		acme.noViolation(t)
		globex := d.connect("tenant-globex", one)
		pubAck(t, globex, "jetway.events.g1") // its PubAck travels on its inbox
		for user, subjects := range map[string][]string{
			"runner":     {"jetway.out.globex.g1", "jetway.transcript.globex.g1"},
			"notifier":   {"jetway.notify.globex.g1"},
			"dispatcher": {"jetway.events.globex.g1", "_INBOX_dispatcher.x"},
		} {
			c := d.connect(user, one)
			for _, s := range subjects {
				if err := c.Publish(s, []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		// The barrier: acme's own run output reaches it.
		run := d.connect("runner", one)
		pubAck(t, run, "jetway.out.acme.barrier")
		for {
			m, err := all.NextMsg(10 * time.Second)
			if err != nil {
				t.Fatalf("acme did not get its own run output: %v", err)
			}
			if m.Subject == "jetway.out.barrier" {
				break
			}
			t.Errorf("acme heard %s: %s", m.Subject, m.Data)
		}
		// And the JetStream API does not exist in its account.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		noJetStream(t, ctx, acme, "$JS.API.STREAM.INFO."+bus.StreamEvents, "")
		if _, err := acme.js.Stream(ctx, bus.StreamEvents); err == nil {
			t.Errorf("acme reached stream %s", bus.StreamEvents)
		}
	})

	t.Run("each_service_reads_only_its_own_inbox", func(t *testing.T) {
		for _, user := range serviceUsers {
			c := d.connect(user)
			own, err := c.SubscribeSync(bus.ServiceInbox(user) + ".>")
			if err != nil {
				t.Fatal(err)
			}
			c.noViolation(t)
			_ = own.Unsubscribe()
			c.refuseSubscribe(t, "_INBOX.>")
			for _, other := range serviceUsers {
				if other != user {
					c.refuseSubscribe(t, bus.ServiceInbox(other)+".>")
				}
			}
			// And its own requests are answered on its own inbox: the
			// JetStream API round trip works.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := c.js.AccountInfo(ctx); err != nil {
				t.Errorf("%s: JetStream request over %s: %v", user, bus.ServiceInbox(user), err)
			}
			cancel()
			c.noViolation(t)
		}
	})

	t.Run("dispatcher_publishes_events_but_not_job_events", func(t *testing.T) {
		disp := d.connect("dispatcher")
		pubAck(t, disp, "jetway.events.globex.s2")
		disp.noViolation(t)
		disp.refusePublish(t, "jetway.jobevents.globex.s2")
		disp.refuseSubscribe(t, "jetway.transcript.>")
	})

	t.Run("dispatcher_reads_history_and_jobs_but_starts_no_job", func(t *testing.T) {
		r := d.connect("runner")
		pubAck(t, r, "jetway.transcript.acme.h1")
		disp := d.connect("dispatcher")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := disp.js.Stream(ctx, bus.StreamTranscripts)
		if err != nil {
			t.Fatalf("dispatcher: stream %s: %v", bus.StreamTranscripts, err)
		}
		if _, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject("jetway.transcript.acme.h1")); err != nil {
			t.Fatalf("dispatcher: read a transcript record: %v", err)
		}
		w, err := disp.js.Stream(ctx, bus.WorkStream(0))
		if err != nil {
			t.Fatalf("dispatcher: stream %s: %v", bus.WorkStream(0), err)
		}
		if _, err := w.Info(ctx, jetstream.WithSubjectFilter("*.jetway.*.acme.h1")); err != nil {
			t.Fatalf("dispatcher: count waiting events: %v", err)
		}
		if _, err := disp.js.KeyValue(ctx, bus.BucketWorkers); err != nil {
			t.Fatalf("dispatcher: bucket %s: %v", bus.BucketWorkers, err)
		}
		// Input answers name the Ground Stop switches from a watch.
		ctl, err := disp.js.KeyValue(ctx, bus.BucketControl)
		if err != nil {
			t.Fatalf("dispatcher: bucket %s: %v", bus.BucketControl, err)
		}
		stops, err := ctl.WatchFiltered(ctx, []string{"groundstop", "groundstop.>"})
		if err != nil {
			t.Fatalf("dispatcher: watch Ground Stop: %v", err)
		}
		defer stops.Stop()
		select {
		case <-stops.Updates():
		case <-ctx.Done():
			t.Fatal("dispatcher: the Ground Stop watch replayed nothing")
		}
		disp.noViolation(t)
		disp.refuseAPI(t, "$JS.API.CONSUMER.CREATE.JETWAY_TRANSCRIPTS.peek", func(ctx context.Context) error {
			_, err := disp.js.CreateConsumer(ctx, bus.StreamTranscripts, jetstream.ConsumerConfig{Name: "peek"})
			return err
		})
		disp.refusePublish(t, "jetway.jobs.w1.start")
		disp.refusePublish(t, "jetway.jobs.w1.run")
		// The session detail reads its MCP servers' states, and may not
		// start, talk to or report on one.
		if err := disp.Publish("jetway.jobs.w1.mcp_state", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		disp.noViolation(t)
		for _, op := range []string{"mcp_open", "mcp_send", "mcp_recv", "mcp_close", "mcp_report"} {
			disp.refusePublish(t, "jetway.jobs.w1."+op)
		}
	})

	t.Run("notifier_cannot_publish_events", func(t *testing.T) {
		n := d.connect("notifier")
		pubAck(t, n, "jetway.notify.acme.s1")
		n.noViolation(t)
		n.refusePublish(t, "jetway.events.acme.s1")
		n.refusePublish(t, "jetway.jobevents.acme.s1")
		// Its consumer on JETWAY_EVENTS may only ever see job events.
		n.refuseAPI(t, "$JS.API.CONSUMER.CREATE.JETWAY_EVENTS.notifier-events.jetway.events.>", func(ctx context.Context) error {
			_, err := n.js.CreateOrUpdateConsumer(ctx, bus.StreamEvents, jetstream.ConsumerConfig{
				Durable: "notifier-events", FilterSubject: bus.SubjectEvents,
			})
			return err
		})
	})

	t.Run("runner_consumes_work_and_writes_transcripts_but_not_job_events", func(t *testing.T) {
		r := d.connect("runner")
		pubAck(t, r, "jetway.transcript.acme.s3")
		pubAck(t, r, "jetway.out.acme.s3")
		r.noViolation(t)

		disp := d.connect("dispatcher")
		pubAck(t, disp, "jetway.events.acme.s3")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		p := bus.PartitionFor("acme", "s3", 4)
		cons, err := r.js.Consumer(ctx, bus.WorkStream(0), bus.WorkConsumerName(p))
		if err != nil {
			t.Fatalf("runner: work consumer %d: %v", p, err)
		}
		var got jetstream.Msg
		testutil.Eventually(t, 30*time.Second, "work message for acme/s3", func() bool {
			batch, err := cons.Fetch(10, jetstream.FetchMaxWait(time.Second), jetstream.FetchPriorityGroup(bus.WorkGroup))
			if err != nil {
				t.Fatalf("runner: fetch: %v", err)
			}
			for m := range batch.Messages() {
				if m.Subject() == fmt.Sprintf("%d.jetway.events.acme.s3", p) {
					got = m
				}
			}
			return got != nil
		})
		if err := got.DoubleAck(ctx); err != nil {
			t.Fatalf("runner: ack: %v", err)
		}
		r.noViolation(t)

		r.refusePublish(t, "jetway.jobevents.acme.s3")
		r.refusePublish(t, "jetway.events.acme.s3")
	})

	t.Run("jobs_publish_job_events_and_keep_their_table", func(t *testing.T) {
		j := d.connect("jobs")
		pubAck(t, j, "jetway.jobevents.acme.s4")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kv, err := j.js.KeyValue(ctx, bus.BucketJobs)
		if err != nil {
			t.Fatalf("jobs: bucket %s: %v", bus.BucketJobs, err)
		}
		if _, err := kv.Put(ctx, "w1.acme.s4.1", []byte(`{}`)); err != nil {
			t.Fatalf("jobs: put: %v", err)
		}
		// A replicated bucket answers reads from any replica (direct get),
		// so a follower may not have the put yet: not found is "not yet".
		var getErr error
		testutil.Eventually(t, 30*time.Second, "the jobs user to read back its put", func() bool {
			_, getErr = kv.Get(ctx, "w1.acme.s4.1")
			if getErr != nil && !errors.Is(getErr, jetstream.ErrKeyNotFound) {
				t.Fatalf("jobs: get: %v", getErr)
			}
			return getErr == nil
		})
		j.noViolation(t)
		j.refusePublish(t, "jetway.events.acme.s4")
	})

	t.Run("jobs_cannot_read_transcripts", func(t *testing.T) {
		j := d.connect("jobs")
		j.refuseSubscribe(t, "jetway.transcript.>")
		j.refuseAPI(t, "$JS.API.STREAM.INFO.JETWAY_TRANSCRIPTS", func(ctx context.Context) error {
			_, err := j.js.Stream(ctx, bus.StreamTranscripts)
			return err
		})
		j.refuseAPI(t, "$JS.API.DIRECT.GET.JETWAY_TRANSCRIPTS.jetway.transcript.acme.s3", func(ctx context.Context) error {
			msg, err := j.RequestWithContext(ctx, "$JS.API.DIRECT.GET.JETWAY_TRANSCRIPTS.jetway.transcript.acme.s3", nil)
			if err == nil && msg.Header.Get("Status") != "" {
				return fmt.Errorf("status %s", msg.Header.Get("Status"))
			}
			return err
		})
		j.refuseAPI(t, "$JS.API.CONSUMER.CREATE.JETWAY_TRANSCRIPTS.peek", func(ctx context.Context) error {
			_, err := j.js.CreateConsumer(ctx, bus.StreamTranscripts, jetstream.ConsumerConfig{Name: "peek"})
			return err
		})
	})

	t.Run("services_cannot_administer_streams", func(t *testing.T) {
		for _, user := range []string{"dispatcher", "runner", "jobs", "notifier"} {
			c := d.connect(user)
			c.refuseAPI(t, "$JS.API.STREAM.DELETE.JETWAY_EVENTS", func(ctx context.Context) error {
				return c.js.DeleteStream(ctx, bus.StreamEvents)
			})
		}
	})

	t.Run("only_the_dispatcher_writes_agent_profiles_and_runners_read_them", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		disp := d.connect("dispatcher")
		dkv, err := disp.js.KeyValue(ctx, bus.BucketAgents)
		if err != nil {
			t.Fatalf("dispatcher: bucket %s: %v", bus.BucketAgents, err)
		}
		v1, err := dkv.Put(ctx, "acme.reviewer", []byte(`{"instructions":"v1"}`))
		if err != nil {
			t.Fatalf("dispatcher: put a profile: %v", err)
		}
		if _, err := dkv.Put(ctx, "acme.reviewer", []byte(`{"instructions":"v2"}`)); err != nil {
			t.Fatalf("dispatcher: update a profile: %v", err)
		}
		lister, err := dkv.ListKeysFiltered(ctx, "acme.*")
		if err != nil {
			t.Fatalf("dispatcher: list profiles: %v", err)
		}
		for range lister.Keys() {
		}
		disp.noViolation(t)

		r := d.connect("runner")
		rkv, err := r.js.KeyValue(ctx, bus.BucketAgents)
		if err != nil {
			t.Fatalf("runner: bucket %s: %v", bus.BucketAgents, err)
		}
		// A replica may not have the puts yet: not found is "not yet".
		testutil.Eventually(t, 30*time.Second, "the runner to read the current profile", func() bool {
			e, err := rkv.Get(ctx, "acme.reviewer")
			if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("runner: get: %v", err)
			}
			return err == nil && string(e.Value()) == `{"instructions":"v2"}`
		})
		if e, err := rkv.GetRevision(ctx, "acme.reviewer", v1); err != nil || string(e.Value()) != `{"instructions":"v1"}` {
			t.Fatalf("runner: read version %d: %v", v1, err)
		}
		defaults, err := rkv.Watch(ctx, "*.default")
		if err != nil {
			t.Fatalf("runner: watch the default profiles: %v", err)
		}
		select {
		case <-defaults.Updates():
		case <-ctx.Done():
			t.Fatal("runner: the watch of default profiles said nothing")
		}
		_ = defaults.Stop()
		r.noViolation(t)
		for _, user := range []string{"runner", "jobs", "notifier"} {
			c := d.connect(user)
			c.refusePublish(t, "$KV.jetway_agents.acme.reviewer")
		}
		tenantTries(t, d.connect("tenant-acme"), "$KV.jetway_agents.acme.reviewer", "$KV.jetway_agents.reviewer")
		if e, err := dkv.Get(ctx, "acme.reviewer"); err != nil || string(e.Value()) != `{"instructions":"v2"}` {
			t.Fatalf("the profile changed under a refused writer: %v", err)
		}
	})

	t.Run("only_the_runner_writes_layover_schedules", func(t *testing.T) {
		r := d.connect("runner")
		pubAck(t, r, "jetway.schedules.acme.s6.l1")
		r.noViolation(t)
		for _, user := range []string{"dispatcher", "jobs", "notifier"} {
			c := d.connect(user)
			c.refusePublish(t, "jetway.schedules.acme.s6.l2")
		}
		// What a schedule fires is stored by the server; nobody publishes it.
		for _, user := range []string{"runner", "dispatcher", "jobs", "notifier"} {
			c := d.connect(user)
			c.refusePublish(t, "jetway.fired.acme.s6")
		}
		tenantTries(t, d.connect("tenant-acme"), "jetway.schedules.acme.s6.l2", "jetway.schedules.s6.l2", "jetway.fired.acme.s6", "jetway.fired.s6")
		if stored(t, bus.StreamSchedules, "jetway.fired.acme.s6") {
			t.Error("a publish on jetway.fired.acme.s6 was stored")
		}
		if stored(t, bus.StreamSchedules, "jetway.schedules.acme.s6.l2") {
			t.Error("a publish on jetway.schedules.acme.s6.l2 was stored")
		}
	})
}
