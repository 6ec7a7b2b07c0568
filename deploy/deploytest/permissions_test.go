package deploytest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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

	// stored reports whether a message was stored on subject (wildcards
	// allowed), as the admin sees it.
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
	// inShards reports whether any shard holds a message of
	// jetway.<kind>.<tenant>.<session> in any partition: nothing takes one
	// out in this test but the runner's ack in its own subtest, so a
	// message stored there is still there.
	inShards := func(t *testing.T, subject string) bool {
		t.Helper()
		kind, rest, _ := strings.Cut(strings.TrimPrefix(subject, "jetway."), ".")
		for k := range deployShards {
			if stored(t, bus.WorkStream(k), "jetway."+kind+".*."+rest) {
				return true
			}
		}
		return false
	}
	// logged waits until the log holds a message on subject (sourced from
	// the shards, a moment after the PubAck).
	logged := func(t *testing.T, subject string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, subject+" in "+bus.StreamEvents, func() bool { return stored(t, bus.StreamEvents, subject) })
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
	// for a PubAck of its own sessions in every shard on the same
	// connection, so whatever the server would do with the first is done
	// in every shard when it returns.
	tenantTries := func(t *testing.T, c *client, subjects ...string) {
		t.Helper()
		for _, s := range subjects {
			if err := c.Publish(s, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		for _, session := range barrierSessions(t, "acme") {
			pubAck(t, c, "jetway.events."+session)
		}
		c.noViolation(t)
	}

	t.Run("tenant_publishes_into_its_own_sessions", func(t *testing.T) {
		acme := d.connect("tenant-acme")
		// Its own view: jetway.events.<session>, stored as
		// jetway.events.<p>.acme.<session> in its partition's shard, and
		// logged as jetway.events.acme.<session>.
		pubAck(t, acme, "jetway.events.s1")
		acme.noViolation(t)
		p := bus.PartitionFor("acme", "s1", deployPartitions)
		if !stored(t, bus.WorkStreamOf(p, deployShards), fmt.Sprintf("jetway.events.%d.acme.s1", p)) {
			t.Errorf("acme's event is not in jetway.events.%d.acme.s1 of %s", p, bus.WorkStreamOf(p, deployShards))
		}
		logged(t, "jetway.events.acme.s1")

		// A plain publish needs no inbox at all: the stream stores it.
		plain := d.connect("tenant-acme")
		if err := plain.Publish("jetway.events.plain", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		plain.noViolation(t)
		logged(t, "jetway.events.acme.plain")
	})

	t.Run("tenant_cannot_publish_into_another_tenant", func(t *testing.T) {
		// No subject of acme's account leads to globex's sessions: naming
		// globex, or itself, in the subject leads nowhere.
		acme := d.connect("tenant-acme")
		// Nor does a partition: the five tokens of the mapped subject, with
		// globex's partition or a forged one, match no import.
		gp, ap := bus.PartitionFor("globex", "s1", deployPartitions), bus.PartitionFor("acme", "s1", deployPartitions)
		forged := (max(gp, ap) + 1) % deployPartitions
		for forged == gp || forged == ap {
			forged = (forged + 1) % deployPartitions
		}
		tenantTries(t, acme, "jetway.events.globex.s1", "jetway.events.acme.globex",
			fmt.Sprintf("jetway.events.%d.globex.s1", gp), fmt.Sprintf("jetway.events.%d.globex.s1", forged),
			fmt.Sprintf("jetway.events.%d.s1", forged), fmt.Sprintf("jetway.events.%d.acme.s1", forged))
		for _, s := range []string{"jetway.events.globex.s1", "jetway.events.acme.globex.s1", "jetway.events.acme.acme.globex",
			"jetway.events.acme.globex"} {
			if inShards(t, s) {
				t.Errorf("acme's event landed on %s", s)
			}
		}
		// acme's own session s1, in a partition acme chose.
		if stored(t, bus.WorkStreamOf(forged, deployShards), fmt.Sprintf("jetway.events.%d.acme.s1", forged)) {
			t.Errorf("acme's event landed in partition %d, which it chose", forged)
		}
		// What the shards do not hold, their log cannot.
		for _, s := range []string{"jetway.events.globex.s1", "jetway.events.*.globex.s1", "jetway.events.*.*.*"} {
			if stored(t, bus.StreamEvents, s) {
				t.Errorf("acme's event was logged on %s", s)
			}
		}
	})

	t.Run("tenant_cannot_forge_a_job_event", func(t *testing.T) {
		acme := d.connect("tenant-acme")
		p := bus.PartitionFor("acme", "s1", deployPartitions)
		tenantTries(t, acme, "jetway.jobevents.acme.s1", "jetway.jobevents.s1", fmt.Sprintf("jetway.jobevents.%d.acme.s1", p))
		if stored(t, bus.StreamJobEvents, bus.SubjectJobEvents) {
			t.Error("a tenant's forged job event was stored in " + bus.StreamJobEvents)
		}
		for _, s := range []string{"jetway.jobevents.acme.s1", "jetway.jobevents.acme.jetway"} {
			if inShards(t, s) || stored(t, bus.StreamEvents, s) {
				t.Errorf("a tenant's forged job event was stored on %s", s)
			}
		}
	})

	t.Run("only_runners_publish_sub_agent_events", func(t *testing.T) {
		for _, user := range []string{"dispatcher", "jobs", "notifier"} {
			c := d.connect(user)
			c.refusePublish(t, "jetway.agentevents.acme.s1", mapped("agentevents", "acme", "s1"))
		}
		tenantTries(t, d.connect("tenant-acme"), "jetway.agentevents.acme.s1", "jetway.agentevents.s1")
		if stored(t, bus.StreamAgentEvents, bus.SubjectAgentEvents) {
			t.Error("a sub-agent event from someone other than a runner was stored")
		}
		run := d.connect("runner")
		pubAck(t, run, "jetway.agentevents.acme.s1")
		run.noViolation(t)
		p := bus.PartitionFor("acme", "s1", deployPartitions)
		if !stored(t, bus.StreamAgentEvents, fmt.Sprintf("jetway.agentevents.%d.acme.s1", p)) {
			t.Errorf("the runner's sub-agent event is not in jetway.agentevents.%d.acme.s1", p)
		}
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
		for _, stream := range []string{bus.StreamEvents, bus.WorkStream(0)} {
			if _, err := acme.js.Stream(ctx, stream); err == nil {
				t.Errorf("acme reached stream %s", stream)
			}
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
			var err2 error
			if user == "spreader" { // its one read: the info of a stream it spreads
				_, err2 = c.js.Stream(ctx, bus.StreamEvents)
			} else {
				_, err2 = c.js.AccountInfo(ctx)
			}
			if err2 != nil {
				t.Errorf("%s: JetStream request over %s: %v", user, bus.ServiceInbox(user), err2)
			}
			cancel()
			c.noViolation(t)
		}
	})

	t.Run("dispatcher_publishes_events_but_not_job_events", func(t *testing.T) {
		disp := d.connect("dispatcher")
		pubAck(t, disp, "jetway.events.globex.s2")
		disp.noViolation(t)
		// Refused as it would be stored: the server checks the mapped
		// subject.
		disp.refusePublish(t, "jetway.jobevents.globex.s2", mapped("jobevents", "globex", "s2"))
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
		// A session's waiting events, in whichever shard it is: every
		// shard's, and the layout from shard 0.
		if l, err := bus.ReadLayout(ctx, disp.js); err != nil || l != (bus.Layout{Partitions: deployPartitions, Shards: deployShards}) {
			t.Fatalf("dispatcher: read the layout: %+v, %v", l, err)
		}
		for k := range deployShards {
			w, err := disp.js.Stream(ctx, bus.WorkStream(k))
			if err != nil {
				t.Fatalf("dispatcher: stream %s: %v", bus.WorkStream(k), err)
			}
			if _, err := w.Info(ctx, jetstream.WithSubjectFilter("jetway.*.*.acme.h1")); err != nil {
				t.Fatalf("dispatcher: count waiting events in %s: %v", bus.WorkStream(k), err)
			}
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
		n.refusePublish(t, "jetway.events.acme.s1", mapped("events", "acme", "s1"))
		n.refusePublish(t, "jetway.jobevents.acme.s1", mapped("jobevents", "acme", "s1"))
		// It reads job events from JETWAY_JOBEVENTS: nothing of the log,
		// which holds host events too.
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
		l, err := bus.ReadLayout(ctx, r.js)
		if err != nil || l != (bus.Layout{Partitions: deployPartitions, Shards: deployShards}) {
			t.Fatalf("runner: read the layout: %+v, %v", l, err)
		}
		// What the runner does on every shard: open it, list its
		// consumers (the release watch), read a consumer.
		for k := range deployShards {
			w, err := r.js.Stream(ctx, bus.WorkStream(k))
			if err != nil {
				t.Fatalf("runner: stream %s: %v", bus.WorkStream(k), err)
			}
			names := 0
			list := w.ListConsumers(ctx)
			for range list.Info() {
				names++
			}
			if err := list.Err(); err != nil {
				t.Fatalf("runner: list the consumers of %s: %v", bus.WorkStream(k), err)
			}
			if want := len(shardPartitions(k)) + 1; names != want { // and the log's source consumer
				t.Errorf("runner: %s lists %d consumers, want %d", bus.WorkStream(k), names, want)
			}
		}
		p := bus.PartitionFor("acme", "s3", deployPartitions)
		shard := bus.WorkStreamOf(p, deployShards)
		cons, err := r.js.Consumer(ctx, shard, bus.WorkConsumerName(p))
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
				if m.Subject() == fmt.Sprintf("jetway.events.%d.acme.s3", p) {
					got = m
				}
			}
			return got != nil
		})
		// The order check: the session's oldest event still in its shard,
		// by a message get (the shards allow no direct get).
		w, err := r.js.Stream(ctx, shard)
		if err != nil {
			t.Fatal(err)
		}
		md, err := got.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if m, err := w.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(bus.SessionFilter(p, "acme", "s3"))); err != nil || m.Sequence != md.Sequence.Stream {
			t.Fatalf("runner: the session's oldest pending event: %v, %v; want sequence %d", m, err, md.Sequence.Stream)
		}
		if err := got.DoubleAck(ctx); err != nil {
			t.Fatalf("runner: ack: %v", err)
		}
		// A takeover, as the runner's partition group makes it: unpin the
		// partition, reset its consumer.
		if err := w.UnpinConsumer(ctx, bus.WorkConsumerName(p), bus.WorkGroup); err != nil {
			t.Fatalf("runner: unpin %s: %v", bus.WorkConsumerName(p), err)
		}
		if _, err := r.js.ResetConsumer(ctx, shard, bus.WorkConsumerName(p)); err != nil {
			t.Fatalf("runner: reset %s: %v", bus.WorkConsumerName(p), err)
		}
		r.noViolation(t)

		r.refusePublish(t, "jetway.jobevents.acme.s3", mapped("jobevents", "acme", "s3"))
		r.refusePublish(t, "jetway.events.acme.s3", mapped("events", "acme", "s3"))
		r.refusePublish(t, fmt.Sprintf("jetway.events.%d.acme.s3", p))
	})

	t.Run("only_the_runner_consumes_the_shards", func(t *testing.T) {
		p := bus.PartitionFor("acme", "s3", deployPartitions)
		shard := bus.WorkStreamOf(p, deployShards)
		next := "$JS.API.CONSUMER.MSG.NEXT." + shard + "." + bus.WorkConsumerName(p)
		for _, user := range []string{"dispatcher", "jobs", "notifier"} {
			c := d.connect(user)
			c.refuseAPI(t, next, func(ctx context.Context) error {
				_, err := c.RequestWithContext(ctx, next, []byte(`{"batch":1}`))
				return err
			})
			c.refusePublish(t, "$JS.ACK."+shard+"."+bus.WorkConsumerName(p)+".1.1.1.1.0")
			c.refuseAPI(t, "$JS.API.STREAM.MSG.GET."+shard, func(ctx context.Context) error {
				_, err := c.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+shard, []byte(`{"seq":1}`))
				return err
			})
			if user == "dispatcher" {
				continue // it counts a session's waiting events there
			}
			c.refuseAPI(t, "$JS.API.STREAM.INFO."+shard, func(ctx context.Context) error {
				_, err := c.js.Stream(ctx, shard)
				return err
			})
		}
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
		p := bus.PartitionFor("acme", "s4", deployPartitions)
		testutil.Eventually(t, 30*time.Second, "the job event sourced into its shard", func() bool {
			return stored(t, bus.WorkStreamOf(p, deployShards), fmt.Sprintf("jetway.jobevents.%d.acme.s4", p))
		})
		j.refusePublish(t, "jetway.events.acme.s4", mapped("events", "acme", "s4"))
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
			for _, stream := range []string{bus.StreamEvents, bus.WorkStream(0), bus.WorkStream(deployShards - 1)} {
				c.refuseAPI(t, "$JS.API.STREAM.DELETE."+stream, func(ctx context.Context) error {
					return c.js.DeleteStream(ctx, stream)
				})
				c.refuseAPI(t, "$JS.API.STREAM.PURGE."+stream, func(ctx context.Context) error {
					_, err := c.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+stream, []byte(`{}`))
					return err
				})
			}
		}
	})

	t.Run("no_user_reaches_a_sources_delivery_subject", func(t *testing.T) {
		// The server delivers each durable source consumer's messages on
		// a subject of its own (jetway.sourcing.…): a publish there would
		// be taken for a copied message, a subscription would read every
		// message copied. Read from the live deployment, so a source
		// added later is tried without a change here.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var delivers []string
		streams := admin.js.ListStreams(ctx)
		for info := range streams.Info() {
			for _, src := range info.Config.Sources {
				if src != nil && src.Consumer != nil && src.Consumer.DeliverSubject != "" {
					delivers = append(delivers, src.Consumer.DeliverSubject)
				}
			}
		}
		if err := streams.Err(); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(delivers, "jetway.sourcing.sessions") || len(delivers) < deployShards+1 {
			t.Fatalf("delivery subjects of the sources %v: want the log's, the shards' and the session records copy's", delivers)
		}
		for _, user := range serviceUsers {
			c := d.connect(user)
			for _, subject := range delivers {
				c.refusePublish(t, subject)
				c.refuseSubscribe(t, subject)
			}
		}
		// A tenant account has no such subject: a publish there stays in
		// its account, where nothing listens.
		tenantTries(t, d.connect("tenant-acme"), delivers...)
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
		// What a schedule fires is stored by the server; nobody publishes
		// it, with its partition (jetway.fired.<p>.<t>.<s>, what layovers
		// target now) or without (the old form).
		fired := fmt.Sprintf("jetway.fired.%d.acme.s6", bus.PartitionFor("acme", "s6", deployPartitions))
		for _, user := range []string{"runner", "dispatcher", "jobs", "notifier"} {
			c := d.connect(user)
			c.refusePublish(t, "jetway.fired.acme.s6")
			c.refusePublish(t, fired)
		}
		tenantTries(t, d.connect("tenant-acme"), "jetway.schedules.acme.s6.l2", "jetway.schedules.s6.l2", "jetway.fired.acme.s6", "jetway.fired.s6", fired)
		if stored(t, bus.StreamSchedules, "jetway.fired.>") {
			t.Error("a publish on jetway.fired.> was stored")
		}
		if stored(t, bus.StreamSchedules, "jetway.schedules.acme.s6.l2") {
			t.Error("a publish on jetway.schedules.acme.s6.l2 was stored")
		}
	})
}

// mapped is jetway.<kind>.<tenant>.<session> as the deployment's partition
// mapping makes it: the subject the server checks permissions on.
func mapped(kind, tenant, session string) string {
	return fmt.Sprintf("jetway.%s.%d.%s.%s", kind, bus.PartitionFor(tenant, session, deployPartitions), tenant, session)
}

// shardPartitions are the deployment's partitions in shard k.
func shardPartitions(k int) []int {
	var ps []int
	for p := range deployPartitions {
		if bus.ShardOf(p, deployShards) == k {
			ps = append(ps, p)
		}
	}
	return ps
}

// barrierSessions are sessions of tenant, one in each of the deployment's
// shards: a PubAck from each comes after everything the same connection
// published before into any shard.
func barrierSessions(t testing.TB, tenant string) []string {
	t.Helper()
	var out []string
	for k := range deployShards {
		for i := 0; ; i++ {
			if i > 1000 {
				t.Fatalf("no session of %s lands in shard %d", tenant, k)
			}
			s := fmt.Sprintf("barrier-%d", i)
			if bus.ShardOf(bus.PartitionFor(tenant, s, deployPartitions), deployShards) == k {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// TestPermissions_name_exactly_the_shards_the_deployment_provisions reads
// accounts.conf's permission lines: NATS wildcards match whole tokens, so
// the rights on the work shards name each one, and a K changed in the
// manifests without them would leave the runners unable to consume a
// shard, or grant one that holds nothing yet. Every shard the deployment
// provisions has the same rights as shard 0, no other shard and not the
// old unsharded queue is named, and only the runner, the dispatcher
// (which counts a session's waiting events) and the spreader (which moves
// their leaders) have any right on them.
func TestPermissions_name_exactly_the_shards_the_deployment_provisions(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(confDir, "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	userLine := regexp.MustCompile(`^\s*\{\s*user:\s*([a-z]+)\b`)
	grant := regexp.MustCompile(`^\s*"([^"]*)"\s*$`)
	shardName := regexp.MustCompile(`JETWAY_WORK(_[0-9]+)?(\.|$)`)
	// user → shard → the user's rights on it, the shard's name blanked.
	rights := map[string]map[string][]string{}
	user := ""
	for _, line := range strings.Split(string(text), "\n") {
		if m := userLine.FindStringSubmatch(line); m != nil {
			user = m[1]
			continue
		}
		m := grant.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		sm := shardName.FindStringSubmatch(m[1])
		if sm == nil {
			continue
		}
		if sm[1] == "" {
			t.Errorf("%s: %q names the old unsharded queue %s", user, m[1], bus.StreamWork)
			continue
		}
		name := "JETWAY_WORK" + sm[1]
		if rights[user] == nil {
			rights[user] = map[string][]string{}
		}
		rights[user][name] = append(rights[user][name], strings.Replace(m[1], name, "<shard>", 1))
	}
	var users []string
	for u := range rights {
		users = append(users, u)
	}
	slices.Sort(users)
	if !slices.Equal(users, []string{"dispatcher", "runner", "spreader"}) {
		t.Errorf("users with rights on the shards: %v, want dispatcher, runner and spreader only", users)
	}
	for _, u := range users {
		var want []string
		for k := range deployShards {
			want = append(want, bus.WorkStream(k))
		}
		var got []string
		for name := range rights[u] {
			got = append(got, name)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s's rights name shards %v, want the deployment's %v", u, got, want)
		}
		for _, name := range got {
			if !slices.Equal(rights[u][name], rights[u][bus.WorkStream(0)]) {
				t.Errorf("%s's rights on %s %v differ from those on %s %v", u, name, rights[u][name], bus.WorkStream(0), rights[u][bus.WorkStream(0)])
			}
		}
	}
	if !slices.Contains(rights["runner"][bus.WorkStream(0)], "$JS.ACK.<shard>.>") {
		t.Errorf("the runner may not ack on the shards: %v", rights["runner"][bus.WorkStream(0)])
	}
	if got, want := rights["spreader"][bus.WorkStream(0)], []string{"$JS.API.STREAM.INFO.<shard>", "$JS.API.STREAM.LEADER.STEPDOWN.<shard>"}; !slices.Equal(got, want) {
		t.Errorf("the spreader's rights on a shard: %v, want %v", got, want)
	}
}
