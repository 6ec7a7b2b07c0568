package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
)

func get(t *testing.T, p *process, url string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v\n%s", url, err, p.output())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

func TestDev_provisions_serves_health_and_stops_cleanly_on_SIGTERM(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	p := start(t, "dev", "--data", data, "--nats", "127.0.0.1:0", "--http", "127.0.0.1:0", "--partitions", "4", "--log-format", "json")

	natsURL := p.waitLine(t, "NATS URL: ", 60*time.Second)
	httpLine := p.waitLine(t, "http: ", 30*time.Second)
	if model := p.waitLine(t, "model: ", 30*time.Second); model == "" {
		t.Error("the model line names no model")
	}
	p.waitLine(t, "ready;", 60*time.Second)
	httpURL, _, _ := strings.Cut(httpLine, " ")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The dev bus takes only its users: a client without a credential is refused.
	if _, err := nats.Connect(natsURL, nats.Timeout(10*time.Second), nats.MaxReconnects(0)); err == nil {
		t.Fatalf("connect to %s without the dev token: want refused, got connected", natsURL)
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("connect to %s without the dev token: want an authorization error, got %v", natsURL, err)
	}
	token, err := os.ReadFile(filepath.Join(data, devNATSTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(data, devNATSTokenFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("dev token file mode: %v %v, want 0600", fi.Mode(), err)
	}
	nc, err := bus.Connect(ctx, bus.ConnConfig{URLs: []string{natsURL}, User: devServiceUser, Password: strings.TrimSpace(string(token)), Name: t.Name()})
	if err != nil {
		t.Fatalf("connect to %s: %v", natsURL, err)
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	lister := js.StreamNames(ctx)
	for n := range lister.Name() {
		names = append(names, n)
	}
	if err := lister.Err(); err != nil {
		t.Fatalf("list streams: %v", err)
	}
	for _, want := range []string{bus.StreamEvents, bus.WorkStream(0), bus.StreamTranscripts, bus.StreamOut} {
		if !slices.Contains(names, want) {
			t.Errorf("stream %s missing; streams: %v", want, names)
		}
	}
	if p, err := bus.Partitions(ctx, js); err != nil || p != 4 {
		t.Errorf("partitions = %d, %v; want 4", p, err)
	}

	// The micro services state the build's version, not a bare 0.0.0.
	for _, svc := range []string{"jetway-jobs", "jetway-dispatcher"} {
		// Each service adds its micro endpoint as it starts, beside the
		// others: one may answer a moment after the health check does.
		var msg *nats.Msg
		testutil.EventuallyNil(t, 10*time.Second, "micro info "+svc, func() (err error) {
			msg, err = nc.Request("$SRV.INFO."+svc, nil, 2*time.Second)
			return err
		})
		var info struct{ Version string }
		if err := json.Unmarshal(msg.Data, &info); err != nil || info.Version != semverOf(testVersion) {
			t.Errorf("%s states version %q (%v), want %q", svc, info.Version, err, semverOf(testVersion))
		}
	}

	if code, body := get(t, p, httpURL+"/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	// A component may register its check a moment after the ready line.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get(t, p, httpURL+"/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q after 30s", code, body)
		}
		<-time.After(50 * time.Millisecond)
	}
	if code, body := get(t, p, httpURL+"/metrics"); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics = %d, has go_goroutines: %v", code, strings.Contains(body, "go_goroutines"))
	}
	nc.Close()

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0\n%s", code, p.output())
	}
	if !strings.Contains(p.output(), "nats-server stopped") {
		t.Errorf("no shutdown line\n%s", p.output())
	}
	if _, err := os.Stat(filepath.Join(data, "nats", "jetstream")); err != nil {
		t.Errorf("JetStream store not under --data/nats: %v", err)
	}

	// A second start on the same data keeps the stored partition count.
	p2 := start(t, "dev", "--data", data, "--nats", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json")
	p2.waitLine(t, "provision: 4 work consumers", 60*time.Second)
	p2.waitLine(t, "ready;", 60*time.Second)
	if err := p2.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("SIGINT: %v", err)
	}
	if code := p2.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGINT, want 0\n%s", code, p2.output())
	}
}

func TestChat_command_names_only_the_flags_that_differ_from_the_defaults(t *testing.T) {
	for _, tc := range []struct{ url, tokens, want string }{
		{"http://127.0.0.1:8080", ".jetway/tokens.json", "jetway chat SESSION"},
		{"http://127.0.0.1:8080", "./.jetway/tokens.json", "jetway chat SESSION"},
		{"http://127.0.0.1:9000", ".jetway/tokens.json", "jetway chat SESSION --url http://127.0.0.1:9000"},
		{"http://127.0.0.1:8080", "/tmp/d/tokens.json", "jetway chat SESSION --tokens-file /tmp/d/tokens.json"},
	} {
		if got := chatCommand(tc.url, tc.tokens); got != tc.want {
			t.Errorf("chatCommand(%q, %q) = %q, want %q", tc.url, tc.tokens, got, tc.want)
		}
	}
}

func TestDev_refuses_a_non_loopback_NATS_address_and_says_why(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		data := filepath.Join(t.TempDir(), "data")
		out, err := runCLI(t, "dev", "--data", data, "--nats", addr, "--http", "127.0.0.1:0")
		if err == nil {
			t.Fatalf("--nats %s accepted:\n%s", addr, out)
		}
		for _, why := range []string{"without auth", "loopback", "deploy/nats"} {
			if !strings.Contains(err.Error(), why) {
				t.Errorf("--nats %s: error %q does not say %q", addr, err, why)
			}
		}
		// Refused before anything started: no store was made.
		if _, serr := os.Stat(filepath.Join(data, "nats")); !os.IsNotExist(serr) {
			t.Errorf("--nats %s: the NATS store was created before the refusal (%v)", addr, serr)
		}
	}
}

func TestDev_loopback_names_pass_and_a_public_HTTP_address_is_only_warned_about(t *testing.T) {
	for _, h := range []string{"127.0.0.1", "::1", "localhost", "127.1.2.3"} {
		if err := devNATSAddrAllowed(h); err != nil {
			t.Errorf("%s refused: %v", h, err)
		}
	}
	if note := devHTTPAddrNote("0.0.0.0:8080"); !strings.Contains(note, "bearer token") || !strings.Contains(note, "in clear") {
		t.Errorf("note for 0.0.0.0:8080 = %q", note)
	}
	if note := devHTTPAddrNote("127.0.0.1:8080"); note != "" {
		t.Errorf("loopback HTTP warned about: %q", note)
	}
}

// devStack is a `jetway dev` started for one test on its own data
// directory and free ports.
type devStack struct {
	p      *process
	data   string
	url    string
	tokens string
}

// startDev starts `jetway dev` with extra args and waits until it is ready.
func startDev(t *testing.T, extra ...string) *devStack {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data")
	args := append([]string{"dev", "--data", data, "--nats", "127.0.0.1:0", "--http", "127.0.0.1:0", "--partitions", "2", "--log-format", "json"}, extra...)
	p := start(t, args...)
	httpLine := p.waitLine(t, "http: ", 60*time.Second)
	url, _, _ := strings.Cut(httpLine, " ")
	p.waitLine(t, "ready;", 60*time.Second)
	return &devStack{p: p, data: data, url: url, tokens: filepath.Join(data, "tokens.json")}
}

func TestDev_a_second_dev_on_the_same_data_directory_is_refused_with_the_first_ones_pid_and_URL(t *testing.T) {
	d := startDev(t)
	storeBefore := natsStoreEntries(t, d.data)

	out, err := runCLI(t, "dev", "--data", d.data, "--nats", "127.0.0.1:0", "--http", "127.0.0.1:0")
	if err == nil {
		t.Fatalf("second dev on %s started:\n%s", d.data, out)
	}
	for _, want := range []string{
		fmt.Sprintf("pid %d", d.p.cmd.Process.Pid),
		"already running on data directory " + d.data,
		"at " + d.url,
		"jetway chat SESSION --url " + d.url + " --tokens-file " + d.tokens,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if strings.Contains(out, "nats-server started") {
		t.Errorf("the second dev started a nats-server before refusing:\n%s", out)
	}
	if after := natsStoreEntries(t, d.data); !slices.Equal(after, storeBefore) {
		t.Errorf("the second dev touched the NATS store: %v, was %v", after, storeBefore)
	}
	// The first one still serves.
	if code, _ := get(t, d.p, d.url+"/healthz"); code != http.StatusOK {
		t.Errorf("first dev /healthz = %d after the refusal", code)
	}
}

func natsStoreEntries(t *testing.T, data string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(data, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestClient_commands_find_the_running_dev_of_their_data_directory_without_url(t *testing.T) {
	d := startDev(t)
	t.Setenv("JETWAY_URL", "")
	t.Setenv("JETWAY_TOKEN", "")
	// No --url: the URL comes from the dev's lock file next to the tokens.
	out, err := runCLI(t, "send", "--tokens-file", d.tokens, "found", "hello")
	if err != nil {
		t.Fatalf("send without --url to a dev on %s: %v\n%s", d.url, err, out)
	}
	if !strings.HasPrefix(out, "sent ") {
		t.Errorf("send answered %q", out)
	}

	// Once it stops, its URL is no longer offered: clients fall back to
	// the default and say they cannot reach it.
	if err := d.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("dev exit code %d\n%s", code, d.p.output())
	}
	_, err = runCLI(t, "send", "--tokens-file", d.tokens, "found", "hello")
	if err == nil || strings.Contains(err.Error(), d.url) {
		t.Errorf("send after the dev stopped: %v, want an error not naming the stopped dev's %s", err, d.url)
	}
}

func TestDev_refuses_bad_flags_before_starting_NATS(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--http", "bogus"}, "--http"},
		{[]string{"--http", "127.0.0.1:99999"}, "--http"},
		{[]string{"--partitions", "-1"}, "--partitions"},
		{[]string{"--job-env", "NATS_TOKEN"}, "--job-env"},
	} {
		data := filepath.Join(t.TempDir(), "data")
		args := append([]string{"dev", "--data", data, "--nats", "127.0.0.1:0", "--http", "127.0.0.1:0"}, tc.args...)
		out, err := runCLI(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s\n%s", tc.args, err, tc.want, out)
		}
		if strings.Contains(out, "nats-server started") {
			t.Errorf("%v: NATS started before the refusal:\n%s", tc.args, out)
		}
		if _, serr := os.Stat(filepath.Join(data, "nats", "jetstream")); !os.IsNotExist(serr) {
			t.Errorf("%v: a JetStream store was made before the refusal (%v)", tc.args, serr)
		}
	}
}

func TestDev_refuses_an_HTTP_port_in_use_before_starting_NATS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	data := filepath.Join(t.TempDir(), "data")
	out, err := runCLI(t, "dev", "--data", data, "--nats", "127.0.0.1:0", "--http", ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error %v, want the port in use named\n%s", err, out)
	}
	if strings.Contains(out, "nats-server started") {
		t.Errorf("NATS started before the refusal:\n%s", out)
	}
}

func TestClient_sends_a_session_name_escaped_once(t *testing.T) {
	d := startDev(t)
	_, err := runCLI(t, "send", "--url", d.url, "--tokens-file", d.tokens, "my session", "hello")
	if err == nil {
		t.Fatal("a session name with a space was accepted")
	}
	if !strings.Contains(err.Error(), `"my session"`) || strings.Contains(err.Error(), "%25") {
		t.Errorf("refusal %q: want it to name \"my session\" as typed (escaped once on the wire)", err)
	}
}

func TestDev_names_a_Ground_Stop_left_on_when_it_starts_and_how_to_lift_it(t *testing.T) {
	// A switch survives a restart; a stack that starts with one on and
	// says nothing looks broken when typing produces nothing.
	d := startDev(t)
	if out, err := runCLI(t, "stop", "--url", d.url, "--tokens-file", d.tokens, "--session", "demo", "--reason", "look first"); err != nil {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	if err := d.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("dev exit code %d\n%s", code, d.p.output())
	}

	p := start(t, "dev", "--data", d.data, "--nats", "127.0.0.1:0", "--http", "127.0.0.1:0", "--partitions", "2", "--log-format", "json")
	line := p.waitLine(t, "! Ground Stop on session default/demo since ", 60*time.Second)
	for _, want := range []string{"(look first)", "lift it with: ", "stop --off --session demo --url "} {
		if !strings.Contains(line, want) {
			t.Errorf("the dev's Ground Stop line %q lacks %q", line, want)
		}
	}
	p.waitLine(t, "ready;", 60*time.Second)
}
