package deploytest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/deploy/certs"
	"jetway/internal/tenantattack"
	"jetway/internal/testutil"
	"jetway/pkg/auth"
	"jetway/pkg/bus"
	jwclient "jetway/pkg/client"
	"jetway/pkg/control/sessionrec"
	"jetway/pkg/events"
	"jetway/services/dispatcher"
)

// TestTenant_accounts_of_the_configuration_are_bus_TenantExports loads the
// deploy configuration as nats-server does and holds what tenant accounts
// can reach to bus.TenantExports, which the attack suite enumerates: a
// subject exported in deploy/nats/accounts.conf and not there would reach
// tenants unattacked, and one there and not exported would be attacked in
// vain.
func TestTenant_accounts_of_the_configuration_are_bus_TenantExports(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(confDir, "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), bus.ExportsConf("    ")) {
		t.Errorf("accounts.conf does not hold the JETWAY exports as bus.ExportsConf renders them:\n%s", bus.ExportsConf("    "))
	}
	// The partition mapping decides where every event goes, a tenant's
	// included (it acts after the import): it is bus's, for the
	// deployment's P, or events reach no shard.
	if !strings.Contains(string(text), bus.MappingsConf(deployPartitions, "    ")) {
		t.Errorf("accounts.conf does not hold the JETWAY partition mapping as bus.MappingsConf(%d) renders it:\n%s",
			deployPartitions, bus.MappingsConf(deployPartitions, "    "))
	}

	d := render(t, renderOptions{})
	// The configuration's relative paths (secrets/, data/) resolve from a
	// node's working directory.
	t.Chdir(d.dir)
	srv := loadServer(t)
	account := func(name string) *server.AccountInfo {
		t.Helper()
		return accountInfo(t, srv, name)
	}

	// Accountz does not report account_token_position: the text above
	// holds it, and the last check below shows the server enforces it.
	type export struct{ kind, subject string }
	var want, got []export
	for _, e := range bus.TenantExports {
		want = append(want, export{e.Kind, e.Subject})
	}
	for _, e := range account(bus.AccountJetway).Exports {
		got = append(got, export{e.Type.String(), string(e.Subject)})
	}
	order := func(a, b export) int { return strings.Compare(a.subject, b.subject) }
	slices.SortFunc(want, order)
	slices.SortFunc(got, order)
	if !slices.Equal(got, want) {
		t.Errorf("JETWAY exports %v, want bus.TenantExports %v", got, want)
	}
	// The server loads the mapping as bus.PartitionMappings has it.
	mappings := account(bus.AccountJetway).Mappings
	for _, m := range bus.PartitionMappings(deployPartitions) {
		dest := mappings[m.From]
		if len(dest) != 1 || dest[0].Subject != m.To {
			t.Errorf("JETWAY maps %s to %v, want %s", m.From, dest, m.To)
		}
	}
	if len(mappings) != len(bus.PartitionMappings(deployPartitions)) {
		t.Errorf("JETWAY has %d mappings, want the %d of bus.PartitionMappings", len(mappings), len(bus.PartitionMappings(deployPartitions)))
	}

	// Each tenant account: no JetStream, and exactly the imports of its
	// own tenant's subjects, mapped to its own view.
	z, err := srv.Accountz(&server.AccountzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var accounts []string
	for _, name := range z.Accounts {
		if !slices.Contains([]string{bus.AccountJetway, bus.AccountSystem, "$G"}, name) {
			accounts = append(accounts, name)
		}
	}
	slices.Sort(accounts)
	if !slices.Equal(accounts, tenants) {
		t.Errorf("tenant accounts %v, want one for each tenant with a credential, %v", accounts, tenants)
	}
	for _, tenant := range accounts {
		a := account(tenant)
		if a.JetStream {
			t.Errorf("tenant %s's account has JetStream", tenant)
		}
		if len(a.Exports) != 0 {
			t.Errorf("tenant %s's account exports %v", tenant, a.Exports)
		}
		// A mapping of its own could not reach JETWAY (only the imports
		// do), but none is meant to be there.
		if len(a.Mappings) != 0 {
			t.Errorf("tenant %s's account maps %v", tenant, a.Mappings)
		}
		type imp struct{ kind, from, account, to string }
		var want, got []imp
		for _, e := range bus.TenantExports {
			want = append(want, imp{e.Kind, e.For(tenant), bus.AccountJetway, e.Local})
		}
		for _, i := range a.Imports {
			if i.Invalid {
				t.Errorf("tenant %s: import %s is invalid", tenant, i.Subject)
			}
			got = append(got, imp{i.Type.String(), string(i.Subject), i.Account, string(i.LocalSubject)})
		}
		order := func(a, b imp) int { return strings.Compare(a.from, b.from) }
		slices.SortFunc(want, order)
		slices.SortFunc(got, order)
		if !slices.Equal(got, want) {
			t.Errorf("tenant %s imports %v, want %v", tenant, got, want)
		}
	}

	// account_token_position 3: a tenant account that imports another
	// tenant's subjects of any export gets no such import.
	good, err := os.ReadFile(filepath.Join("secrets", "tenants.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range bus.TenantExports {
		theirs := strings.Replace(string(good), `"`+e.For("acme")+`"`, `"`+e.For("globex")+`"`, 1)
		if theirs == string(good) {
			t.Fatalf("tenants.conf has no import of %s to rewrite", e.For("acme"))
		}
		if err := os.WriteFile(filepath.Join("secrets", "tenants.conf"), []byte(theirs), 0o600); err != nil {
			t.Fatal(err)
		}
		opts, err := server.ProcessConfigFile("node-1.conf")
		if err == nil {
			var bad *server.Server
			if bad, err = server.NewServer(opts); err == nil {
				for _, i := range accountInfo(t, bad, "acme").Imports {
					if string(i.Subject) == e.For("globex") && !i.Invalid {
						t.Errorf("acme's account imports %s of globex", i.Subject)
					}
				}
				bad.Shutdown()
			}
		}
		if err != nil && !strings.Contains(err.Error(), "not authorized") {
			t.Errorf("acme importing %s: %v; want the import refused as not authorized", e.For("globex"), err)
		}
		t.Logf("acme importing %s: %v", e.For("globex"), err)
	}
}

// loadServer makes a server of node-1.conf in the working directory, as
// a node loads it, and never starts it: the accounts, their exports and
// imports are resolved by then.
func loadServer(t *testing.T) *server.Server {
	t.Helper()
	opts, err := server.ProcessConfigFile("node-1.conf")
	if err != nil {
		t.Fatalf("load the rendered configuration: %v", err)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("a server from the configuration: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

func accountInfo(t *testing.T, srv *server.Server, name string) *server.AccountInfo {
	t.Helper()
	z, err := srv.Accountz(&server.AccountzOptions{Account: name})
	if err != nil || z.Account == nil {
		t.Fatalf("account %s: %v", name, err)
	}
	return z.Account
}

// TestTenant_accounts_hold_on_the_cluster runs the reproductions of issue
// 32 exactly as they were made, then the whole attack suite
// (internal/tenantattack), from tenant acme's account on a three-node
// cluster with the deploy configuration, with globex the victim: a reply
// a tenant chooses comes back into the tenant's own account, and nothing
// of globex's or of everyone's changes. globex is healthy afterwards.
func TestTenant_accounts_hold_on_the_cluster(t *testing.T) {
	d := render(t, renderOptions{})
	d.startCluster()
	d.provision()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	admin := d.connect("admin")

	const (
		acmeUser, acmeAdmin     = "acme-user-token", "acme-admin-token"
		globexUser, globexAdmin = "globex-user-token", "globex-admin-token"
		victim                  = "victim"
	)
	run := d.connect("runner")
	startDemoRunner(t, ctx, run, "tenants-runner")
	disp := d.connect("dispatcher")
	dsp, _ := startDispatcher(t, disp,
		auth.Grant{Token: acmeUser, Tenant: "acme"}, auth.Grant{Token: acmeAdmin, Tenant: "acme", Role: auth.RoleAdmin},
		auth.Grant{Token: globexUser, Tenant: "globex"}, auth.Grant{Token: globexAdmin, Tenant: "globex", Role: auth.RoleAdmin})
	api := httptest.NewServer(dsp.Handler())
	t.Cleanup(api.Close)

	acme, globex := d.connect("tenant-acme"), d.connect("tenant-globex")

	// globex has a lived session (a record, a claimed id ci-1, a
	// transcript) and a default profile of its own, as in the issue.
	globexOut, err := globex.SubscribeSync("jetway.out." + victim)
	if err != nil {
		t.Fatal(err)
	}
	apiCall(t, ctx, globex, globexAdmin, dispatcher.SubjectAgents, `{"action":"put","name":"default","profile":{"instructions":"globex's own"}}`)
	if acc := input(t, ctx, globex, globexUser, victim, "ci-1"); acc.Duplicate {
		t.Fatalf("globex's first ci-1 answered duplicate")
	}
	waitRunEnded(t, globexOut)
	sessions, err := admin.js.KeyValue(ctx, bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	// The runner writes the record at a run's end; then nothing more
	// until the session's next event, so what changes after is the
	// attacks'.
	testutil.Eventually(t, 30*time.Second, "globex's session record idle after its run", func() bool {
		e, err := sessions.Get(ctx, "globex."+victim)
		if err != nil {
			return false
		}
		rec, err := sessionrec.Decode(e.Value())
		return err == nil && rec.State == sessionrec.StateIdle && rec.Runs >= 1
	})

	kv := func(bucket, key string) (stream, subject string) { return "KV_" + bucket, "$KV." + bucket + "." + key }
	// What the attacks wrote, each by the reply subject it aimed
	// at: stream and subject.
	type spot struct{ stream, subject string }
	spots := map[string]spot{}
	add := func(name, stream, subject string) { spots[name] = spot{stream, subject} }
	s, sub := kv(bus.BucketControl, "groundstop")
	add("the global Ground Stop", s, sub)
	s, sub = kv(bus.BucketControl, "groundstop.globex")
	add("globex's tenant switch", s, sub)
	s, sub = kv(bus.BucketControl, "groundstop.globex."+victim)
	add("globex's session switch", s, sub)
	s, sub = kv(bus.BucketSessions, "globex."+victim)
	add("globex's session record", s, sub)
	s, sub = kv(bus.BucketEventIDs, eventIDKey("globex", victim, "ci-1"))
	add("globex's claimed ci-1", s, sub)
	s, sub = kv(bus.BucketEventIDs, eventIDKey("globex", victim, "ci-2"))
	add("globex's next id ci-2", s, sub)
	s, sub = kv(bus.BucketAgents, "globex.default")
	add("globex's default profile", s, sub)
	// Job events, sub-agent events and fired layovers are stored with the
	// session's partition (in any: one forged by a reply would count).
	add("globex's job events", bus.StreamJobEvents, "jetway.jobevents.*.globex."+victim)
	add("globex's sub-agent events", bus.StreamAgentEvents, "jetway.agentevents.*.globex."+victim)
	add("globex's transcript", bus.StreamTranscripts, "jetway.transcript.globex."+victim)
	add("globex's fired layovers", bus.StreamSchedules, "jetway.fired.*.globex."+victim)
	add("globex's unpartitioned fired layovers", bus.StreamSchedules, "jetway.fired.globex."+victim)
	add("globex's events", bus.StreamEvents, "jetway.events.globex."+victim)

	lastSeq := func(sp spot) uint64 {
		t.Helper()
		st, err := admin.js.Stream(ctx, sp.stream)
		if err != nil {
			t.Fatalf("stream %s: %v", sp.stream, err)
		}
		m, err := st.GetLastMsgForSubject(ctx, sp.subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return 0
		}
		if err != nil {
			t.Fatalf("%s in %s: %v", sp.subject, sp.stream, err)
		}
		return m.Sequence
	}
	// The log copies from the shards and may lag behind them (a leader
	// provisioning has just moved, say): the victim's event must be in
	// it before the snapshot, or a late copy would read as a crossing.
	testutil.Eventually(t, time.Minute, "globex's event copied into "+bus.StreamEvents, func() bool {
		return lastSeq(spots["globex's events"]) > 0
	})
	before := map[string]uint64{}
	for name, sp := range spots {
		before[name] = lastSeq(sp)
	}
	for _, name := range []string{"globex's session record", "globex's claimed ci-1", "globex's default profile", "globex's transcript", "globex's events"} {
		if before[name] == 0 {
			t.Fatalf("%s is not there before the attacks: the check below would prove nothing", name)
		}
	}
	unchanged := func(t *testing.T) {
		t.Helper()
		for name, sp := range spots {
			if got := lastSeq(sp); got != before[name] {
				t.Errorf("%s (%s) changed: last sequence %d, was %d", name, sp.subject, got, before[name])
			}
		}
	}

	// replyLandsHome sends request m from acme's account with reply and
	// waits for the answer on reply in acme's own account: the server
	// routed it back through the import, and it is the answer (not the
	// absence of one) that the checks after it are about.
	replyLandsHome := func(t *testing.T, m *nats.Msg) *nats.Msg {
		t.Helper()
		home, err := acme.SubscribeSync(m.Reply)
		if err != nil {
			t.Fatal(err)
		}
		defer home.Unsubscribe()
		if err := acme.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		ans, err := home.NextMsg(15 * time.Second)
		if err != nil {
			t.Fatalf("%s with reply %s: no answer in acme's account: %v", m.Subject, m.Reply, err)
		}
		t.Logf("%s with reply %s: answered in acme's own account (%.80s)", m.Subject, m.Reply, ans.Data)
		return ans
	}

	t.Run("issue_32_reply_hijack_with_no_token_changes_nothing", func(t *testing.T) {
		vp := strconv.Itoa(bus.PartitionFor("globex", victim, deployPartitions))
		for _, target := range []string{
			"the global Ground Stop", "globex's tenant switch", "globex's session record", "globex's next id ci-2",
			"globex's job events", "globex's sub-agent events", "globex's transcript", "globex's fired layovers",
			"globex's unpartitioned fired layovers",
		} {
			// nats pub jetway.api.sessions '{}' --reply <target>, as tenant-acme:
			// a partitioned subject with globex's partition, and as the
			// issue aimed it, without.
			replies := []string{spots[target].subject}
			if strings.Contains(spots[target].subject, "*") {
				replies = []string{strings.Replace(spots[target].subject, "*", vp, 1), strings.Replace(spots[target].subject, "*.", "", 1)}
			}
			for _, reply := range replies {
				replyLandsHome(t, &nats.Msg{Subject: dispatcher.SubjectSessions, Reply: reply, Data: []byte(`{}`)})
			}
		}
		unchanged(t)
		st := stopState(t, ctx, api.URL, globexUser, victim)
		if st.GroundStop || (st.GlobalStop != nil && *st.GlobalStop) || (st.TenantStop != nil && *st.TenantStop) {
			t.Errorf("Ground Stop over globex's session: %+v; want every switch off", st)
		}
	})

	t.Run("issue_32_profile_takeover_with_acme_s_admin_token_changes_nothing_of_globex", func(t *testing.T) {
		m := &nats.Msg{Subject: dispatcher.SubjectAgents, Reply: spots["globex's default profile"].subject, Header: nats.Header{},
			Data: []byte(`{"action":"put","name":"evil","profile":{"instructions":"acme's instructions","mcp":[]}}`)}
		m.Header.Set("Authorization", "Bearer "+acmeAdmin)
		ans := replyLandsHome(t, m)
		if code := ans.Header.Get("Nats-Service-Error-Code"); code != "" {
			t.Fatalf("acme's own put of evil was refused (%s): the check proves nothing", code)
		}
		unchanged(t)
		// The put was acme's, into acme's profiles.
		if lastSeq(spot{"KV_" + bus.BucketAgents, "$KV." + bus.BucketAgents + ".acme.evil"}) == 0 {
			t.Error("acme's profile evil is not stored")
		}
		agents, err := admin.js.KeyValue(ctx, bus.BucketAgents)
		if err != nil {
			t.Fatal(err)
		}
		e, err := agents.Get(ctx, "globex.default")
		if err != nil || !strings.Contains(string(e.Value()), "globex's own") {
			t.Errorf("globex's default profile: %v; want its own instructions", err)
		}
	})

	t.Run("the_attack_suite_finds_no_crossing", func(t *testing.T) {
		tenantattack.Run(t, tenantattack.Target{
			Attacker: acme.Conn, AttackerTenant: "acme", AttackerToken: acmeUser, AdminToken: acmeAdmin,
			Victim: "globex", Observer: admin.js,
		})
		unchanged(t)
	})

	t.Run("globex_is_healthy_afterwards", func(t *testing.T) {
		st := stopState(t, ctx, api.URL, globexUser, victim)
		if st.GroundStop || (st.GlobalStop != nil && *st.GlobalStop) || (st.TenantStop != nil && *st.TenantStop) {
			t.Errorf("Ground Stop over globex's session: %+v; want every switch off", st)
		}
		// The id whose dedupe key was aimed at is globex's to use, and the
		// session runs it.
		if acc := input(t, ctx, globex, globexUser, victim, "ci-2"); acc.Duplicate {
			t.Errorf("globex's ci-2 answered duplicate: an attack occupied it")
		}
		waitRunEnded(t, globexOut)
		testutil.Eventually(t, 30*time.Second, "ci-2 in globex's transcript", func() bool { return transcriptHas(t, ctx, admin, "globex", victim, "ci-2") })
		if transcriptHas(t, ctx, admin, "globex", victim, "acme's instructions") {
			t.Error("acme's instructions reached globex's session")
		}
	})

	for _, c := range []*client{run, disp} {
		c.noViolation(t)
	}
}

// eventIDKey is the dispatcher's jetway_event_ids key of a caller-chosen
// id (services/dispatcher/dedupe.go). The test finds ci-1's key by it
// before the attacks, so a change there fails here rather than making the
// ci-2 check vacuous.
func eventIDKey(tenant, session, id string) string {
	sum := sha256.Sum256([]byte(id))
	return tenant + "." + session + "." + hex.EncodeToString(sum[:16])
}

// apiCall requests subject of the dispatcher's NATS API from c's account
// with token and fails on an error answer.
func apiCall(t *testing.T, ctx context.Context, c *client, token, subject, body string) *nats.Msg {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Header.Set("Authorization", "Bearer "+token)
	m.Data = []byte(body)
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	reply, err := c.RequestMsgWithContext(rctx, m)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("%s answered %s: %s", subject, code, reply.Data)
	}
	return reply
}

// input sends an input with a caller-chosen id through c's account.
func input(t *testing.T, ctx context.Context, c *client, token, session, id string) dispatcher.Accepted {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"session": session, "text": "hello " + id, "id": id})
	reply := apiCall(t, ctx, c, token, dispatcher.SubjectInput, string(body))
	var acc dispatcher.Accepted
	if err := json.Unmarshal(reply.Data, &acc); err != nil || acc.ID != id {
		t.Fatalf("input %s answered %s (%v)", id, reply.Data, err)
	}
	return acc
}

// waitRunEnded reads run output until a run ends.
func waitRunEnded(t *testing.T, out *nats.Subscription) {
	t.Helper()
	for {
		m, err := out.NextMsg(60 * time.Second)
		if err != nil {
			t.Fatalf("no %s within 60s: %v", events.TypeRunEnded, err)
		}
		if m.Header.Get("ce-type") == events.TypeRunEnded {
			return
		}
	}
}

// stopState is the Ground Stop state over a session as its tenant's token
// reads it from the dispatcher's HTTP API.
func stopState(t *testing.T, ctx context.Context, url, token, session string) jwclient.StopState {
	t.Helper()
	c, err := jwclient.New(jwclient.Config{BaseURL: url, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Stop(ctx, session)
	if err != nil {
		t.Fatalf("read Ground Stop: %v", err)
	}
	return st
}

// TestCluster_script_reload_adds_and_revokes_a_tenant_without_a_restart
// adds tenant initech and revokes acme's credential in the secrets of a
// running cluster, as `jetway tenants add`/`revoke --secrets` do, and runs
// `scripts/cluster.sh reload` against the nodes: no node restarts, initech
// publishes into its own session at once, acme's credential no longer
// connects and its open connection is closed, and globex, unchanged, keeps
// working on the connection it had.
func TestCluster_script_reload_adds_and_revokes_a_tenant_without_a_restart(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	d := render(t, renderOptions{})
	d.startCluster()
	d.provision()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	acme, globex := d.connect("tenant-acme"), d.connect("tenant-globex")
	pubAck := func(c *client, subject string) error {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := c.js.Publish(pctx, subject, []byte(`{}`))
		return err
	}
	if err := pubAck(acme, "jetway.events.before"); err != nil {
		t.Fatal(err)
	}

	secrets := filepath.Join(d.dir, "secrets")
	creds := certs.TenantCredentials(secrets)
	if _, err := creds.Ensure("initech", ""); err != nil {
		t.Fatal(err)
	}
	// acme's seed, kept aside to show it no longer gets in.
	acmeSeed := filepath.Join(t.TempDir(), "acme.nk")
	if err := os.Rename(d.seeds["acme"], acmeSeed); err != nil {
		t.Fatal(err)
	}
	if _, err := creds.Ensure("acme", ""); err != nil { // and back, for Remove
		t.Fatal(err)
	}
	if err := creds.Remove("acme", ""); err != nil {
		t.Fatal(err)
	}
	if err := creds.WriteTenantsConf(filepath.Join(secrets, certs.TenantsConf)); err != nil {
		t.Fatal(err)
	}
	initechSeed := creds.Path("initech", "")
	connectAs := func(n *node, seed string) (*nats.Conn, error) {
		auth, err := nats.NkeyOptionFromSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		return nats.Connect(n.url(), auth, nats.RootCAs(d.secret(certs.CAFile)), nats.Timeout(5*time.Second), nats.NoReconnect())
	}
	if nc, err := connectAs(d.nodes[0], initechSeed); err == nil {
		nc.Close()
		t.Fatal("initech connected before the reload: the test proves nothing")
	}

	// The script's view of the running nodes: their pids and logs.
	state := t.TempDir()
	pids := map[string]int{}
	for _, sub := range []string{"pids", "logs"} {
		if err := os.Mkdir(filepath.Join(state, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range d.nodes {
		n.mu.Lock()
		pids[n.name] = n.cmd.Process.Pid
		n.mu.Unlock()
		if err := os.WriteFile(filepath.Join(state, "pids", n.name+".pid"), []byte(strconv.Itoa(pids[n.name])), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(d.dir, n.name+".log"), filepath.Join(state, "logs", n.name+".log")); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(ctx, "bash", "../../scripts/cluster.sh", "reload")
	cmd.Env = append(os.Environ(), "JETWAY_CLUSTER_STATE="+state, "JETWAY_SECRETS="+secrets)
	out, err := cmd.CombinedOutput()
	t.Logf("cluster.sh reload:\n%s", out)
	if err != nil {
		t.Fatalf("cluster.sh reload: %v", err)
	}
	for _, n := range d.nodes {
		if !strings.Contains(string(out), fmt.Sprintf("reloaded %s (pid %d)", n.name, pids[n.name])) {
			t.Errorf("cluster.sh reload did not reload %s", n.name)
		}
		n.mu.Lock()
		same := n.cmd != nil && n.cmd.Process.Pid == pids[n.name] && n.cmd.ProcessState == nil
		n.mu.Unlock()
		if !same {
			t.Errorf("%s is not the process it was before the reload", n.name)
		}
	}
	if !strings.Contains(string(out), initechSeed) {
		t.Errorf("cluster.sh reload does not name initech's credential %s", initechSeed)
	}

	// Every node: acme out; initech in, and its imports work there (the
	// events import answers with the stream's PubAck).
	for _, n := range d.nodes {
		if nc, err := connectAs(n, acmeSeed); err == nil {
			nc.Close()
			t.Errorf("acme's revoked credential still connects to %s", n.name)
		}
		nc, err := connectAs(n, initechSeed)
		if err != nil {
			t.Fatalf("initech on %s after the reload: %v", n.name, err)
		}
		initech := &client{Conn: nc, errs: make(chan error, 64)}
		if initech.js, err = jetstream.New(nc); err != nil {
			t.Fatal(err)
		}
		err = pubAck(initech, "jetway.events.first-"+n.name)
		nc.Close()
		if err != nil {
			t.Errorf("initech on %s publishes into its own session: %v", n.name, err)
		}
	}
	admin := d.connect("admin")
	evs, err := admin.js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	// The log sources the shards: the events are there a moment after
	// their PubAcks.
	for _, n := range d.nodes {
		testutil.EventuallyNil(t, 30*time.Second, "initech's event from "+n.name+" in "+bus.StreamEvents, func() error {
			_, err := evs.GetLastMsgForSubject(ctx, "jetway.events.initech.first-"+n.name)
			return err
		})
	}
	testutil.Eventually(t, 30*time.Second, "acme's open connection closed by the reload", func() bool { return !acme.IsConnected() })
	if err := pubAck(globex, "jetway.events.after"); err != nil {
		t.Errorf("globex after the reload: %v", err)
	}
}
