package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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
	// The dev bus takes only its token: a client without it is refused.
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
	nc, err := bus.Connect(ctx, bus.ConnConfig{URLs: []string{natsURL}, Token: strings.TrimSpace(string(token)), Name: t.Name()})
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
	for _, want := range []string{bus.StreamEvents, bus.StreamWork, bus.StreamTranscripts, bus.StreamOut} {
		if !slices.Contains(names, want) {
			t.Errorf("stream %s missing; streams: %v", want, names)
		}
	}
	if p, err := bus.Partitions(ctx, js); err != nil || p != 4 {
		t.Errorf("partitions = %d, %v; want 4", p, err)
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
