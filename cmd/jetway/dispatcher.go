package main

import (
	"context"
	"fmt"
	"net"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/telemetry"
	"jetway/services/dispatcher"
	"jetway/services/dispatcher/console"
)

func init() {
	addCommand(newDispatcherCmd)
	addDevComponent(devComponent{Name: "dispatcher", Run: runDevDispatcher})
}

func newDispatcherCmd(g *globals) *cobra.Command {
	var (
		nf               natsFlags
		addr, tokensFile string
		provision        bool
		cfg              dispatcher.Config
	)
	cmd := &cobra.Command{
		Use:   "dispatcher",
		Short: "Run the dispatcher: the HTTP and NATS API into sessions (input, steer, CloudEvents, Ground Stop)",
		Long: `dispatcher serves the public HTTP API (see /v1/openapi.yaml) and the same
operations as the NATS micro service jetway-dispatcher (jetway.api.*).

Every request needs a bearer token. Tokens come from --tokens (a JSON file,
mode 0600: {"tokens":[{"token":"…","tenant":"acme","role":"user",
"event_types":["com.github.*"]}]}; role is user, admin — Ground Stop for its
own tenant — or operator — the global Ground Stop) and from the environment
(JETWAY_TOKENS=token:tenant,…  JETWAY_ADMIN_TOKEN=token[:tenant]
JETWAY_OPERATOR_TOKEN=token[:tenant]).
With no token configured it refuses to start: there is no open mode.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger("dispatcher")
			if err != nil {
				return err
			}
			store, err := auth.Load(auth.Sources{File: tokensFile})
			if err != nil {
				return err
			}
			defer reloadTokensOnHangup(store, auth.Sources{File: tokensFile}, &log)()
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			shutdownTracing, err := telemetry.SetupTracing(ctx, telemetry.TracingConfig{ServiceName: "jetway-dispatcher", ServiceVersion: version})
			if err != nil {
				return err
			}
			defer func() {
				if err := shutdownTracing(context.Background()); err != nil {
					log.Warn().Err(err).Msg("tracing shutdown")
				}
			}()
			nc, err := bus.Connect(ctx, nf.config("dispatcher", "jetway-dispatcher"))
			if err != nil {
				return err
			}
			defer nc.Close()
			if provision {
				js, err := bus.JetStream(nc)
				if err != nil {
					return err
				}
				if err := bus.Provision(ctx, js, bus.ProvisionConfig{}); err != nil {
					return err
				}
			}
			cfg.Conn, cfg.Auth, cfg.Logger, cfg.Version = nc, store, &log, serviceVersion
			d, err := dispatcher.New(cfg)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("--http: %w", err)
			}
			outf(cmd.OutOrStdout(), "dispatcher on http://%s (%d tokens), NATS API %s.* on %s\n",
				ln.Addr(), store.Len(), dispatcher.APISubjectPrefix, nc.ConnectedUrlRedacted())
			return d.Serve(ctx, ln)
		},
	}
	f := cmd.Flags()
	nf.register(f)
	f.StringVar(&addr, "http", dispatcher.DefaultAddr, "host:port to serve the HTTP API on")
	f.StringVar(&tokensFile, "tokens", envOr("JETWAY_TOKENS_FILE", ""), "tokens file (JSON, mode 0600; env JETWAY_TOKENS_FILE); merged with $JETWAY_TOKENS, $JETWAY_ADMIN_TOKEN and $JETWAY_OPERATOR_TOKEN")
	f.BoolVar(&provision, "provision", false, "create or update jetway's streams and buckets before serving")
	f.Int64Var(&cfg.MaxBodyBytes, "max-body", dispatcher.DefaultMaxBodyBytes, "largest request body in bytes (413 above)")
	f.Float64Var(&cfg.RatePerSecond, "rate", dispatcher.DefaultRatePerSecond, "requests per second per tenant (negative: no limit)")
	f.IntVar(&cfg.RateBurst, "burst", dispatcher.DefaultRateBurst, "burst size of each tenant's rate limit")
	return cmd
}

// runDevDispatcher runs the dispatcher inside `jetway dev`: the API is
// mounted under /v1/ on the dev HTTP server, the NATS API on the shared
// connection, and tokens come from DATA/tokens.json (created on first
// start, which is what `jetway chat` and friends read) plus the environment.
func runDevDispatcher(ctx context.Context, env *devEnv) error {
	log := env.Log.With().Str("component", "dispatcher").Logger()
	dt, err := auth.EnsureDevTokens(env.DataDir)
	if err != nil {
		return err
	}
	store, err := auth.Load(auth.Sources{File: dt.Path})
	if err != nil {
		return err
	}
	defer reloadTokensOnHangup(store, auth.Sources{File: dt.Path}, &log)()
	d, err := dispatcher.New(dispatcher.Config{
		Conn: env.NC, Auth: store, Logger: &log, Registry: env.Metrics, Version: serviceVersion,
	})
	if err != nil {
		return err
	}
	svc, err := d.StartNATS()
	if err != nil {
		return err
	}
	defer func() {
		if err := svc.Stop(); err != nil {
			log.Warn().Err(err).Msg("stop the dispatcher's NATS API")
		}
	}()
	h := d.Handler()
	env.Mux.Handle("/v1/", h)
	// The web console: its page at / and its files under /console/.
	env.Mux.Handle("GET /{$}", h)
	env.Mux.Handle("GET "+console.Prefix, h)
	log.Info().Str("tokens", dt.Path).Msg("dispatcher API mounted at /v1/, web console at /, NATS API on " + dispatcher.APISubjectPrefix + ".*")
	sayConsoleLink(ctx, env, d, dt.User.Token)
	<-ctx.Done()
	return nil
}

// sayConsoleLink prints a one-time link that signs the web console in as
// the dev's tenant token, so the person running jetway dev opens it without
// copying a token; the link holds a code, not the token. A failure to make
// one is said, not fatal: `jetway console` makes another.
func sayConsoleLink(ctx context.Context, env *devEnv, d *dispatcher.Dispatcher, token string) {
	if env.Say == nil || token == "" {
		return
	}
	code, err := d.SignInCode(ctx, token)
	if err != nil {
		env.Say("console: %s/ (no sign-in link: %v; run jetway console for one)", env.HTTPURL, err)
		return
	}
	env.Say("console: %s%s", env.HTTPURL, code.Path)
	env.Say("  %s", signInNote(code))
}
