package main

import (
	"strings"

	"github.com/spf13/pflag"

	"jetway/pkg/bus"
)

// natsFlags are the connection flags every service shares, each with an
// environment fallback so a container is configured without flags.
type natsFlags struct {
	url                           string
	creds, nkey, user, password   string
	token, tlsCA, tlsCert, tlsKey string
	inboxPrefix                   string
}

func (n *natsFlags) register(f *pflag.FlagSet) {
	f.StringVar(&n.url, "nats", envOr("NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL(s), comma-separated (env NATS_URL)")
	f.StringVar(&n.creds, "nats-creds", envOr("NATS_CREDS", ""), "NATS credentials file (env NATS_CREDS)")
	f.StringVar(&n.nkey, "nats-nkey", envOr("NATS_NKEY", ""), "NATS nkey seed file (env NATS_NKEY)")
	f.StringVar(&n.user, "nats-user", envOr("NATS_USER", ""), "NATS user (env NATS_USER)")
	f.StringVar(&n.password, "nats-password", envOr("NATS_PASSWORD", ""), "NATS password (env NATS_PASSWORD)")
	f.StringVar(&n.token, "nats-token", envOr("NATS_TOKEN", ""), "NATS token (env NATS_TOKEN)")
	f.StringVar(&n.tlsCA, "nats-ca", envOr("NATS_CA", ""), "CA file to verify the NATS server (env NATS_CA)")
	f.StringVar(&n.tlsCert, "nats-cert", envOr("NATS_CERT", ""), "client certificate for mTLS (env NATS_CERT)")
	f.StringVar(&n.tlsKey, "nats-key", envOr("NATS_KEY", ""), "client key for mTLS (env NATS_KEY)")
	f.StringVar(&n.inboxPrefix, "nats-inbox-prefix", envOr("NATS_INBOX_PREFIX", ""),
		"reply inbox prefix; the service's NATS user must be allowed to subscribe to PREFIX.> (default _INBOX_<service>; env NATS_INBOX_PREFIX)")
}

// config is the bus connection configuration for service (dispatcher,
// runner, jobs, notifier) with connection name name. Its replies come on
// the service's own inbox prefix, so its NATS user need not (and in
// deploy/nats may not) read the shared _INBOX.>.
func (n *natsFlags) config(service, name string) bus.ConnConfig {
	prefix := n.inboxPrefix
	if prefix == "" {
		prefix = bus.ServiceInbox(service)
	}
	return bus.ConnConfig{
		URLs: strings.Split(n.url, ","), Name: name, InboxPrefix: prefix,
		CredsFile: n.creds, NKeySeedFile: n.nkey, User: n.user, Password: n.password, Token: n.token,
		TLSCAFile: n.tlsCA, TLSCertFile: n.tlsCert, TLSKeyFile: n.tlsKey,
	}
}
