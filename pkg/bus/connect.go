package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ConnConfig says how to reach NATS and how to authenticate.
//
// At most one of CredsFile, NKeySeedFile, User/Password and Token should be
// set; TLS settings combine with any of them.
type ConnConfig struct {
	// URLs is the list of servers to try (nats://host:port). Empty means
	// nats.DefaultURL.
	URLs []string
	// Name identifies the connection in server monitoring (connz), e.g.
	// "jetway-runner@host".
	Name string

	CredsFile    string // JWT + seed .creds file
	NKeySeedFile string // file holding an nkey user seed
	User         string
	Password     string
	Token        string

	// TLSCAFile verifies the server against this CA instead of the system
	// roots.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile present a client certificate (mTLS).
	TLSCertFile string
	TLSKeyFile  string

	// InboxPrefix replaces nats.go's shared "_INBOX" for this connection's
	// reply subjects (request replies, JetStream API answers, PubAcks,
	// consumer deliveries, KV watches). Each service gets its own
	// (ServiceInbox) and its NATS user may subscribe to that one only, so no
	// service can listen to the replies another one gets. Empty keeps
	// "_INBOX".
	InboxPrefix string

	// ReconnectWait is the pause between reconnect attempts (default 1s).
	ReconnectWait time.Duration

	// DeadLinkAfter is how long a link may go without the server answering
	// before the client drops it and reconnects, to another server of the
	// list if one answers (default DefaultDeadLinkAfter). A link that died
	// without a reset (a node lost with its power, a cut network) still
	// looks connected; with nats.go's defaults (a ping every two minutes,
	// two unanswered) a service sat on it for four to six minutes.
	DeadLinkAfter time.Duration

	// Logger, if set, is told about disconnects, reconnects, async errors
	// and the final close, so a service can log them its own way.
	Logger func(ConnEvent)
}

// DefaultDeadLinkAfter is ConnConfig.DeadLinkAfter's default: well past
// any pause a loaded server makes in answering a ping, well short of the
// minutes a person would wait.
const DefaultDeadLinkAfter = 15 * time.Second

// ConnEventKind names what happened to a connection.
type ConnEventKind string

// Connection events reported to ConnConfig.Logger.
const (
	ConnDisconnected ConnEventKind = "disconnected"
	ConnReconnected  ConnEventKind = "reconnected"
	ConnClosed       ConnEventKind = "closed"
	ConnError        ConnEventKind = "error"
)

// ConnEvent is one change in a connection's state.
type ConnEvent struct {
	Kind ConnEventKind
	// URL is the server connected to (reconnected) or last connected to.
	URL string
	Err error
}

// ServiceInbox is the inbox prefix of a jetway service ("dispatcher",
// "runner", "jobs", "notifier"): "_INBOX_<service>", the only inbox its user
// in deploy/nats/accounts.conf may subscribe to.
func ServiceInbox(service string) string { return "_INBOX_" + service }

// Connect dials NATS with reconnection forever: a jetway service should ride
// out a server restart rather than exit. While no server is reachable at all
// the first dial is retried until ctx is done; other errors (bad credentials,
// TLS failures) are returned at once.
func Connect(ctx context.Context, cfg ConnConfig) (*nats.Conn, error) {
	opts, err := cfg.options()
	if err != nil {
		return nil, err
	}
	url := strings.Join(cfg.URLs, ",")
	if url == "" {
		url = nats.DefaultURL
	}
	wait := cfg.ReconnectWait
	if wait <= 0 {
		wait = time.Second
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("bus: connect to %s: %w", url, err)
		}
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			return nc, nil
		}
		if !errors.Is(err, nats.ErrNoServers) {
			return nil, fmt.Errorf("bus: connect to %s: %w", url, err)
		}
		if cfg.Logger != nil {
			cfg.Logger(ConnEvent{Kind: ConnDisconnected, URL: url, Err: err})
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("bus: connect to %s: %w (last error: %v)", url, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// deadLinkPings is how many pings may go unanswered before a link counts
// as dead.
const deadLinkPings = 2

func (cfg ConnConfig) options() ([]nats.Option, error) {
	wait := cfg.ReconnectWait
	if wait <= 0 {
		wait = time.Second
	}
	dead := cfg.DeadLinkAfter
	if dead <= 0 {
		dead = DefaultDeadLinkAfter
	}
	opts := []nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(wait),
		// The client counts a link stale at the ping after deadLinkPings
		// went unanswered, so it is noticed within dead and a third. A
		// write the server does not take holds every other use of the
		// connection (and its pings) until the flusher gives up: that is
		// bounded by dead too.
		nats.PingInterval(dead / (deadLinkPings + 1)),
		nats.MaxPingsOutstanding(deadLinkPings),
		nats.FlusherTimeout(dead),
	}
	if cfg.Name != "" {
		opts = append(opts, nats.Name(cfg.Name))
	}
	if cfg.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(cfg.InboxPrefix))
	}
	switch {
	case cfg.CredsFile != "":
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	case cfg.NKeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(cfg.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("bus: read nkey seed %s: %w", cfg.NKeySeedFile, err)
		}
		opts = append(opts, o)
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCAFile))
	}
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" {
		if cfg.TLSCertFile == "" || cfg.TLSKeyFile == "" {
			return nil, errors.New("bus: TLS client certificate needs both TLSCertFile and TLSKeyFile")
		}
		opts = append(opts, nats.ClientCert(cfg.TLSCertFile, cfg.TLSKeyFile))
	}
	if log := cfg.Logger; log != nil {
		opts = append(opts,
			nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
				log(ConnEvent{Kind: ConnDisconnected, URL: nc.ConnectedUrlRedacted(), Err: err})
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) {
				log(ConnEvent{Kind: ConnReconnected, URL: nc.ConnectedUrlRedacted()})
			}),
			nats.ClosedHandler(func(nc *nats.Conn) {
				log(ConnEvent{Kind: ConnClosed, Err: nc.LastError()})
			}),
			nats.ErrorHandler(func(nc *nats.Conn, _ *nats.Subscription, err error) {
				log(ConnEvent{Kind: ConnError, URL: nc.ConnectedUrlRedacted(), Err: err})
			}),
		)
	}
	return opts, nil
}

// JetStream returns a handle on the new JetStream API for nc. jetway never
// uses the legacy JetStreamContext: its consumers lack priority groups and
// pinning, which the work consumers rely on.
func JetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	return js, nil
}
