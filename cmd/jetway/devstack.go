package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/devlock"
	"jetway/pkg/telemetry"
)

// devComponent is a service that `jetway dev` runs in this process on the
// shared NATS connection. Services add themselves with addDevComponent from
// an init function in their own file (dev_<service>.go), so the dev stack
// grows without edits here.
type devComponent struct {
	Name string
	// Run blocks until ctx is done (return nil: a clean stop) or the
	// component fails (return the error: the whole stack stops).
	Run func(ctx context.Context, env *devEnv) error
}

var devComponents []devComponent

// addDevComponent registers a component for every `jetway dev`.
func addDevComponent(c devComponent) {
	devComponents = append(devComponents, c)
}

// devEnv is what the dev stack shares with its components.
type devEnv struct {
	NC         *nats.Conn
	JS         jetstream.JetStream
	Log        zerolog.Logger // give each component its own With().Str("component", …)
	Metrics    *prometheus.Registry
	Mux        *http.ServeMux // the --http server; a component may mount its routes here
	DataDir    string         // the --data dir; a component keeps its files in a subdir
	NATSURL    string
	HTTPURL    string // the --http server's root, e.g. http://127.0.0.1:8080
	Partitions int
	// WebhookAllowHosts are the notifier's --webhook-allow-host.
	WebhookAllowHosts []string
	// Say prints a line for the person running jetway dev (not a log
	// record): what they need to act on, such as the console's sign-in link.
	Say func(format string, args ...any)

	ready *readiness
}

// AddReadyCheck makes /readyz depend on check as well. Call it first thing
// in Run, before any slow start-up, so /readyz never passes too early.
func (e *devEnv) AddReadyCheck(name string, check func(context.Context) error) {
	e.ready.add(name, check)
}

// devConfig configures runDev.
type devConfig struct {
	DataDir    string
	NATSAddr   string // host:port for clients; port 0 picks a free one
	HTTPAddr   string // host:port for /healthz, /readyz, /metrics; port 0 picks a free one
	Partitions int
	Shards     int // work shards (0: keep the stored count, or 1)
	// WebhookAllowHosts lets webhooks reach these hosts although they
	// resolve to loopback or private addresses (a receiver on this machine).
	WebhookAllowHosts []string
	Out               io.Writer // progress lines for the person running it
	Log               zerolog.Logger
	Components        []devComponent
	// Checks validate the built-in components' own flags before anything
	// starts.
	Checks []func() error
	// Notes, if set, gives lines printed with the ready line — which model
	// answers, which tools runs get, how to attach — so the person running
	// it sees at once what they are talking to.
	Notes func(env *devEnv) []string
}

// componentStopTimeout bounds how long runDev waits for components to
// return after it cancels them.
const componentStopTimeout = 15 * time.Second

// runDev runs the all-in-one stack until ctx is done, then stops it in
// reverse order: components, HTTP, the connection, the server (flushing).
func runDev(ctx context.Context, cfg devConfig) error {
	// Components say things from their own goroutines (devEnv.Say): one
	// line at a time, never two interleaved.
	var sayMu sync.Mutex
	say := func(format string, args ...any) {
		sayMu.Lock()
		defer sayMu.Unlock()
		outf(cfg.Out, format+"\n", args...)
	}

	host, port, err := validateDevConfig(cfg)
	if err != nil {
		return err
	}
	if warn := devHTTPAddrNote(cfg.HTTPAddr); warn != "" {
		say("%s", warn)
	}
	storeDir := filepath.Join(cfg.DataDir, "nats")
	if err := os.MkdirAll(storeDir, 0o755); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	lock, err := devlock.Acquire(cfg.DataDir)
	if err != nil {
		return devLockRefusal(err)
	}
	defer lock.Release()
	// Listen before starting NATS: a taken port fails here, with nothing
	// provisioned, and the URL is known for the lock file at once.
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	// Closed again by the HTTP server's shutdown: this one only covers an
	// early return, and an error closing a closed listener says nothing.
	defer func() { _ = ln.Close() }()
	httpURL := "http://" + ln.Addr().String()
	lockInfo := devlock.Info{PID: os.Getpid(), URL: httpURL}
	if err := lock.Publish(lockInfo); err != nil {
		return err
	}

	devb, err := prepareDevBus(cfg.DataDir, cfg.Partitions)
	if err != nil {
		return err
	}
	if moved, err := bus.MoveGlobalAccountStore(storeDir); err != nil {
		return err
	} else if moved {
		say("moved the streams of a bus without accounts into account %s", bus.AccountJetway)
	}

	say("jetway dev (version %s), data in %s", version, cfg.DataDir)
	busCfg := bus.EmbeddedConfig{
		ConfigFile: devb.accountsConf,
		StoreDir:   storeDir,
		Host:       host,
		Port:       port,
		ServerName: "jetway-dev",
		Logger:     natsLogger{cfg.Log.With().Str("component", "nats-server").Logger()},
	}
	srv, err := bus.StartEmbedded(busCfg)
	if err != nil {
		return err
	}
	defer func() {
		bus.StopEmbedded(srv)
		say("nats-server stopped")
	}()
	url := srv.ClientURL()
	lockInfo.NATS = url
	if err := lock.Publish(lockInfo); err != nil {
		return err
	}
	stopReload := reloadDevBusOnHangup(devb, srv, busCfg, say)
	defer stopReload()
	say("nats-server started, JetStream store in %s", storeDir)
	say("NATS URL: %s", url)
	say("NATS services' user: %s, password in %s", devServiceUser, devb.passwordPath)
	say("NATS tenant credentials: %s/<tenant>.nk (nats --server %s --nkey %s pub jetway.events.<session> …)",
		devb.creds.Dir, url, devb.creds.Path(auth.DefaultTenant, ""))

	connLog := cfg.Log.With().Str("component", "nats").Logger()
	nc, err := bus.Connect(ctx, bus.ConnConfig{
		URLs:     []string{url},
		User:     devServiceUser,
		Password: devb.password,
		Name:     "jetway-dev",
		Logger: func(ev bus.ConnEvent) {
			level := zerolog.WarnLevel
			if ev.Err == nil { // our own Close, or a reconnect
				level = zerolog.DebugLevel
			}
			connLog.WithLevel(level).Err(ev.Err).Str("url", ev.URL).Msg(string(ev.Kind))
		},
	})
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		return err
	}
	pcfg := bus.ProvisionConfig{
		Partitions: devb.partitions,
		Shards:     cfg.Shards,
		Progress:   func(line string) { say("provision: %s", line) },
	}
	if err := bus.Provision(ctx, js, pcfg); err != nil {
		return err
	}
	partitions, err := bus.Partitions(ctx, js)
	if err != nil {
		return err
	}

	reg := telemetry.NewRegistry()
	if err := reg.Register(newStateCollector(js)); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	ready := &readiness{}
	ready.add("nats", func(context.Context) error {
		if !nc.IsConnected() {
			return errors.New("not connected")
		}
		return nil
	})
	mux := http.NewServeMux()
	if hasComponent(cfg.Components, "dispatcher") {
		// Ready once the API is mounted: clients need it, and the tokens
		// file the dispatcher writes before it mounts.
		ready.add("api", func(context.Context) error {
			if _, pattern := mux.Handler(&http.Request{Method: http.MethodGet, URL: &neturl.URL{Path: "/v1/"}}); pattern == "" {
				return errors.New("not mounted yet")
			}
			return nil
		})
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		outln(w, "ok")
	})
	mux.Handle("GET /readyz", ready)
	mux.Handle("GET /metrics", telemetry.MetricsHandler(reg))
	// Requests' contexts end when the server shuts down, so long-lived
	// ones (a session's SSE stream) end then too, cleanly for their
	// clients, instead of holding Shutdown until its deadline.
	reqCtx, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	httpSrv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
	}
	httpSrv.RegisterOnShutdown(endRequests)
	httpDone := make(chan error, 1)
	go func() { httpDone <- httpSrv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := httpSrv.Shutdown(sctx); err != nil {
			cfg.Log.Warn().Err(err).Msg("http shutdown")
		}
		say("http stopped")
	}()
	say("http: %s (/healthz /readyz /metrics)", httpURL)

	env := &devEnv{
		NC: nc, JS: js, Log: cfg.Log, Metrics: reg, Mux: mux,
		DataDir: cfg.DataDir, NATSURL: url, HTTPURL: httpURL,
		Partitions: partitions, ready: ready, WebhookAllowHosts: cfg.WebhookAllowHosts, Say: say,
	}
	compCtx, stopComponents := context.WithCancel(ctx)
	defer stopComponents()
	failed := make(chan error, len(cfg.Components))
	var wg sync.WaitGroup
	defer func() {
		stopComponents()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(componentStopTimeout):
			// Stop the rest anyway: a hung component must not keep the
			// server (and its store) from shutting down.
			cfg.Log.Error().Dur("waited", componentStopTimeout).Msg("components did not stop; shutting down without them")
		}
	}()
	var names []string
	for _, c := range cfg.Components {
		names = append(names, c.Name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(compCtx, env); err != nil && compCtx.Err() == nil {
				failed <- fmt.Errorf("%s: %w", c.Name, err)
			}
		}()
	}
	if len(names) == 0 {
		say("services: none registered in this build (running NATS + health/metrics only)")
	} else {
		say("services: %s", strings.Join(names, ", "))
	}
	if cfg.Notes != nil {
		for _, line := range cfg.Notes(env) {
			say("%s", line)
		}
	}
	ready.markStarted()
	// Wait for readiness aside, so a component failing meanwhile still
	// stops the stack at once.
	go func() {
		err := ready.wait(compCtx, 30*time.Second)
		switch {
		case compCtx.Err() != nil:
		case err != nil:
			say("not ready yet (%v); see /readyz", err)
		default:
			say("ready; Ctrl-C to stop")
		}
	}()

	select {
	case <-ctx.Done():
		say("stopping")
		return nil
	case err := <-failed:
		say("stopping: %v", err)
		return err
	case err := <-httpDone:
		return fmt.Errorf("http server: %w", err)
	}
}

func hasComponent(cs []devComponent, name string) bool {
	for _, c := range cs {
		if c.Name == name {
			return true
		}
	}
	return false
}

// validateDevConfig checks every setting before anything starts, so a
// typo costs no NATS start-up or provisioning; it returns --nats split.
func validateDevConfig(cfg devConfig) (host string, port int, err error) {
	host, port, err = splitHostPort(cfg.NATSAddr)
	if err != nil {
		return "", 0, fmt.Errorf("--nats: %w", err)
	}
	if err := devNATSAddrAllowed(host); err != nil {
		return "", 0, err
	}
	if _, _, err := splitHostPort(cfg.HTTPAddr); err != nil {
		return "", 0, fmt.Errorf("--http: %w", err)
	}
	if cfg.Partitions < 0 {
		return "", 0, fmt.Errorf("--partitions %d: must be 0 (keep the stored count) or more", cfg.Partitions)
	}
	if cfg.Shards < 0 {
		return "", 0, fmt.Errorf("--shards %d: must be 0 (keep the stored count) or more", cfg.Shards)
	}
	if cfg.DataDir == "" {
		return "", 0, errors.New("--data: must name a directory")
	}
	for _, check := range cfg.Checks {
		if err := check(); err != nil {
			return "", 0, err
		}
	}
	return host, port, nil
}

// devLockRefusal turns another dev's hold on the data directory into what
// the person needs: who holds it, where it serves, and how to attach.
func devLockRefusal(err error) error {
	var held *devlock.HeldError
	if !errors.As(err, &held) {
		return err
	}
	if held.Info.URL == "" {
		return fmt.Errorf("%w; it is still starting: wait for it, or stop it first", held)
	}
	tokens := filepath.Join(held.Dir, auth.DevTokensFile)
	return fmt.Errorf("%w; attach to it with `%s`, or stop it first", held, chatCommand(held.Info.URL, tokens))
}

// devNATSAddrAllowed refuses to serve the dev bus beyond this machine. The
// embedded nats-server has no users and no permissions: whoever reaches it
// is every service at once — may publish job events, read every tenant's
// run output, purge streams and flip Ground Stop in the control bucket. On
// loopback that is the person at the keyboard; on a network address it is
// anyone on the network. A bus for other machines is the production setup
// (deploy/nats: a user per service and tenant), not a dev flag.
func devNATSAddrAllowed(host string) error {
	if isLoopbackHost(host) {
		return nil
	}
	shown := host
	if shown == "" {
		shown = "every interface"
	}
	return fmt.Errorf("--nats %s: jetway dev serves NATS without auth (one open bus: any client may act as every "+
		"service and read or forge every tenant's events), so it listens on loopback only — use 127.0.0.1:PORT; "+
		"to share a bus between machines run nats-server with deploy/nats (docs/OPERATIONS.md)", shown)
}

// devHTTPAddrNote is the warning printed when the dev HTTP server listens
// beyond loopback. It is allowed — every API route needs a bearer token — but
// the tokens then cross the network in clear, and /metrics is open.
func devHTTPAddrNote(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || isLoopbackHost(host) {
		return ""
	}
	return "warning: --http " + addr + " is reachable beyond this machine: API calls still need a bearer token, " +
		"but plain HTTP carries it in clear and /metrics answers anyone; put TLS in front or keep it on 127.0.0.1"
}

// isLoopbackHost reports whether host (an IP literal or name) means only
// this machine: a loopback IP, or a name all of whose addresses are loopback.
// "" and 0.0.0.0 / :: mean every interface.
func isLoopbackHost(host string) bool {
	if host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q in %q", p, addr)
	}
	return host, port, nil
}

// readiness answers /readyz: 200 once the stack has started and every
// check passes, 503 naming what is not ready otherwise.
type readiness struct {
	started atomic.Bool
	mu      sync.Mutex
	names   []string
	checks  []func(context.Context) error
}

func (r *readiness) add(name string, check func(context.Context) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names = append(r.names, name)
	r.checks = append(r.checks, check)
}

func (r *readiness) markStarted() { r.started.Store(true) }

// check returns the first failing check, naming it.
func (r *readiness) check(ctx context.Context) error {
	if !r.started.Load() {
		return errors.New("starting")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r.mu.Lock()
	names, checks := r.names, r.checks
	r.mu.Unlock()
	for i, check := range checks {
		if err := check(ctx); err != nil {
			return fmt.Errorf("%s: %w", names[i], err)
		}
	}
	return nil
}

// wait polls check until it passes, ctx ends or d has passed, so the
// "ready" line means what it says.
func (r *readiness) wait(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := r.check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}

func (r *readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if err := r.check(req.Context()); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	outln(w, "ready")
}

// natsLogger sends the embedded server's log to zerolog. Its notices are
// debug level: at start it prints a banner a dev user does not need.
type natsLogger struct{ l zerolog.Logger }

func (n natsLogger) Noticef(format string, v ...any) { n.l.Debug().Msgf(format, v...) }
func (n natsLogger) Warnf(format string, v ...any)   { n.l.Warn().Msgf(format, v...) }
func (n natsLogger) Fatalf(format string, v ...any)  { n.l.Error().Msgf(format, v...) }
func (n natsLogger) Errorf(format string, v ...any)  { n.l.Error().Msgf(format, v...) }
func (n natsLogger) Debugf(format string, v ...any)  { n.l.Trace().Msgf(format, v...) }
func (n natsLogger) Tracef(format string, v ...any)  { n.l.Trace().Msgf(format, v...) }
