package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/nats-io/nats.go"

	"jetway/internal/tenantattack"
	"jetway/internal/testutil"
	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/client"
	"jetway/pkg/events"
)

// Tokens of two tenants besides default, written into tokens.json before
// dev starts: dev makes a NATS account and a credential for each.
const (
	acmeUser    = "jw_e2e_acme_user_token"
	acmeAdmin   = "jw_e2e_acme_admin_token"
	globexUser  = "jw_e2e_globex_user_token"
	globexAdmin = "jw_e2e_globex_admin_token"
)

func tenantTokens(t *testing.T) string {
	t.Helper()
	b, err := json.Marshal(auth.File{
		Tokens: []auth.Grant{
			{Token: "jw_e2e_default_user_token", Tenant: auth.DefaultTenant},
			{Token: "jw_e2e_default_admin_token", Tenant: auth.DefaultTenant, Admin: true},
			{Token: acmeUser, Tenant: "acme"}, {Token: acmeAdmin, Tenant: "acme", Admin: true},
			{Token: globexUser, Tenant: "globex"}, {Token: globexAdmin, Tenant: "globex", Admin: true},
		},
		Operators: []auth.Grant{{Token: "jw_e2e_operator_token", Tenant: auth.DefaultTenant}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// connectTenant connects with the credential dev wrote for tenant.
func connectTenant(t *testing.T, d *devStack, tenant string) *nats.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := bus.Connect(ctx, bus.ConnConfig{
		URLs: []string{d.NATSURL}, Name: t.Name() + "-" + tenant,
		NKeySeedFile: filepath.Join(d.Data, "tenants", tenant+bus.SeedFileExt),
	})
	if err != nil {
		t.Fatalf("connect as tenant %s: %v", tenant, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestTenantAccounts_in_dev holds the tenant boundary of `jetway dev`,
// which runs the production account layout: a tenant's credential reaches
// its own sessions and nothing else, whatever reply, subject or header it
// tries.
func TestTenantAccounts_in_dev(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{Script: echoScript, Files: map[string]string{auth.DevTokensFile: tenantTokens(t)}})
	acme := connectTenant(t, d, "acme")

	t.Run("an_input_published_with_the_tenant_credential_starts_a_run", func(t *testing.T) {
		out := make(chan *nats.Msg, 64)
		sub, err := acme.ChanSubscribe("jetway.out.own1", out) // the tenant's own view of jetway.out.acme.own1
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		e := cloudevents.NewEvent()
		e.SetID("tenant-input-1")
		e.SetSource("e2e/outside-system")
		e.SetType(events.TypeInput)
		if err := e.SetData(cloudevents.ApplicationJSON, map[string]string{"text": "hello over the tenant account"}); err != nil {
			t.Fatal(err)
		}
		msg, err := events.Encode(context.Background(), "jetway.events.own1", e)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := acme.RequestMsg(msg, 10*time.Second)
		if err != nil {
			t.Fatalf("publish through the tenant account: %v", err)
		}
		var pa struct {
			Stream string `json:"stream"`
			Seq    uint64 `json:"seq"`
		}
		// Stored in the work shard of the session's partition (the log
		// sources it from there).
		layout, err := bus.ReadLayout(context.Background(), d.jetStream(t))
		if err != nil {
			t.Fatal(err)
		}
		want := layout.Stream(bus.PartitionFor("acme", "own1", layout.Partitions))
		if err := json.Unmarshal(ack.Data, &pa); err != nil || pa.Stream != want {
			t.Fatalf("PubAck %s (%v): want one from %s", ack.Data, err, want)
		}
		waitRunStarted(t, d, out, "jetway.out.own1")
	})

	t.Run("an_outside_system_added_as_a_user_publishes_with_the_CloudEvents_SDK_until_revoked", func(t *testing.T) {
		tenants := func(args ...string) {
			t.Helper()
			out, err := exec.Command(jetwayBinary(t), append([]string{"tenants"}, append(args, "--data", d.Data)...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("jetway tenants %v: %v\n%s", args, err, out)
			}
		}
		tenants("add", "acme", "--user", "ci")
		seed := filepath.Join(d.Data, "tenants", "acme.ci"+bus.SeedFileExt)
		opt, err := nats.NkeyOptionFromSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		// The dev bus reloads on the command's signal: connect once it has.
		var ci *nats.Conn
		testutil.EventuallyNil(t, 30*time.Second, "the new user's credential is accepted", func() error {
			var err error
			ci, err = nats.Connect(d.NATSURL, opt, nats.MaxReconnects(0))
			return err
		})
		defer ci.Close()

		out := make(chan *nats.Msg, 64)
		sub, err := acme.ChanSubscribe("jetway.out.ci1", out)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		sender, err := cenats.NewSenderFromConn(ci, "jetway.events.ci1")
		if err != nil {
			t.Fatal(err)
		}
		cec, err := cloudevents.NewClient(sender)
		if err != nil {
			t.Fatal(err)
		}
		e := cloudevents.NewEvent()
		e.SetID("ci-build-7")
		e.SetSource("ci.example/builds")
		e.SetType(events.TypeInput)
		if err := e.SetData(cloudevents.ApplicationJSON, map[string]string{"text": "build 7 finished"}); err != nil {
			t.Fatal(err)
		}
		if res := cec.Send(context.Background(), e); cloudevents.IsUndelivered(res) {
			t.Fatalf("send with the CloudEvents SDK: %v", res)
		}
		waitRunStarted(t, d, out, "jetway.out.ci1")

		tenants("revoke", "acme", "--user", "ci")
		testutil.EventuallyNil(t, 30*time.Second, "the revoked user is disconnected and refused", func() error {
			if !ci.IsClosed() {
				return errors.New("the revoked user's connection is still open")
			}
			if c, err := nats.Connect(d.NATSURL, opt, nats.MaxReconnects(0)); err == nil {
				c.Close()
				return errors.New("the revoked credential still connects")
			}
			return nil
		})
		// The tenant's first user is untouched by revoking another.
		if !acme.IsConnected() {
			t.Error("revoking user ci disconnected the tenant's first user")
		}
	})

	t.Run("a_tenant_added_to_the_running_dev_publishes_and_its_tokens_work_at_once", func(t *testing.T) {
		out, err := exec.Command(jetwayBinary(t), "tenants", "add", "initech", "--data", d.Data).CombinedOutput()
		if err != nil {
			t.Fatalf("jetway tenants add initech: %v\n%s", err, out)
		}
		opt, err := nats.NkeyOptionFromSeed(filepath.Join(d.Data, "tenants", "initech"+bus.SeedFileExt))
		if err != nil {
			t.Fatal(err)
		}
		var nc *nats.Conn
		testutil.EventuallyNil(t, 30*time.Second, "the new tenant's credential is accepted", func() error {
			var err error
			nc, err = nats.Connect(d.NATSURL, opt, nats.MaxReconnects(0))
			return err
		})
		defer nc.Close()
		outs := make(chan *nats.Msg, 64)
		sub, err := nc.ChanSubscribe("jetway.out.i1", outs)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		e := cloudevents.NewEvent()
		e.SetID("initech-1")
		e.SetSource("e2e/initech")
		e.SetType(events.TypeInput)
		if err := e.SetData(cloudevents.ApplicationJSON, map[string]string{"text": "hello from a new tenant"}); err != nil {
			t.Fatal(err)
		}
		msg, err := events.Encode(context.Background(), "jetway.events.i1", e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.RequestMsg(msg, 10*time.Second); err != nil {
			t.Fatalf("the new tenant's publish got no PubAck: %v", err)
		}
		waitRunStarted(t, d, outs, "jetway.out.i1")

		f, err := auth.ReadFile(filepath.Join(d.Data, auth.DevTokensFile))
		if err != nil {
			t.Fatal(err)
		}
		var tok string
		for _, g := range f.Tokens {
			if g.Tenant == "initech" && !g.IsAdmin() {
				tok = g.Token
			}
		}
		if tok == "" {
			t.Fatalf("tokens.json has no user token for initech: %+v", f.Tokens)
		}
		ic, err := client.New(client.Config{BaseURL: d.URL, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyNil(t, 30*time.Second, "the dispatcher knows initech's token", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ss, err := ic.Sessions(ctx)
			if err != nil {
				return err
			}
			for _, s := range ss {
				if s.Session == "i1" {
					return nil
				}
			}
			return fmt.Errorf("initech's sessions %+v lack i1", ss)
		})
	})

	t.Run("no_reply_subject_or_header_crosses_the_account", func(t *testing.T) {
		tenantattack.Run(t, tenantattack.Target{
			Attacker: acme, AttackerTenant: "acme", AttackerToken: acmeUser, AdminToken: acmeAdmin,
			Victim: "globex", Observer: d.jetStream(t), Headlines: true,
		})
		// The victim is healthy afterwards: no Ground Stop, and its input runs.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		gc, err := client.New(client.Config{BaseURL: d.URL, Token: globexUser})
		if err != nil {
			t.Fatal(err)
		}
		st, err := gc.Stop(ctx, "victim1")
		if err != nil || st.GroundStop || (st.GlobalStop != nil && *st.GlobalStop) || (st.TenantStop != nil && *st.TenantStop) {
			t.Errorf("Ground Stop over globex's session after the attacks: %+v, %v; want every switch off", st, err)
		}
		s := follow(t, gc, "victim1", client.StreamOptions{})
		acc, err := gc.Input(ctx, "victim1", "are you still fine")
		if err != nil {
			t.Fatalf("victim input: %v", err)
		}
		if _, end, _ := s.runFor(t, acc.ID); end.Reason != "completed" {
			t.Errorf("victim's run ended %+v, want completed", end)
		}
	})
}

// waitRunStarted waits for a run's start on the tenant's view of a
// session's output.
func waitRunStarted(t *testing.T, d *devStack, out <-chan *nats.Msg, subject string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case m := <-out:
			if m.Header.Get("ce-type") == events.TypeRunStarted {
				return
			}
		case <-deadline:
			t.Fatalf("no %s on the tenant's %s within a minute; log:\n%s", events.TypeRunStarted, subject, d.logTail(20))
		}
	}
}
