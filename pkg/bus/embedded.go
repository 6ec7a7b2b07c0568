package bus

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedConfig describes an in-process nats-server with JetStream on disk.
type EmbeddedConfig struct {
	// StoreDir holds JetStream's file store. Required: jetway's streams are
	// its state, and a temp dir nobody chose would lose it.
	StoreDir string
	// Host and Port for clients. Port 0 picks a free port (like net.Listen);
	// read the result with ClientURL. Host defaults to 127.0.0.1.
	Host string
	Port int
	// ServerName must be unique and stable within a cluster; it is how
	// JetStream recognises a node after a restart.
	ServerName string

	// ClusterName, ClusterHost, ClusterPort and Routes join a cluster; leave
	// ClusterName empty for a single server.
	ClusterName string
	ClusterHost string
	ClusterPort int
	Routes      []string // nats://host:port of every node's cluster listener
	// ClusterAdvertise, if set, is the host:port this node tells the
	// others to dial for a route they learn of by gossip (default: its
	// cluster listener). A test that routes every link through a proxy
	// sets it to an address that refuses, so no route goes around one.
	ClusterAdvertise string

	// Token, if set, is the one credential every client must present. A
	// bus without it lets any local process act as every service, a job's
	// shell included. Not with ConfigFile.
	Token string

	// ConfigFile, if set, is a nats-server configuration whose accounts and
	// users the server takes (the account layout: DevAccountsConf); the
	// fields above still decide where it listens and stores. ReloadEmbedded
	// reads it again.
	ConfigFile string

	// Partitions is P for the partition mapping of a server without a
	// ConfigFile (its global account; 0: DefaultPartitions). A ConfigFile
	// carries its own (MappingsConf).
	Partitions int

	// ReadyTimeout bounds the wait for the server to accept clients
	// (default 10s).
	ReadyTimeout time.Duration
	// Logger receives the server's own log lines; nil keeps it quiet.
	Logger server.Logger
	// Debug and Trace turn on the server's verbose logging (needs Logger).
	Debug, Trace bool
}

// StartEmbedded starts a nats-server with JetStream in this process and
// returns once it accepts clients. Stop it with StopEmbedded.
func StartEmbedded(cfg EmbeddedConfig) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("bus: embedded server: StoreDir is required")
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	opts, err := embeddedOptions(cfg, host, freePortFlag(cfg.Port))
	if err != nil {
		return nil, err
	}
	if cfg.ClusterName != "" {
		clusterHost := cfg.ClusterHost
		if clusterHost == "" {
			clusterHost = host
		}
		opts.Cluster = server.ClusterOpts{
			Name:      cfg.ClusterName,
			Host:      clusterHost,
			Port:      freePortFlag(cfg.ClusterPort),
			Advertise: cfg.ClusterAdvertise,
		}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("bus: embedded server: route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("bus: embedded server: %w", err)
	}
	fatal := &fatalLogger{inner: cfg.Logger, err: make(chan error, 1)}
	s.SetLogger(fatal, cfg.Debug, cfg.Trace)
	s.Start()
	timeout := cfg.ReadyTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	deadline := time.Now().Add(timeout)
	for !s.ReadyForConnections(50 * time.Millisecond) {
		select {
		case err := <-fatal.err:
			// e.g. the port is taken: say so now rather than after the timeout.
			StopEmbedded(s)
			return nil, fmt.Errorf("bus: embedded server %s: %w", cfg.ServerName, err)
		default:
		}
		if time.Now().After(deadline) {
			StopEmbedded(s)
			return nil, fmt.Errorf("bus: embedded server %s not ready for connections after %s", cfg.ServerName, timeout)
		}
	}
	return s, nil
}

// embeddedOptions are the server options cfg describes: those of its
// ConfigFile if it has one, with where to listen and store set over them.
func embeddedOptions(cfg EmbeddedConfig, host string, port int) (*server.Options, error) {
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		if cfg.Token != "" {
			return nil, errors.New("bus: embedded server: Token and ConfigFile do not go together (the accounts file has the users)")
		}
		var err error
		if opts, err = server.ProcessConfigFile(cfg.ConfigFile); err != nil {
			return nil, fmt.Errorf("bus: embedded server: %w", err)
		}
	}
	opts.ServerName = cfg.ServerName
	opts.Host = host
	opts.Port = port
	opts.JetStream = true
	opts.StoreDir = cfg.StoreDir
	opts.NoSigs = true
	opts.Debug = cfg.Debug
	opts.Trace = cfg.Trace
	// Authorization is nats-server's single-token auth.
	opts.Authorization = cfg.Token
	if cfg.ConfigFile == "" {
		global := server.NewAccount(server.DEFAULT_GLOBAL_ACCOUNT)
		p := cfg.Partitions
		if p <= 0 {
			p = DefaultPartitions
		}
		for _, m := range PartitionMappings(p) {
			if err := global.AddMapping(m.From, m.To); err != nil {
				return nil, fmt.Errorf("bus: embedded server: mapping %s: %w", m.From, err)
			}
		}
		opts.Accounts = append(opts.Accounts, global)
	}
	return opts, nil
}

// ReloadEmbedded makes s take its ConfigFile again: tenant accounts added
// or users revoked since it started hold at once, with no restart, and the
// connections of revoked users are closed.
func ReloadEmbedded(s *server.Server, cfg EmbeddedConfig) error {
	if cfg.ConfigFile == "" {
		return errors.New("bus: reload: the embedded server has no configuration file")
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := cfg.Port
	if addr, ok := s.Addr().(*net.TCPAddr); ok {
		port = addr.Port
	}
	if cfg.ClusterName != "" {
		return errors.New("bus: reload: not for a clustered embedded server")
	}
	// Twice: nats-server (2.15) creates an account that a reload adds but
	// wires its imports only at the next reload, so a new tenant's events
	// and API requests would find no responder until then. So the first
	// reload creates new accounts without their users, and only the
	// second, which wires the imports, lets anyone sign in to them: no
	// client ever sees a new account half made.
	for pass := range 2 {
		o, err := embeddedOptions(cfg, host, port)
		if err != nil {
			return err
		}
		if pass == 0 {
			o.Nkeys = slices.DeleteFunc(o.Nkeys, func(u *server.NkeyUser) bool { return u.Account != nil && !accountExists(s, u.Account.Name) })
			o.Users = slices.DeleteFunc(o.Users, func(u *server.User) bool { return u.Account != nil && !accountExists(s, u.Account.Name) })
		}
		if err := s.ReloadOptions(o); err != nil {
			return fmt.Errorf("bus: reload %s: %w", cfg.ConfigFile, err)
		}
		reloadPassed(pass)
	}
	return nil
}

// reloadPassed is called after each pass of ReloadEmbedded; a test looks
// at the server between the two.
var reloadPassed = func(pass int) {}

// accountExists says whether s already has the account name.
func accountExists(s *server.Server, name string) bool {
	_, err := s.LookupAccount(name)
	return err == nil
}

// fatalLogger passes the server's log on and catches its fatal errors: an
// embedded server does not exit the process on them, it just never becomes
// ready.
type fatalLogger struct {
	inner server.Logger
	err   chan error
}

func (l *fatalLogger) Noticef(format string, v ...any) {
	if l.inner != nil {
		l.inner.Noticef(format, v...)
	}
}

func (l *fatalLogger) Warnf(format string, v ...any) {
	if l.inner != nil {
		l.inner.Warnf(format, v...)
	}
}

func (l *fatalLogger) Fatalf(format string, v ...any) {
	if l.inner != nil {
		l.inner.Fatalf(format, v...)
	}
	select {
	case l.err <- fmt.Errorf(format, v...):
	default:
	}
}

func (l *fatalLogger) Errorf(format string, v ...any) {
	if l.inner != nil {
		l.inner.Errorf(format, v...)
	}
}

func (l *fatalLogger) Debugf(format string, v ...any) {
	if l.inner != nil {
		l.inner.Debugf(format, v...)
	}
}

func (l *fatalLogger) Tracef(format string, v ...any) {
	if l.inner != nil {
		l.inner.Tracef(format, v...)
	}
}

// StopEmbedded shuts s down and waits until it has: JetStream flushes its
// stores on the way, so the data dir is consistent for the next start.
func StopEmbedded(s *server.Server) {
	if s == nil {
		return
	}
	s.Shutdown()
	s.WaitForShutdown()
}

// freePortFlag maps Go's "0 means any free port" to nats-server's -1.
func freePortFlag(port int) int {
	if port == 0 {
		return server.RANDOM_PORT
	}
	return port
}
