package main

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/services/dispatcher"
)

// realDispatcher serves a real dispatcher on a real JetStream server and
// returns its URL; fakeToken is a token of tenant "default".
func realDispatcher(t *testing.T) string {
	t.Helper()
	url, _ := serveDispatcher(t, auth.Grant{Token: fakeToken, Tenant: "default"})
	return url
}

// serveDispatcher serves a real dispatcher with grants on a real,
// provisioned JetStream server (no rate limit) and returns its URL and
// the server's connection: the one setup the client commands' tests share.
func serveDispatcher(t *testing.T, grants ...auth.Grant) (string, *nats.Conn) {
	t.Helper()
	_, nc, _ := bustest.StartProvisioned(t, bus.ProvisionConfig{Partitions: 1})
	store, err := auth.New(grants...)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(dispatcher.Config{Conn: nc, Auth: store, RatePerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	return srv.URL, nc
}

func TestRecovery_command_shows_sets_merges_and_clears(t *testing.T) {
	url := realDispatcher(t)
	run := func(args ...string) string {
		t.Helper()
		out, err := runCLI(t, append([]string{"recovery", "--url", url, "--token", fakeToken}, args...)...)
		if err != nil {
			t.Fatalf("recovery %v: %v\n%s", args, err, out)
		}
		return out
	}
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"s1"}, "s1 recovery: policy automatic (default), max attempts 3 (default)\n"},
		{[]string{"s1", "--policy", "manual"}, "set: s1 recovery: policy manual (set for this session), max attempts 3 (default)\n"},
		// Naming only the attempts keeps the policy set before.
		{[]string{"s1", "--max-attempts", "0"}, "set: s1 recovery: policy manual (set for this session), max attempts 0 (set for this session; never restarts on its own)\n"},
		{[]string{"s1"}, "s1 recovery: policy manual (set for this session), max attempts 0 (set for this session; never restarts on its own)\n"},
		// --clear with a flag starts from no override.
		{[]string{"s1", "--clear", "--policy", "never"}, "set: s1 recovery: policy never (set for this session), max attempts 3 (default)\n"},
		{[]string{"s1", "--clear"}, "cleared: s1 recovery: policy automatic (default), max attempts 3 (default)\n"},
	}
	for _, s := range steps {
		if got := run(s.args...); got != s.want {
			t.Fatalf("recovery %v printed\n%q\nwant\n%q", s.args, got, s.want)
		}
	}

	var r struct {
		Override  *map[string]any `json:"override"`
		Effective struct {
			Policy      string `json:"policy"`
			MaxAttempts int    `json:"max_attempts"`
		} `json:"effective"`
	}
	out := run("s1", "--json", "--max-attempts", "7")
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Override == nil || r.Effective.MaxAttempts != 7 {
		t.Fatalf("--json printed %q (%v)", out, err)
	}
}

func TestRecovery_command_shows_the_dispatchers_refusal(t *testing.T) {
	url := realDispatcher(t)
	out, err := runCLI(t, "recovery", "--url", url, "--token", fakeToken, "s1", "--policy", "sometimes")
	if err == nil || !strings.Contains(err.Error(), `"manual"`) || !strings.Contains(err.Error(), "(400)") {
		t.Fatalf("error = %v (printed %q), want the 400 naming the allowed policies", err, out)
	}
	_, err = runCLI(t, "recovery", "--url", url, "--token", fakeToken, "s1", "--max-attempts", "-2")
	if err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("error = %v, want a refusal of a negative --max-attempts", err)
	}
}
