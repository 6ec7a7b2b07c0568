package bus_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("reserve port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startServer runs a nats-server with the given options and stops it when
// the test ends.
func startServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host = "127.0.0.1"
	if opts.Port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	s.Start()
	t.Cleanup(func() { bus.StopEmbedded(s) })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("server not ready")
	}
	return s
}

func TestConnect_gives_up_when_the_context_ends_and_no_server_answers(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := bus.Connect(ctx, bus.ConnConfig{
		URLs:          []string{"nats://127.0.0.1:" + itoa(freePort(t))},
		ReconnectWait: 20 * time.Millisecond,
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Connect error = %v, want one wrapping context.DeadlineExceeded", err)
	}
}

func TestConnect_waits_for_a_server_that_starts_later(t *testing.T) {
	port := freePort(t)
	type result struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := bus.Connect(testContext(t), bus.ConnConfig{
			URLs:          []string{"nats://127.0.0.1:" + itoa(port)},
			ReconnectWait: 20 * time.Millisecond,
		})
		done <- result{nc, err}
	}()
	s, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir(), Port: port})
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(func() { bus.StopEmbedded(s) })
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Connect: %v", r.err)
		}
		r.nc.Close()
	case <-time.After(20 * time.Second):
		t.Fatal("Connect did not return after the server started")
	}
}

func TestConnect_reports_disconnect_and_reconnect_to_the_logger(t *testing.T) {
	port, dir := freePort(t), t.TempDir()
	cfg := bus.EmbeddedConfig{StoreDir: dir, Port: port, ServerName: "one"}
	s, err := bus.StartEmbedded(cfg)
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(func() { bus.StopEmbedded(s) })

	events, logger := connEvents()
	nc, err := bus.Connect(testContext(t), bus.ConnConfig{
		URLs:          []string{s.ClientURL()},
		Name:          "logger-test",
		ReconnectWait: 20 * time.Millisecond,
		Logger:        logger,
	})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(nc.Close)

	bus.StopEmbedded(s)
	waitEvent(t, events, bus.ConnDisconnected)
	s2, err := bus.StartEmbedded(cfg)
	if err != nil {
		t.Fatalf("restart server: %v", err)
	}
	t.Cleanup(func() { bus.StopEmbedded(s2) })
	waitEvent(t, events, bus.ConnReconnected)
	if !nc.IsConnected() {
		t.Errorf("connection not connected after reconnect event")
	}
}

// connEvents is a ConnConfig.Logger and the channel it reports to.
func connEvents() (<-chan bus.ConnEvent, func(bus.ConnEvent)) {
	events := make(chan bus.ConnEvent, 16)
	return events, func(ev bus.ConnEvent) {
		select {
		case events <- ev:
		default:
		}
	}
}

func waitEvent(t *testing.T, events <-chan bus.ConnEvent, kind bus.ConnEventKind) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Kind == kind {
				return
			}
		case <-timeout:
			t.Fatalf("no %s event", kind)
		}
	}
}

func TestConnect_authenticates_with_a_token(t *testing.T) {
	s := startServer(t, &server.Options{Authorization: "s3cret"})
	ctx := testContext(t)
	nc, err := bus.Connect(ctx, bus.ConnConfig{URLs: []string{s.ClientURL()}, Token: "s3cret"})
	if err != nil {
		t.Fatalf("Connect with the right token: %v", err)
	}
	nc.Close()
	if nc, err := bus.Connect(ctx, bus.ConnConfig{URLs: []string{s.ClientURL()}, Token: "wrong"}); err == nil {
		nc.Close()
		t.Fatal("Connect with a wrong token succeeded")
	}
}

func TestConnect_authenticates_with_user_and_password(t *testing.T) {
	s := startServer(t, &server.Options{Username: "jet", Password: "way"})
	nc, err := bus.Connect(testContext(t), bus.ConnConfig{URLs: []string{s.ClientURL()}, User: "jet", Password: "way"})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	nc.Close()
}

func TestConnect_speaks_mutual_TLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t, dir)
	writeLeaf(t, dir, "server", ca, caKey, x509.ExtKeyUsageServerAuth)
	writeLeaf(t, dir, "client", ca, caKey, x509.ExtKeyUsageClientAuth)
	path := func(name string) string { return filepath.Join(dir, name) }

	tlsCfg, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: path("server.pem"), KeyFile: path("server-key.pem"), CaFile: path("ca.pem"), Verify: true,
	})
	if err != nil {
		t.Fatalf("server TLS config: %v", err)
	}
	s := startServer(t, &server.Options{TLSConfig: tlsCfg, TLSVerify: true, TLS: true, TLSTimeout: 2})
	ctx := testContext(t)

	nc, err := bus.Connect(ctx, bus.ConnConfig{
		URLs:      []string{s.ClientURL()},
		TLSCAFile: path("ca.pem"), TLSCertFile: path("client.pem"), TLSKeyFile: path("client-key.pem"),
	})
	if err != nil {
		t.Fatalf("Connect with client certificate: %v", err)
	}
	if _, err := nc.TLSConnectionState(); err != nil {
		t.Errorf("connection is not TLS: %v", err)
	}
	nc.Close()

	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if nc, err := bus.Connect(short, bus.ConnConfig{URLs: []string{s.ClientURL()}, TLSCAFile: path("ca.pem")}); err == nil {
		nc.Close()
		t.Fatal("Connect without a client certificate succeeded against a server that requires one")
	}
	if _, err := bus.Connect(ctx, bus.ConnConfig{URLs: []string{s.ClientURL()}, TLSCertFile: path("client.pem")}); err == nil {
		t.Fatal("Connect accepted a certificate without its key")
	}
}

func newCA(t *testing.T, dir string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "jetway test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", der)
	return cert, key
}

func writeLeaf(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	writePEM(t, filepath.Join(dir, name+"-key.pem"), "EC PRIVATE KEY", keyDER)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestConnect_authenticates_with_an_nkey_seed_file(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	ctx := testContext(t)
	nc, err := bus.Connect(ctx, bus.ConnConfig{URLs: []string{s.ClientURL()}, NKeySeedFile: seedFile})
	if err != nil {
		t.Fatalf("Connect with nkey seed: %v", err)
	}
	nc.Close()
	if _, err := bus.Connect(ctx, bus.ConnConfig{URLs: []string{s.ClientURL()}, NKeySeedFile: filepath.Join(t.TempDir(), "missing.nk")}); err == nil {
		t.Fatal("Connect with a missing seed file succeeded")
	}
}

func TestConnect_with_an_inbox_prefix_gets_replies_where_its_user_may_only_listen(t *testing.T) {
	// A user that may subscribe only to its own inbox prefix: a request
	// works only if the connection really uses the prefix for its replies.
	s := startServer(t, &server.Options{Users: []*server.User{{
		Username: "runner", Password: "pw",
		Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"svc.echo"}},
			Subscribe: &server.SubjectPermission{Allow: []string{bus.ServiceInbox("runner") + ".>"}},
		},
	}, {Username: "echo", Password: "pw"}}})
	echo, err := nats.Connect(s.ClientURL(), nats.UserInfo("echo", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(echo.Close)
	if _, err := echo.Subscribe("svc.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := echo.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := bus.Connect(ctx, bus.ConnConfig{URLs: []string{s.ClientURL()}, User: "runner", Password: "pw",
		InboxPrefix: bus.ServiceInbox("runner")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if got := nc.NewInbox(); len(got) < 14 || got[:14] != "_INBOX_runner." {
		t.Fatalf("NewInbox = %q, want the _INBOX_runner. prefix", got)
	}
	reply, err := nc.RequestWithContext(ctx, "svc.echo", []byte("ping"))
	if err != nil || string(reply.Data) != "ping" {
		t.Fatalf("request through the service inbox: %v, %v", reply, err)
	}
}

// A link that goes silent without a reset, as when a node loses its power
// or the network is cut, is dropped once the server stops answering for
// DeadLinkAfter, and the client goes on through another server of its
// list: it does not sit on a dead link for minutes.
func TestConnect_leaves_a_link_that_went_silent_for_another_server(t *testing.T) {
	s := startServer(t, &server.Options{})
	upstream := strings.TrimPrefix(s.ClientURL(), "nats://")
	links := map[string]*testutil.Blackhole{}
	var urls []string
	for range 2 {
		b := testutil.StartBlackhole(t, upstream)
		links[b.URL()] = b
		urls = append(urls, b.URL())
	}
	events, logger := connEvents()
	nc, err := bus.Connect(testContext(t), bus.ConnConfig{
		URLs:          urls,
		ReconnectWait: 20 * time.Millisecond,
		DeadLinkAfter: 600 * time.Millisecond,
		Logger:        logger,
	})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(nc.Close)
	first := nc.ConnectedUrl()
	cut, ok := links[first]
	if !ok {
		t.Fatalf("connected to %s, not through a test link (%v)", first, urls)
	}
	t.Cleanup(cut.Mend) // before the links close, so nothing waits on a held read

	cut.Cut()
	waitEvent(t, events, bus.ConnDisconnected)
	waitEvent(t, events, bus.ConnReconnected)
	if now := nc.ConnectedUrl(); now == first || now == "" {
		t.Fatalf("after the link went silent the client is on %q, want the other link", now)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatalf("a round trip through the other link: %v", err)
	}
}

// By default a dead link is noticed within 20 s: far from nats.go's own
// four to six minutes.
func TestConnect_notices_a_dead_link_within_twenty_seconds_by_default(t *testing.T) {
	s := startServer(t, &server.Options{})
	nc, err := bus.Connect(testContext(t), bus.ConnConfig{URLs: []string{s.ClientURL()}})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(nc.Close)
	o := nc.Opts
	noticed := o.PingInterval * time.Duration(o.MaxPingsOut+1)
	if noticed > 20*time.Second || o.FlusherTimeout > 20*time.Second || noticed <= 0 || o.FlusherTimeout <= 0 {
		t.Fatalf("a dead link noticed after %s (pings every %s, %d unanswered), a stuck write after %s; want both within 20 s",
			noticed, o.PingInterval, o.MaxPingsOut, o.FlusherTimeout)
	}
}
