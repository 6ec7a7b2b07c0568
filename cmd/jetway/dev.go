package main

import (
	"context"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"jetway/pkg/telemetry"
)

func init() { addCommand(newDevCmd) }

func newDevCmd(g *globals) *cobra.Command {
	cfg := devConfig{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run jetway on one machine: an embedded nats-server, provisioned, plus every service built in",
		Long: `dev starts an embedded nats-server with JetStream (store in DIR/nats), creates
or updates every stream, bucket and consumer, serves /healthz, /readyz and
/metrics, and runs the services registered in this build on one connection.
SIGINT or SIGTERM stops it cleanly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger("dev")
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			shutdownTracing, err := telemetry.SetupTracing(ctx, telemetry.TracingConfig{ServiceName: "jetway-dev", ServiceVersion: version})
			if err != nil {
				return err
			}
			defer func() {
				if err := shutdownTracing(context.Background()); err != nil {
					log.Warn().Err(err).Msg("tracing shutdown")
				}
			}()
			cfg.Out = cmd.OutOrStdout()
			cfg.Log = log
			cfg.Components = devComponents
			return runDev(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data", "./.jetway", "data directory (the NATS store lives in DIR/nats)")
	f.StringVar(&cfg.NATSAddr, "nats", "127.0.0.1:4222", "host:port for NATS clients (port 0: any free port)")
	f.StringVar(&cfg.HTTPAddr, "http", "127.0.0.1:8080", "host:port for /healthz, /readyz and /metrics (port 0: any free port)")
	f.IntVar(&cfg.Partitions, "partitions", 0, "work partitions (0: keep the stored count, or 16 on first start)")
	return cmd
}
