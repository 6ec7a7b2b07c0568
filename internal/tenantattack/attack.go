// Package tenantattack tries to cross the tenant boundary from inside a
// tenant's NATS account, by every path the account offers, and checks that
// nothing crossed: no message stored in the JETWAY account for another
// tenant or for everyone, no Ground Stop flipped, no profile written.
//
// The paths are enumerated from the layout itself (bus.TenantExports, and
// dispatcherapi.Endpoints for the API, and the work shards of the
// deployment's bus.ReadLayout: every stream a tenant's publish is stored
// in), so a subject family, an endpoint or a shard added to the platform
// is attacked here without anyone remembering to. It is used by the tests
// of `jetway dev` (test/e2e) and of the production configuration on a
// three-node cluster (deploy/deploytest).
package tenantattack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/control/approvals"
	"jetway/pkg/control/layovers"
	"jetway/pkg/control/sessionrec"
	api "jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
)

// Target is one attack: the attacker's connection in its own account, and
// an observer in JETWAY that may read every stream. A runner must serve
// the deployment: Run gives the victim an event of its own (SeedSession)
// and waits for its run to end before it attacks.
type Target struct {
	// Attacker is connected with a credential of tenant AttackerTenant.
	Attacker       *nats.Conn
	AttackerTenant string
	// AttackerToken is a user (not admin) bearer token of the attacker's
	// tenant; AdminToken an admin one. The attacks go with none, with each,
	// since a token is not what should keep a reply inside the account.
	AttackerToken, AdminToken string
	// Victim is another tenant, with sessions of its own.
	Victim string
	// Observer reads the JETWAY account's streams, and publishes the
	// victim's seed event and holds it in its shard with a consumer of
	// its own (an admin user, or jetway dev's).
	Observer jetstream.JetStream
	// Headlines says a notifier serves the deployment: the seed's run
	// then ends with a headline, written a moment after the run itself
	// ended, which Run waits for before it attacks (else it would land
	// in the attacks' window, in the victim's name).
	Headlines bool

	// layout is the deployment's, read by Run.
	layout bus.Layout
}

// SeedSession is the victim's session Run gives an event before the
// attacks, so that the victim has an event in the log and in a work shard
// for the attacks to erase, and checks it is untouched after.
const SeedSession = "tenantattack-seed"

// witness is the consumer Run puts on every shard for the attacks: an
// event leaves a shard once its runner acked it and the log copied it,
// and the witness, which never acks, keeps every event of the victim's
// there instead, the seed among them, so what the attacks did to the
// shard can be read after. It filters to the victim only: an event the
// runners finished but a shard kept would hold up the later events of
// its session (the runners' order check), and the victim's sessions get
// none during the attacks.
const witness = "tenantattack-witness"

// TenantWritten are the streams a tenant's publish is stored in: the
// work shards of layout l (JETWAY_EVENTS, the log, takes no publish; it
// sources them).
func TenantWritten(l bus.Layout) []string { return l.Streams() }

// shardSessions are sessions of tenant, one in each shard of l, "s1"
// among them: a publish on each reaches every shard.
func shardSessions(tenant string, l bus.Layout) []string {
	out := make([]string, max(l.Shards, 1))
	for i := 0; ; i++ {
		s := "s1"
		if i > 0 {
			s = fmt.Sprintf("s1-%d", i)
		}
		if k := bus.ShardOf(bus.PartitionFor(tenant, s, l.Partitions), l.Shards); out[k] == "" {
			out[k] = s
		}
		if !slices.Contains(out, "") || i > 10000 {
			return slices.DeleteFunc(out, func(s string) bool { return s == "" })
		}
	}
}

// partitioned is jetway.<kind>.<p>.<tenant>.<session>, a subject as the
// partition mapping stores it.
func partitioned(kind string, p int, tenant, session string) string {
	return fmt.Sprintf("jetway.%s.%d.%s.%s", kind, p, tenant, session)
}

// forgedPartition is a partition of l other than the mapping's for
// tenant/session (0 when there is no other).
func forgedPartition(tenant, session string, l bus.Layout) int {
	return (bus.PartitionFor(tenant, session, l.Partitions) + 1) % max(l.Partitions, 1)
}

// SensitiveReplies are the subjects an attacker would aim a reply at: each
// bucket's keys of the victim and the global ones, the JetStream API on the
// log and on every shard of l, and every jetway subject family in the
// victim's name, with the partition the mapping gives the victim's session
// and with another.
func SensitiveReplies(victim string, l bus.Layout) []string {
	out := []string{
		"$KV." + bus.BucketControl + ".groundstop",
		"$KV." + bus.BucketControl + ".groundstop." + victim,
		"$KV." + bus.BucketControl + ".groundstop." + victim + ".s1",
		"$KV." + bus.BucketControl + "." + approvals.Key(victim, "s1", "x"),
		"$KV." + bus.BucketControl + "." + layovers.Key(victim, "s1"),
		// Sign-in codes (the dispatcher's, HTTP only): a reply aimed here
		// would plant a code that signs someone in.
		"$KV." + bus.BucketControl + ".signin.0000000000000000000000000000000000000000000000000000000000000000",
		"$KV." + bus.BucketAgents + "." + victim + ".default",
		"$KV." + bus.BucketSessions + "." + victim + ".s1",
		"$KV." + bus.BucketSessionsByPartition + "." + bus.SessionsByPartitionKey(bus.PartitionFor(victim, "s1", l.Partitions), victim, "s1"),
		"$KV." + bus.BucketEventIDs + "." + victim + ".s1.x",
		"$KV." + bus.BucketJobs + "." + victim + ".s1.1",
		"$KV." + bus.BucketWorkers + "." + victim + ".s1",
		"$KV." + bus.BucketRunners + ".r1",
	}
	for _, stream := range append([]string{bus.StreamEvents}, TenantWritten(l)...) {
		out = append(out,
			"$JS.API.STREAM.PURGE."+stream,
			"$JS.API.STREAM.DELETE."+stream,
			"$JS.API.STREAM.MSG.DELETE."+stream,
		)
	}
	for _, family := range []string{"events", "jobevents", "agentevents", "schedules", "fired", "transcript", "out", "notify"} {
		out = append(out, "jetway."+family+"."+victim+".s1")
	}
	out = append(out, bus.LayoutProbe, bus.LayoutProbe+"."+strconv.Itoa(l.Partitions))
	vp, forged := bus.PartitionFor(victim, "s1", l.Partitions), forgedPartition(victim, "s1", l)
	for _, family := range []string{"events", "jobevents", "agentevents", "fired"} {
		out = append(out, partitioned(family, vp, victim, "s1"), partitioned(family, forged, victim, "s1"))
	}
	return out
}

// ForgedSubjects are subjects a tenant might try for a partition of its
// choosing, in its own name and in the victim's: the mapped five-token
// form, and its own view's (jetway.events.<session>) with a partition put
// in. No import of a tenant's account matches them, so they lead nowhere;
// if one did, the event would land in a partition the tenant chose.
func ForgedSubjects(attacker, victim string, l bus.Layout) []string {
	vp, forged := bus.PartitionFor(victim, "s1", l.Partitions), forgedPartition(attacker, "s1", l)
	return []string{
		bus.LayoutProbe, // answered by the JETWAY account's mapping only
		partitioned("events", forged, attacker, "s1"),
		partitioned("events", vp, victim, "s1"),
		fmt.Sprintf("jetway.events.%d.s1", forged),
		fmt.Sprintf("jetway.events.%d.%s", vp, victim),
		fmt.Sprintf("jetway.events.%d.%s.s1", vp, victim),
	}
}

// Requests are the subjects a tenant user can send to through its imports
// (the service exports), instantiated: for each events family, one session
// of the attacker's in each shard of l (so every header is tried on every
// stream a tenant writes), and every API endpoint.
func Requests(attacker string, l bus.Layout) []string {
	var out []string
	for _, e := range bus.TenantExports {
		if e.Kind != "service" {
			continue
		}
		switch {
		case strings.HasPrefix(e.Local, api.SubjectPrefix+"."):
			for _, name := range api.Endpoints {
				out = append(out, strings.Replace(e.Local, "*", name, 1))
			}
		default:
			for _, s := range shardSessions(attacker, l) {
				out = append(out, strings.Replace(e.Local, "*", s, 1))
			}
		}
	}
	return out
}

// jetStreamHeaders are the headers that make a stream act beyond the
// publisher's subject or slot: schedules (aimed at the victim's subjects as
// published and as its shard stores them, or copying the victim's event
// into the attacker's session), roll-ups, dedupe ids (the seed's among
// them), TTLs, and a stream other than the one the publish is meant for.
func jetStreamHeaders(tg Target) []nats.Header {
	v, l := tg.Victim, tg.layout
	vp := bus.PartitionFor(v, "s1", l.Partitions)
	own := partitioned("events", bus.PartitionFor(tg.AttackerTenant, "loot", l.Partitions), tg.AttackerTenant, "loot")
	hs := []nats.Header{
		{"Nats-Schedule": {"@at 2020-01-01T00:00:00Z"}, "Nats-Schedule-Target": {"jetway.events." + v + ".s1"}},
		{"Nats-Schedule": {"@at 2020-01-01T00:00:00Z"}, "Nats-Schedule-Target": {partitioned("events", vp, v, "s1")}},
		{"Nats-Schedule": {"@every 1s"}, "Nats-Schedule-Target": {"jetway.fired." + v + ".s1"}, "Nats-Schedule-Source": {"jetway.events." + v + ".s1"}},
		{"Nats-Schedule": {"@every 1s"}, "Nats-Schedule-Target": {partitioned("fired", vp, v, "s1")}, "Nats-Schedule-Source": {partitioned("events", vp, v, "s1")}},
		{"Nats-Schedule": {"@at 2020-01-01T00:00:00Z"}, "Nats-Schedule-Target": {own},
			"Nats-Schedule-Source": {partitioned("events", bus.PartitionFor(v, SeedSession, l.Partitions), v, SeedSession)}},
		{"Nats-Rollup": {"all"}},
		{"Nats-Rollup": {"sub"}},
		{"Nats-Msg-Id": {"ci-1"}},
		{"Nats-Msg-Id": {seedID}},
		{"Nats-Msg-Id": {"agent-finished." + v + ".s1.r1"}},
		{"Nats-TTL": {"1s"}},
		{"Nats-Expected-Stream": {bus.StreamJobEvents}},
		{"Nats-Expected-Stream": {bus.StreamEvents}},
	}
	for _, stream := range TenantWritten(l) {
		hs = append(hs, nats.Header{"Nats-Expected-Stream": {stream}, "Nats-Rollup": {"all"}})
	}
	return hs
}

// Run attacks and checks. Every send is followed by a round trip on the
// same path, so the check reads what the server and the dispatcher did
// with it, not a race.
func Run(t *testing.T, tg Target) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := bus.ReadLayout(ctx, tg.Observer)
	if err != nil {
		t.Fatalf("the deployment's layout: %v", err)
	}
	tg.layout = l
	for _, stream := range TenantWritten(l) {
		checkTenantWritten(ctx, t, tg.Observer, stream)
	}
	seed(ctx, t, tg)
	victimBefore := victimEvents(ctx, t, tg)
	t.Logf("tenant %s's events before the attacks: %v", tg.Victim, victimBefore)
	before := snapshot(ctx, t, tg.Observer)

	bodies := [][]byte{[]byte(`{}`), []byte(`{"session":"s1","text":"x","name":"evil","action":"put","profile":{}}`), []byte(`{"action":"on","scope":"global"}`),
		// A decision on an approval: the victim's are out of reach (404),
		// and one of the attacker's own wakes only the attacker's session.
		[]byte(`{"action":"decide","session":"s1","approval":"ap-1","decision":"approve","tenant":"` + tg.Victim + `"}`)}
	tokens := []string{"", tg.AttackerToken, tg.AdminToken}
	sends := 0
	requests, sensitive := Requests(tg.AttackerTenant, l), SensitiveReplies(tg.Victim, l)
	for _, subj := range requests {
		for _, reply := range sensitive {
			for _, tok := range tokens {
				for _, body := range bodies {
					m := &nats.Msg{Subject: subj, Reply: reply, Data: body, Header: nats.Header{}}
					if tok != "" {
						m.Header.Set("Authorization", "Bearer "+tok)
					}
					if err := tg.Attacker.PublishMsg(m); err != nil {
						t.Fatalf("publish %s reply %s: %v", subj, reply, err)
					}
					sends++
				}
			}
		}
		// Straight at the sensitive subjects, and with every JetStream
		// header on the subjects the tenant may publish.
		for _, h := range jetStreamHeaders(tg) {
			m := &nats.Msg{Subject: subj, Header: h, Data: []byte(`{}`)}
			if err := tg.Attacker.PublishMsg(m); err != nil {
				t.Fatalf("publish %s with %v: %v", subj, h, err)
			}
			sends++
		}
	}
	for _, s := range append(sensitive, ForgedSubjects(tg.AttackerTenant, tg.Victim, l)...) {
		if err := tg.Attacker.Publish(s, []byte(`{"on":true}`)); err != nil {
			t.Fatalf("publish %s: %v", s, err)
		}
		sends++
	}
	// No JetStream in a tenant account: its API refuses, so no stream,
	// bucket or consumer of any kind can exist or be reached there.
	if js, err := jetstream.New(tg.Attacker); err != nil {
		t.Fatal(err)
	} else if _, err := js.AccountInfo(ctx); err == nil {
		t.Errorf("JetStream is enabled in tenant %s's account", tg.AttackerTenant)
	} else if !errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) && !errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
		t.Errorf("JetStream in tenant %s's account: %v; want not enabled", tg.AttackerTenant, err)
	}
	// Barrier: one answered request per endpoint and one PubAck per event
	// subject (one in each shard), after everything above on the same
	// connection.
	for _, subj := range requests {
		if _, err := tg.Attacker.Request(subj, []byte(`{}`), 10*time.Second); err != nil {
			t.Errorf("barrier request %s: %v (the attacker's own path should answer)", subj, err)
		}
	}
	t.Logf("%d attacking messages from tenant %s's account", sends, tg.AttackerTenant)

	after := snapshot(ctx, t, tg.Observer)
	for stream, st := range after {
		from := before[stream]
		// The log nobody may erase: a roll-up or purge that got through
		// would move its first message or shrink it. (A shard lets go of
		// what its runner finished: what it held of the victim's is
		// checked below.)
		if stream == bus.StreamEvents && from.Msgs > 0 && (st.FirstSeq != from.FirstSeq || st.Msgs < from.Msgs) {
			t.Errorf("%s lost messages during the attacks: first %d → %d, %d → %d messages", stream, from.FirstSeq, st.FirstSeq, from.Msgs, st.Msgs)
		}
		if st.LastSeq > from.LastSeq {
			checkNew(ctx, t, tg, stream, from.LastSeq, st.LastSeq)
		}
	}
	// The victim's events, in the log and in the shards (where the
	// witness holds them), are what they were: none gone, none added.
	victimAfter := victimEvents(ctx, t, tg)
	for stream, was := range victimBefore {
		if now := victimAfter[stream]; !maps.Equal(now, was) {
			t.Errorf("tenant %s's events in %s changed during the attacks: %v, were %v", tg.Victim, stream, now, was)
		}
	}
}

// checkTenantWritten holds a stream tenants write to the settings the
// attacks rely on: nothing there may act on another publisher's message.
func checkTenantWritten(ctx context.Context, t *testing.T, js jetstream.JetStream, stream string) {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	if c := s.CachedInfo().Config; c.AllowMsgSchedules || c.AllowRollup || !c.DenyPurge || !c.DenyDelete || c.Duplicates != 0 {
		t.Errorf("%s, which tenants write, allows schedules %v, roll-ups %v, purge %v, delete %v, dedupe window %s; want none",
			stream, c.AllowMsgSchedules, c.AllowRollup, !c.DenyPurge, !c.DenyDelete, c.Duplicates)
	}
}

// seedID is the CE id (and Nats-Msg-Id) of the victim's seed event, which
// the attacks also put on their own publishes.
const seedID = "tenantattack-seed-1"

// seed puts the witness on every shard, gives the victim's SeedSession an
// input and waits until a runner has run it: its record idle again, the
// event in the log, and (held by the witness) in its shard. The witness
// goes when the test ends, and the shards let go of what it held.
func seed(ctx context.Context, t *testing.T, tg Target) {
	t.Helper()
	l := tg.layout
	for _, stream := range TenantWritten(l) {
		_, err := tg.Observer.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable:       witness,
			Description:   "tenantattack: keeps tenant " + tg.Victim + "'s events here during the attacks",
			FilterSubject: "jetway.*.*." + tg.Victim + ".*",
			AckPolicy:     jetstream.AckExplicitPolicy,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			t.Fatalf("witness on %s: %v", stream, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := tg.Observer.DeleteConsumer(ctx, stream, witness); err != nil {
				t.Errorf("delete the witness on %s: %v", stream, err)
			}
		})
	}
	e, err := events.New(tg.Victim, SeedSession, "tenantattack", events.Input{Text: "tenantattack seed"})
	if err != nil {
		t.Fatal(err)
	}
	e.SetID(seedID)
	subject, err := events.EventsSubject(tg.Victim, SeedSession)
	if err != nil {
		t.Fatal(err)
	}
	m, err := events.Encode(ctx, subject, e)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := tg.Observer.PublishMsg(ctx, m)
	if err != nil {
		t.Fatalf("the victim's seed event: %v", err)
	}
	p := bus.PartitionFor(tg.Victim, SeedSession, l.Partitions)
	if ack.Stream != l.Stream(p) {
		t.Fatalf("the victim's seed event was stored in %s, want its partition %d's shard %s", ack.Stream, p, l.Stream(p))
	}
	sessions, err := tg.Observer.KeyValue(ctx, bus.BucketSessions)
	if err != nil {
		t.Fatalf("bucket %s: %v", bus.BucketSessions, err)
	}
	byPartition, err := tg.Observer.KeyValue(ctx, bus.BucketSessionsByPartition)
	if err != nil {
		t.Fatalf("bucket %s: %v", bus.BucketSessionsByPartition, err)
	}
	// The runner writes the record at a run's end, then nothing of the
	// session's until its next event; the server's copy by partition
	// follows it a moment later, and must be in before the attacks' window
	// opens too.
	testutil.Eventually(t, time.Minute, "the victim's seed event run by a runner and logged", func() bool {
		ev, err := tg.Observer.Stream(ctx, bus.StreamEvents)
		if err != nil {
			return false
		}
		if _, err := ev.GetLastMsgForSubject(ctx, subject); err != nil {
			return false
		}
		e, err := sessions.Get(ctx, sessionrec.Key(tg.Victim, SeedSession))
		if err != nil {
			return false
		}
		rec, err := sessionrec.Decode(e.Value())
		if err != nil || rec.State != sessionrec.StateIdle || rec.Runs < 1 {
			return false
		}
		c, err := byPartition.Get(ctx, bus.SessionsByPartitionKey(p, tg.Victim, SeedSession))
		return err == nil && bytes.Equal(c.Value(), e.Value())
	})
	if tg.Headlines {
		notify, err := events.NotifySubject(tg.Victim, SeedSession)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, time.Minute, "the headline of the victim's seed run's end", func() bool {
			return lastHeadlineAbout(ctx, tg.Observer, notify) == events.TypeRunEnded
		})
	}
}

// lastHeadlineAbout is what the last headline on subject is about, or ""
// when there is none.
func lastHeadlineAbout(ctx context.Context, js jetstream.JetStream, subject string) string {
	out, err := js.Stream(ctx, bus.StreamOut)
	if err != nil {
		return ""
	}
	m, err := out.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return ""
	}
	var h events.HeadlineNote
	if json.Unmarshal(m.Data, &h) != nil {
		return ""
	}
	return h.About
}

// victimEvents counts the victim's events by subject, in the log and in
// each shard.
func victimEvents(ctx context.Context, t *testing.T, tg Target) map[string]map[string]uint64 {
	t.Helper()
	out := map[string]map[string]uint64{}
	count := func(stream, filter string) {
		s, err := tg.Observer.Stream(ctx, stream)
		if err != nil {
			t.Fatalf("stream %s: %v", stream, err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			t.Fatalf("stream %s, subjects %s: %v", stream, filter, err)
		}
		out[stream] = maps.Clone(info.State.Subjects)
	}
	count(bus.StreamEvents, "jetway.*."+tg.Victim+".*")
	for _, stream := range TenantWritten(tg.layout) {
		count(stream, "jetway.*.*."+tg.Victim+".*")
	}
	seedShard := tg.layout.Stream(bus.PartitionFor(tg.Victim, SeedSession, tg.layout.Partitions))
	if out[seedShard][partitioned("events", bus.PartitionFor(tg.Victim, SeedSession, tg.layout.Partitions), tg.Victim, SeedSession)] == 0 ||
		out[bus.StreamEvents]["jetway.events."+tg.Victim+"."+SeedSession] == 0 {
		t.Fatalf("the victim's seed event is not in %s and in %s: the checks would prove nothing (%v)", seedShard, bus.StreamEvents, out)
	}
	return out
}

// snapshot is every stream's state.
func snapshot(ctx context.Context, t *testing.T, js jetstream.JetStream) map[string]jetstream.StreamState {
	t.Helper()
	out := map[string]jetstream.StreamState{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = info.State
	}
	if err := l.Err(); err != nil {
		t.Fatalf("list streams: %v", err)
	}
	return out
}

// checkNew reads what stream stored after seq from and refuses anything
// written for the victim or for everyone by the attacks.
func checkNew(ctx context.Context, t *testing.T, tg Target, stream string, from, to uint64) {
	t.Helper()
	s, err := tg.Observer.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	for seq := from + 1; seq <= to; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted or expired since: it was not the attack's
		}
		if reason := crossed(tg, stream, m.Subject); reason != "" {
			t.Errorf("stream %s seq %d: %s: %s (%.80q)", stream, seq, m.Subject, reason, m.Data)
		}
	}
}

// guardedBuckets are the buckets whose keys start with the tenant (or
// are global): a key the attacker wrote outside its own tenant crossed.
// The runners' heartbeats and the workers' bindings change on their own
// and are keyed otherwise; they are checked by the victim token alone.
var guardedBuckets = []string{bus.BucketControl, bus.BucketAgents, bus.BucketEventIDs, bus.BucketSessions, bus.BucketJobs}

// byPartitionBuckets are keyed <p>.<tenant>.…: the owner is the second token.
var byPartitionBuckets = []string{bus.BucketSessionsByPartition}

// crossed says why a stored subject shows the attack got through, or "".
func crossed(tg Target, stream, subject string) string {
	for _, tok := range strings.Split(subject, ".") {
		if tok == tg.Victim {
			return "written in the victim tenant's name"
		}
	}
	for _, b := range guardedBuckets {
		key, ok := strings.CutPrefix(subject, "$KV."+b+".")
		if !ok {
			continue
		}
		if owner, _, _ := strings.Cut(key, "."); owner != tg.AttackerTenant {
			return fmt.Sprintf("key %q of bucket %s written outside tenant %s (a switch, a profile, a record or a dedupe claim)", key, b, tg.AttackerTenant)
		}
	}
	for _, b := range byPartitionBuckets {
		key, ok := strings.CutPrefix(subject, "$KV."+b+".")
		if !ok {
			continue
		}
		if toks := strings.SplitN(key, ".", 3); len(toks) < 2 || toks[1] != tg.AttackerTenant {
			return fmt.Sprintf("key %q of bucket %s written outside tenant %s (a session record)", key, b, tg.AttackerTenant)
		}
	}
	if stream == bus.StreamEvents && !strings.HasPrefix(subject, "jetway.events."+tg.AttackerTenant+".") {
		return fmt.Sprintf("an event outside tenant %s's subjects", tg.AttackerTenant)
	}
	if strings.HasPrefix(stream, bus.StreamWorkPrefix) {
		toks := strings.Split(subject, ".")
		if len(toks) != 5 || toks[1] != "events" || toks[3] != tg.AttackerTenant {
			return fmt.Sprintf("an event outside tenant %s's subjects", tg.AttackerTenant)
		}
		if want := strconv.Itoa(bus.PartitionFor(toks[3], toks[4], tg.layout.Partitions)); toks[2] != want {
			return fmt.Sprintf("an event in partition %s, where the mapping puts the session in %s: the publisher chose it", toks[2], want)
		}
	}
	return ""
}
