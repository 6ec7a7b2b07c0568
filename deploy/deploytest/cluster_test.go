package deploytest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"jetway/deploy/certs"
	"jetway/internal/testutil"
	"jetway/pkg/bus"
)

// confDir is the deploy configuration under test.
const confDir = "../nats"

// readyTimeout bounds every wait for servers to come up or to agree.
const readyTimeout = 45 * time.Second

// The event path's layout as the deployment has it: P is the servers'
// (the partition mapping in deploy/nats/accounts.conf), K is what
// jetway-provision is given in docker-compose.yml and
// k8s/provision-job.yaml (TestCompose_file_is_complete_and_consistent and
// the Kubernetes test hold them to it), and the shards accounts.conf's
// permissions name.
const (
	deployPartitions = bus.DefaultPartitions
	deployShards     = 3
)

// natsServerBinary is nats-server at the version go.mod pins, so the tests
// run the same server `make cluster` does; built once and kept while
// go.mod and go.sum stay as they are (testutil.Binary).
func natsServerBinary(t testing.TB) string {
	t.Helper()
	return testutil.Binary(t, "github.com/nats-io/nats-server/v2", "")
}

// node is one nats-server process of a rendered deployment.
type node struct {
	name                   string
	client, route, monitor int
	dir                    string

	mu  sync.Mutex
	cmd *exec.Cmd
}

func (n *node) url() string { return fmt.Sprintf("tls://127.0.0.1:%d", n.client) }

// deployment is deploy/nats rendered into a temporary directory: config
// files with free ports, fresh secrets, and three nodes that may or may not
// be running.
type deployment struct {
	t         testing.TB
	dir       string
	nodes     []*node
	passwords map[string]string
	// seeds are the tenants' nkey seed files, by tenant.
	seeds map[string]string
	// perUserTenants says the running configuration is the old layout
	// (renderOptions.accounts), where tenant-<t> is a password user of
	// JETWAY.
	perUserTenants bool
}

// tenants get credentials in every rendered deployment.
var tenants = []string{"acme", "globex"}

type renderOptions struct {
	// mTLS swaps client-tls.conf for client-mtls.conf, as the docs describe.
	mTLS bool
	// accounts replaces accounts.conf with another file (the old per-user
	// layout, for the upgrade test); users of both get passwords.
	accounts string
}

// render copies the deploy configuration into a temporary directory, moving
// every loopback port to a free one, and generates its secrets.
func render(t testing.TB, opts renderOptions) *deployment {
	t.Helper()
	d := &deployment{t: t, dir: t.TempDir()}
	var pairs []string
	ports9 := freePorts(t, 9)
	for i := range 3 {
		n := &node{name: fmt.Sprintf("node-%d", i+1), dir: d.dir}
		n.client, n.route, n.monitor = ports9[3*i], ports9[3*i+1], ports9[3*i+2]
		pairs = append(pairs,
			fmt.Sprintf("127.0.0.1:%d", 4222+i), fmt.Sprintf("127.0.0.1:%d", n.client),
			fmt.Sprintf("127.0.0.1:%d", 6222+i), fmt.Sprintf("127.0.0.1:%d", n.route),
			fmt.Sprintf("127.0.0.1:%d", 8222+i), fmt.Sprintf("127.0.0.1:%d", n.monitor),
		)
		d.nodes = append(d.nodes, n)
	}
	ports := strings.NewReplacer(pairs...)
	files, err := filepath.Glob(filepath.Join(confDir, "*.conf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no config files in %s (%v)", confDir, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := ports.Replace(string(data))
		if opts.mTLS && filepath.Base(f) == "common.conf" {
			const plain = `include "client-tls.conf"`
			if !strings.Contains(text, plain) {
				t.Fatalf("common.conf has no %s line to swap for mTLS", plain)
			}
			text = strings.Replace(text, plain, `include "client-mtls.conf"`, 1)
		}
		if err := os.WriteFile(filepath.Join(d.dir, filepath.Base(f)), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	users := usersOf(t, filepath.Join(confDir, "accounts.conf"))
	if opts.accounts != "" {
		// An older deployment's passwords are its own users': nats-server
		// refuses a passwords.conf with a variable its accounts.conf does
		// not use (a user added since, as the spreader was).
		users = usersOf(t, opts.accounts)
		old, err := os.ReadFile(opts.accounts)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d.dir, "accounts.conf"), old, 0o600); err != nil {
			t.Fatal(err)
		}
		d.perUserTenants = true
	}
	res, err := certs.Generate(certs.Config{
		Dir:     filepath.Join(d.dir, "secrets"),
		Users:   users,
		Tenants: tenants,
		// The server checks the hash on every connect; the cost does not
		// change what is tested.
		BcryptCost: bcrypt.MinCost,
	})
	if err != nil {
		t.Fatal(err)
	}
	d.passwords, d.seeds = res.Passwords, res.TenantSeeds
	return d
}

// usersOf is the password users an accounts file declares.
func usersOf(t testing.TB, path string) []string {
	t.Helper()
	conf, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	users, err := certs.UsersInConfig(conf)
	if err != nil {
		t.Fatal(err)
	}
	return users
}

// freePorts picks n distinct free loopback ports. Every listener stays open
// until all are picked: closed one by one, the kernel may hand the same
// port out twice, and a node then fails to bind its second listener.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func (d *deployment) secret(name string) string { return filepath.Join(d.dir, "secrets", name) }

// start runs the node's nats-server with the rendered config, its working
// directory the config directory (config paths are relative to it), and
// stops it when the test ends.
func (d *deployment) start(n *node) {
	t := d.t
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(d.dir, n.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(natsServerBinary(t), "-c", n.name+".conf")
	cmd.Dir = d.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", n.name, err)
	}
	n.mu.Lock()
	n.cmd = cmd
	n.mu.Unlock()
	t.Cleanup(func() {
		d.kill(n)
		logf.Close()
		if t.Failed() {
			if log, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("%s log (last 3000 bytes):\n%s", n.name, tail(log, 3000))
			}
		}
	})
}

// kill ends the node's process at once (SIGKILL: a crash, not a shutdown)
// and reaps it. Killing a node that is not running does nothing.
func (d *deployment) kill(n *node) {
	cmd := n.take()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

// take returns the node's process, if it runs, and forgets it: whoever
// takes it ends it.
func (n *node) take() *exec.Cmd {
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd := n.cmd
	n.cmd = nil
	return cmd
}

// stop shuts the node down as an operator would (SIGTERM: it leaves the
// cluster in order), waits up to 30 s for it to exit, then kills it.
func (d *deployment) stop(n *node) {
	cmd := n.take()
	if cmd == nil {
		return
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		d.t.Logf("%s did not exit within 30s of SIGTERM; killing it", n.name)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// reload makes the node read its configuration again (SIGHUP, as
// scripts/cluster.sh reload and nats-server --signal reload send it) and
// waits for its log to say it did, failing the test if it says it refused.
func (d *deployment) reload(n *node) {
	t := d.t
	t.Helper()
	log := filepath.Join(d.dir, n.name+".log")
	count := func(s string) int {
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), s)
	}
	const ok, failed = "Reloaded server configuration", "Failed to reload server configuration"
	before, failedBefore := count(ok), count(failed)
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil {
		t.Fatalf("reload %s: not running", n.name)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatalf("reload %s: %v", n.name, err)
	}
	d.waitNode(n, "reload", func() (bool, string) {
		if count(failed) > failedBefore {
			t.Fatalf("%s refused its configuration; see its log", n.name)
		}
		return count(ok) > before, "no reload in its log yet"
	})
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// startCluster starts all three nodes and waits until each reports
// JetStream healthy (a meta leader is known and it is current).
func (d *deployment) startCluster() {
	d.t.Helper()
	for _, n := range d.nodes {
		d.start(n)
	}
	for _, n := range d.nodes {
		d.waitHTTP(n, "/healthz")
	}
}

// waitHTTP waits until the node's monitoring endpoint path answers 200.
func (d *deployment) waitHTTP(n *node, path string) {
	d.t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d%s", n.monitor, path)
	client := &http.Client{Timeout: 2 * time.Second}
	d.waitNode(n, path, func() (bool, string) {
		resp, err := client.Get(url)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// waitListening waits until the node accepts connections on its client
// port. The monitoring endpoint answers first: a node bootstrapping
// JetStream on a loaded machine opened its client port a moment later,
// and a test that connected at /varz found no server (seen in CI).
func (d *deployment) waitListening(n *node) {
	d.t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", n.client)
	d.waitNode(n, "client port", func() (bool, string) {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	})
}

// waitNode polls ready until it says yes, failing the test after
// readyTimeout with the last thing it said.
func (d *deployment) waitNode(n *node, what string, ready func() (bool, string)) {
	d.t.Helper()
	testutil.EventuallyNil(d.t, readyTimeout, n.name+": "+what+" to be ready", func() error {
		if ok, last := ready(); !ok {
			return errors.New(last)
		}
		return nil
	})
}

func (d *deployment) urls() string {
	var u []string
	for _, n := range d.nodes {
		u = append(u, n.url())
	}
	return strings.Join(u, ",")
}

// client is a connection as one deployment user, with the asynchronous
// errors the server sent it (permission violations arrive that way).
type client struct {
	*nats.Conn
	js   jetstream.JetStream
	errs chan error
}

// serviceUsers are the users jetway's services run as; each has its own
// inbox prefix.
var serviceUsers = []string{"dispatcher", "runner", "jobs", "notifier", "spreader"}

// inboxFor is the inbox prefix a connection as user takes: the service's
// own for a service user, nats.go's default for the others.
func inboxFor(user string) string {
	if slices.Contains(serviceUsers, user) {
		return bus.ServiceInbox(user)
	}
	return strings.TrimSuffix(nats.InboxPrefix, ".") // "_INBOX"
}

// connect dials the deployment as user over TLS, trusting the local CA.
func (d *deployment) connect(user string, opts ...nats.Option) *client {
	t := d.t
	t.Helper()
	c, err := d.dial(user, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(c.Close)
	return c
}

// dial connects as user: a service user (or admin, sys) with its password;
// tenant-<t> with tenant t's nkey seed, as a user of t's own account (with
// the old layout running, as the password user tenant-<t> of JETWAY).
func (d *deployment) dial(user string, opts ...nats.Option) (*client, error) {
	auth, err := d.auth(user)
	if err != nil {
		return nil, err
	}
	c := &client{errs: make(chan error, 64)}
	base := []nats.Option{
		nats.Name("deploytest-" + user),
		// As jetway's services connect: each service user may read only its
		// own inbox. Options given by the caller come later and win.
		nats.CustomInboxPrefix(inboxFor(user)),
		auth,
		nats.RootCAs(d.secret(certs.CAFile)),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		nats.Timeout(5 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}),
	}
	nc, err := nats.Connect(d.urls(), append(base, opts...)...)
	if err != nil {
		return nil, err
	}
	c.Conn = nc
	if c.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// auth is how user authenticates (see dial).
func (d *deployment) auth(user string) (nats.Option, error) {
	if tenant, ok := strings.CutPrefix(user, "tenant-"); ok && !d.perUserTenants {
		seed, ok := d.seeds[tenant]
		if !ok {
			return nil, fmt.Errorf("no credential for tenant %q", tenant)
		}
		return nats.NkeyOptionFromSeed(seed)
	}
	pw, ok := d.passwords[user]
	if !ok {
		return nil, fmt.Errorf("no user %q in accounts.conf", user)
	}
	return nats.UserInfo(user, pw), nil
}

// provision creates jetway's streams, buckets and work consumers as the
// admin user, replicated on all three nodes, in the deployment's layout
// (deployPartitions over deployShards), as `make cluster` does. Like
// deploy/provision it retries an attempt that got no answer: right after a
// cluster forms, a stream create is now and then lost while the meta leader
// settles (seen about once in ten runs here).
func (d *deployment) provision() {
	t := d.t
	t.Helper()
	admin := d.connect("admin")
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err := bus.Provision(ctx, admin.js, bus.ProvisionConfig{Replicas: 3, Partitions: deployPartitions, Shards: deployShards})
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("provision as admin: %v", err)
		}
		t.Logf("provision as admin: %v (retrying)", err)
	}
}

// waitViolation waits until the server has told c that subject was refused.
func (c *client) waitViolation(t testing.TB, subject string) {
	t.Helper()
	c.awaitViolation(t, fmt.Sprintf("no permissions violation for %q within 10s", subject), func(err error) bool {
		return strings.Contains(err.Error(), `"`+subject+`"`)
	})
}

// awaitViolation waits up to 10 s for a permissions violation that match
// accepts, and fails the test with failure if none comes.
func (c *client) awaitViolation(t testing.TB, failure string, match func(error) bool) {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && match(err) {
				return
			}
			t.Logf("other async error while waiting: %v", err)
		case <-timer.C:
			t.Fatal(failure)
		}
	}
}

// noViolation fails if the server refused anything c did so far.
func (c *client) noViolation(t testing.TB) {
	t.Helper()
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case err := <-c.errs:
			t.Errorf("unexpected async error: %v", err)
		default:
			return
		}
	}
}

// refusePublish publishes on subject and expects the server to refuse it.
// The server names the subject it checked: for one the partition mapping
// rewrites, the mapped one, given as reported.
func (c *client) refusePublish(t testing.TB, subject string, reported ...string) {
	t.Helper()
	if err := c.Publish(subject, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(reported) > 0 {
		subject = reported[0]
	}
	c.waitViolation(t, subject)
}

// refuseSubscribe subscribes to subject and expects the server to refuse it.
func (c *client) refuseSubscribe(t testing.TB, subject string) {
	t.Helper()
	sub, err := c.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	c.waitViolation(t, subject)
}

// refuseAPI runs a JetStream call that should be refused: the server drops
// the API request (so the call can only time out) and reports the violation
// of apiSubject, which ends the wait early.
func (c *client) refuseAPI(t testing.TB, apiSubject string, call func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	c.waitViolation(t, apiSubject)
	cancel()
	if err := <-done; err == nil {
		t.Errorf("%s: the call succeeded, want it refused", apiSubject)
	}
}
