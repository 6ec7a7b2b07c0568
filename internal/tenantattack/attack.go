// Package tenantattack tries to cross the tenant boundary from inside a
// tenant's NATS account, by every path the account offers, and checks that
// nothing crossed: no message stored in the JETWAY account for another
// tenant or for everyone, no Ground Stop flipped, no profile written.
//
// The paths are enumerated from the layout itself (bus.TenantExports, and
// dispatcherapi.Endpoints for the API), so a subject family or an endpoint
// added to the platform is attacked here without anyone remembering to. It
// is used by the tests of `jetway dev` (test/e2e) and of the production
// configuration on a three-node cluster (deploy/deploytest).
package tenantattack

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/control/approvals"
	"jetway/pkg/control/layovers"
	api "jetway/pkg/dispatcherapi"
)

// Target is one attack: the attacker's connection in its own account, and
// an observer in JETWAY that may read every stream.
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
	// Observer reads the JETWAY account's streams (a service or admin user).
	Observer jetstream.JetStream
}

// SensitiveReplies are the subjects an attacker would aim a reply at: each
// bucket's keys of the victim and the global ones, the JetStream API, and
// every jetway subject family in the victim's name.
func SensitiveReplies(victim string) []string {
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
		"$KV." + bus.BucketEventIDs + "." + victim + ".s1.x",
		"$KV." + bus.BucketJobs + "." + victim + ".s1.1",
		"$KV." + bus.BucketWorkers + "." + victim + ".s1",
		"$KV." + bus.BucketRunners + ".r1",
		"$JS.API.STREAM.PURGE." + bus.StreamEvents,
		"$JS.API.STREAM.DELETE." + bus.StreamEvents,
		"$JS.API.STREAM.PURGE." + bus.StreamWork,
	}
	for _, family := range []string{"events", "jobevents", "agentevents", "schedules", "fired", "transcript", "out", "notify"} {
		out = append(out, "jetway."+family+"."+victim+".s1")
	}
	return out
}

// Requests are the subjects a tenant user can send to through its imports
// (the service exports), instantiated: one session subject per events
// family, every API endpoint.
func Requests() []string {
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
			out = append(out, strings.Replace(e.Local, "*", "s1", 1))
		}
	}
	return out
}

// jetStreamHeaders are the headers that make a stream act beyond the
// publisher's subject or slot: schedules, roll-ups, dedupe ids, TTLs.
func jetStreamHeaders(victim string) []nats.Header {
	return []nats.Header{
		{"Nats-Schedule": {"@at 2020-01-01T00:00:00Z"}, "Nats-Schedule-Target": {"jetway.events." + victim + ".s1"}},
		{"Nats-Schedule": {"@every 1s"}, "Nats-Schedule-Target": {"jetway.fired." + victim + ".s1"}, "Nats-Schedule-Source": {"jetway.events." + victim + ".s1"}},
		{"Nats-Rollup": {"all"}},
		{"Nats-Rollup": {"sub"}},
		{"Nats-Msg-Id": {"ci-1"}},
		{"Nats-Msg-Id": {"agent-finished." + victim + ".s1.r1"}},
		{"Nats-TTL": {"1s"}},
		{"Nats-Expected-Stream": {bus.StreamJobEvents}},
	}
}

// Run attacks and checks. Every send is followed by a round trip on the
// same path, so the check reads what the server and the dispatcher did
// with it, not a race.
func Run(t *testing.T, tg Target) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := snapshot(ctx, t, tg.Observer)

	bodies := [][]byte{[]byte(`{}`), []byte(`{"session":"s1","text":"x","name":"evil","action":"put","profile":{}}`), []byte(`{"action":"on","scope":"global"}`),
		// A decision on an approval: the victim's are out of reach (404),
		// and one of the attacker's own wakes only the attacker's session.
		[]byte(`{"action":"decide","session":"s1","approval":"ap-1","decision":"approve","tenant":"` + tg.Victim + `"}`)}
	tokens := []string{"", tg.AttackerToken, tg.AdminToken}
	sends := 0
	for _, subj := range Requests() {
		for _, reply := range SensitiveReplies(tg.Victim) {
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
		for _, h := range jetStreamHeaders(tg.Victim) {
			m := &nats.Msg{Subject: subj, Header: h, Data: []byte(`{}`)}
			if err := tg.Attacker.PublishMsg(m); err != nil {
				t.Fatalf("publish %s with %v: %v", subj, h, err)
			}
			sends++
		}
	}
	for _, s := range SensitiveReplies(tg.Victim) {
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
	// subject, after everything above on the same connection.
	for _, subj := range Requests() {
		if _, err := tg.Attacker.Request(subj, []byte(`{}`), 10*time.Second); err != nil {
			t.Errorf("barrier request %s: %v (the attacker's own path should answer)", subj, err)
		}
	}
	t.Logf("%d attacking messages from tenant %s's account", sends, tg.AttackerTenant)

	after := snapshot(ctx, t, tg.Observer)
	for stream, st := range after {
		from := before[stream]
		// The log nobody may erase: a roll-up or purge that got through
		// would move its first message or shrink it.
		if stream == bus.StreamEvents && from.Msgs > 0 && (st.FirstSeq != from.FirstSeq || st.Msgs < from.Msgs) {
			t.Errorf("%s lost messages during the attacks: first %d → %d, %d → %d messages", stream, from.FirstSeq, st.FirstSeq, from.Msgs, st.Msgs)
		}
		if st.LastSeq > from.LastSeq {
			checkNew(ctx, t, tg, stream, from.LastSeq, st.LastSeq)
		}
	}
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
	if stream == bus.StreamEvents && !strings.HasPrefix(subject, "jetway.events."+tg.AttackerTenant+".") {
		return fmt.Sprintf("an event outside tenant %s's subjects", tg.AttackerTenant)
	}
	return ""
}
