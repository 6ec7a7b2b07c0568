package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/telemetry"
	"jetway/services/notifier"
)

// devWebhooksFile is where `jetway dev` looks for webhooks, in its data dir.
const devWebhooksFile = "webhooks.json"

func init() {
	addCommand(newNotifierCmd)
	addDevComponent(devComponent{Name: "notifier", Run: runDevNotifier})
}

func newNotifierCmd(g *globals) *cobra.Command {
	var nf natsFlags
	var webhooksFile, metricsAddr string
	var retry notifier.Retry
	var allowHosts []string
	var legacySig bool
	cmd := &cobra.Command{
		Use:   "notifier",
		Short: "Run the notifier: headlines to jetway.notify.<tenant>.<session> and to webhooks",
		Long: `notifier turns job events and run output into one-line headlines, publishes
them on jetway.notify.<tenant>.<session> (which chat and the SSE stream show)
and POSTs them to the tenant's webhooks, signed, with retries and dead letters.
The streams must exist (jetway dev, or another service, provisions them).

The webhooks file maps a tenant to its receivers:
  {"default": [{"url": "https://example.com/hook", "secret": "…", "types": ["io.jetway.job.*"]}]}

Each POST carries Jetway-Timestamp and Jetway-Signature: v1=hex(HMAC-SHA256(secret,
timestamp + "." + body)); receivers refuse timestamps older than 5 minutes.
Redirects are never followed. Targets resolving to loopback, link-local,
private, unspecified or multicast addresses are refused unless their host is
allowed by name with --webhook-allow-host.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger("notifier")
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			var hooks notifier.Webhooks
			if webhooksFile != "" {
				if hooks, err = notifier.LoadWebhooks(webhooksFile); err != nil {
					return err
				}
			}
			nc, err := bus.Connect(ctx, nf.config("notifier", "jetway-notifier"))
			if err != nil {
				return err
			}
			defer nc.Close()
			reg := telemetry.NewRegistry()
			if metricsAddr != "" {
				srv := &http.Server{Addr: metricsAddr, Handler: telemetry.MetricsHandler(reg), ReadHeaderTimeout: 10 * time.Second}
				go func() {
					if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
						log.Error().Err(err).Msg("metrics server")
					}
				}()
				// Metrics only: the process is on its way out when this runs.
				defer func() { _ = srv.Close() }()
			}
			n, err := notifier.New(notifier.Config{
				Conn: nc, Webhooks: hooks, Retry: retry, Logger: &log, Registry: reg, Version: serviceVersion,
				WebhookAllowHosts: allowHosts, LegacySignature: legacySig,
			})
			if err != nil {
				return err
			}
			go func() {
				select {
				case <-n.Ready():
					outf(cmd.OutOrStdout(), "notifier running on %s (%d tenants with webhooks)\n", nc.ConnectedUrlRedacted(), len(hooks))
				case <-ctx.Done():
				}
			}()
			return n.Run(ctx)
		},
	}
	f := cmd.Flags()
	nf.register(f)
	f.StringVar(&webhooksFile, "webhooks", "", "webhooks file (JSON, mode 0600)")
	f.StringVar(&metricsAddr, "metrics", "", "host:port to serve /metrics on (default: none)")
	f.DurationVar(&retry.Base, "retry-base", notifier.DefaultRetryBase, "first webhook retry delay (doubles each time)")
	f.DurationVar(&retry.Max, "retry-max", notifier.DefaultRetryMax, "longest webhook retry delay")
	f.IntVar(&retry.Attempts, "retry-attempts", notifier.DefaultRetryAttempts, "webhook tries before a dead letter")
	f.StringSliceVar(&allowHosts, "webhook-allow-host", nil,
		"webhook host (name or IP, as in the URL) allowed to resolve to a loopback, link-local, private or multicast address (repeatable)")
	f.BoolVar(&legacySig, "webhook-legacy-signature", false,
		"also send the old body-only X-Jetway-Signature (replayable: only while receivers move to Jetway-Signature)")
	return cmd
}

// runDevNotifier runs the notifier inside `jetway dev`, with webhooks from
// DATA/webhooks.json when present, and serves the caller's dead letters at
// GET /v1/notifier/deadletters behind the dev tokens.
func runDevNotifier(ctx context.Context, env *devEnv) error {
	log := env.Log.With().Str("component", "notifier").Logger()
	// Ready only once its consumers exist: a new notifier consumer starts
	// with new messages, so a run started before it would have no headlines.
	var started atomic.Pointer[notifier.Notifier]
	env.AddReadyCheck("notifier", func(context.Context) error {
		if n := started.Load(); n != nil {
			select {
			case <-n.Ready():
				return nil
			default:
			}
		}
		return errors.New("starting")
	})
	var hooks notifier.Webhooks
	path := filepath.Join(env.DataDir, devWebhooksFile)
	if _, err := os.Stat(path); err == nil {
		if hooks, err = notifier.LoadWebhooks(path); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("webhooks: %w", err)
	}
	n, err := notifier.New(notifier.Config{Conn: env.NC, Webhooks: hooks, Logger: &log, Registry: env.Metrics, Version: serviceVersion,
		WebhookAllowHosts: env.WebhookAllowHosts})
	if err != nil {
		return err
	}
	started.Store(n)
	if dt, err := auth.EnsureDevTokens(env.DataDir); err != nil {
		log.Warn().Err(err).Msg("dead-letter endpoint not mounted: no dev tokens")
	} else if store, err := auth.Load(auth.Sources{File: dt.Path}); err != nil {
		log.Warn().Err(err).Msg("dead-letter endpoint not mounted")
	} else {
		env.Mux.Handle("GET /v1/notifier/deadletters", n.DeadLettersHandler(func(r *http.Request) (string, error) {
			p, err := store.Authenticate(auth.BearerToken(r.Header.Get("Authorization")))
			if err == nil && p.Tenant == "" {
				err = errors.New("this token belongs to no tenant")
			}
			return p.Tenant, err
		}))
	}
	return n.Run(ctx)
}
