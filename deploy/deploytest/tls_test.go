package deploytest

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"jetway/deploy/certs"
	"jetway/pkg/bus"
)

// TestTLS checks the client and route listeners of the deploy
// configuration: TLS with the local CA and a password (a service) or an
// nkey (a tenant's user) gets in; plaintext, an untrusted server
// certificate, a wrong password and an nkey no tenant has do not.
func TestTLS(t *testing.T) {
	d := render(t, renderOptions{})
	d.startCluster()
	n1 := d.nodes[0]

	t.Run("tls_client_with_the_local_CA_connects", func(t *testing.T) {
		for _, user := range []string{"runner", "tenant-acme"} {
			c := d.connect(user)
			if !c.TLSRequired() {
				t.Errorf("%s: server did not require TLS", user)
			}
			state, err := c.TLSConnectionState()
			if err != nil {
				t.Fatal(err)
			}
			if state.Version < tls.VersionTLS12 {
				t.Errorf("%s: TLS version %x, want 1.2 or newer", user, state.Version)
			}
		}
	})

	t.Run("plaintext_client_is_refused", func(t *testing.T) {
		info, reply, err := rawConnect(t, n1.client, fmt.Sprintf(
			`CONNECT {"verbose":false,"pedantic":false,"user":"runner","pass":%q}`+"\r\nPING\r\n",
			d.passwords["runner"]))
		if info["tls_required"] != true {
			t.Errorf("client INFO tls_required = %v, want true", info["tls_required"])
		}
		// The server takes the plaintext CONNECT for a broken TLS
		// handshake and hangs up.
		if strings.Contains(reply, "PONG") {
			t.Errorf("plaintext CONNECT got %q, want no PONG", reply)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("server kept the plaintext connection open (%v), want it closed", err)
		}
	})

	t.Run("server_not_trusted_without_the_CA_is_refused", func(t *testing.T) {
		seed, err := nats.NkeyOptionFromSeed(d.seeds["acme"])
		if err != nil {
			t.Fatal(err)
		}
		for user, auth := range map[string]nats.Option{"runner": nats.UserInfo("runner", d.passwords["runner"]), "tenant-acme": seed} {
			nc, err := nats.Connect(n1.url(), auth, nats.Timeout(5*time.Second))
			if err == nil {
				nc.Close()
				t.Fatalf("%s: connected without trusting the local CA", user)
			}
			if !strings.Contains(err.Error(), "certificate") {
				t.Errorf("%s: err = %v, want a certificate verification error", user, err)
			}
		}
	})

	t.Run("wrong_password_or_unknown_nkey_is_refused", func(t *testing.T) {
		// A tenant user's seed that no tenants.conf lists (made, never
		// written into the tenant accounts), and the old password user of
		// acme, which is gone.
		stranger := bus.TenantCredentials{Dir: t.TempDir()}
		if _, err := stranger.Ensure("acme", ""); err != nil {
			t.Fatal(err)
		}
		seed, err := nats.NkeyOptionFromSeed(stranger.Path("acme", ""))
		if err != nil {
			t.Fatal(err)
		}
		for what, auth := range map[string]nats.Option{
			"a wrong password":         nats.UserInfo("runner", "not-the-password"),
			"an nkey no tenant has":    seed,
			"the old tenant-acme user": nats.UserInfo("tenant-acme", "any"),
		} {
			nc, err := nats.Connect(n1.url(), auth, nats.RootCAs(d.secret(certs.CAFile)), nats.Timeout(5*time.Second))
			if err == nil {
				nc.Close()
				t.Fatalf("connected with %s", what)
			}
			if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
				t.Errorf("%s: err = %v, want an authorization violation", what, err)
			}
		}
	})

	t.Run("routes_require_mutual_tls", func(t *testing.T) {
		route := fmt.Sprintf("127.0.0.1:%d", n1.route)
		pool := x509.NewCertPool()
		ca, err := os.ReadFile(d.secret(certs.CAFile))
		if err != nil || !pool.AppendCertsFromPEM(ca) {
			t.Fatalf("read CA: %v", err)
		}
		// Without a certificate the route listener hangs up.
		if line, err := tlsFirstLine(route, &tls.Config{RootCAs: pool}); err == nil {
			t.Errorf("route without a client certificate answered %q, want a refusal", line)
		}
		// With the nodes' certificate it speaks the route protocol.
		cert, err := tls.LoadX509KeyPair(d.secret(certs.ServerCertFile), d.secret(certs.ServerKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		line, err := tlsFirstLine(route, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}})
		if err != nil || !strings.HasPrefix(line, "INFO ") {
			t.Errorf("route with the node certificate: %q, %v; want its INFO", line, err)
		}
		// Plaintext gets nothing: no INFO, no PONG.
		conn, err := net.DialTimeout("tcp", route, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = conn.Write([]byte("CONNECT {}\r\nPING\r\n"))
		if got, _ := io.ReadAll(conn); strings.Contains(string(got), "PONG") || strings.Contains(string(got), "INFO") {
			t.Errorf("plaintext route got %q", got)
		}
	})
}

// TestMTLS runs the mTLS variant (client-mtls.conf): a password is no longer
// enough, a client certificate from the local CA is needed as well.
func TestMTLS(t *testing.T) {
	d := render(t, renderOptions{mTLS: true})
	n1 := d.nodes[0]
	// One node is enough to test the client listener; its routes to the
	// other two keep retrying in the background.
	d.start(n1)
	d.waitListening(n1)
	user, pw := "runner", d.passwords["runner"]

	nc, err := nats.Connect(n1.url(), nats.UserInfo(user, pw), nats.RootCAs(d.secret(certs.CAFile)), nats.Timeout(5*time.Second))
	if err == nil {
		nc.Close()
		t.Error("connected without a client certificate")
	}

	nc, err = nats.Connect(n1.url(), nats.UserInfo(user, pw), nats.RootCAs(d.secret(certs.CAFile)),
		nats.ClientCert(d.secret(certs.ClientCertFile), d.secret(certs.ClientKeyFile)), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	defer nc.Close()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	nc, err = nats.Connect(n1.url(), nats.UserInfo(user, "wrong"), nats.RootCAs(d.secret(certs.CAFile)),
		nats.ClientCert(d.secret(certs.ClientCertFile), d.secret(certs.ClientKeyFile)), nats.Timeout(5*time.Second))
	if err == nil {
		nc.Close()
		t.Error("a client certificate alone got in with a wrong password")
	}
}

// tlsFirstLine dials addr with TLS and returns the first line the server
// sends. A refused client certificate shows up as an error on that read
// (TLS 1.3 checks it after the client's side of the handshake is done).
func tlsFirstLine(addr string, cfg *tls.Config) (string, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	return bufio.NewReader(conn).ReadString('\n')
}

// rawConnect speaks the NATS protocol in plaintext on port: it reads the
// server's INFO, sends send, and returns the INFO fields, everything the
// server answered, and the error that ended the reading (EOF when the
// server hung up, a timeout after 5 s).
func rawConnect(t *testing.T, port int, send string) (map[string]any, string, error) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("read INFO: %v", err)
	}
	js, ok := strings.CutPrefix(strings.TrimSpace(line), "INFO ")
	if !ok {
		t.Fatalf("first line %q is not INFO", line)
	}
	info := map[string]any{}
	if err := json.Unmarshal([]byte(js), &info); err != nil {
		t.Fatalf("INFO: %v", err)
	}
	if _, err := conn.Write([]byte(send)); err != nil {
		return info, "", err // the server may already have hung up
	}
	var reply strings.Builder
	for {
		l, err := r.ReadString('\n')
		reply.WriteString(l)
		if err != nil {
			return info, reply.String(), err
		}
	}
}
