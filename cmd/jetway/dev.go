package main

import (
	"context"
	"fmt"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/client"
	"jetway/pkg/control/groundstop"
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
As it starts it prints a one-time link that opens the web console signed in
(a code good for two minutes, never the token; jetway console prints
another). SIGINT or SIGTERM stops it cleanly.

The embedded NATS has the deployed account layout: the services connect
as user jetway (its password in DIR/nats.token) and each tenant has an
account of its own (credentials in DIR/tenants/<tenant>.nk). It speaks
plain text, without TLS, so --nats must be a loopback address; a bus for
other machines is the deploy/nats setup. --http may be public (the API needs bearer tokens) but
is warned about: plain HTTP carries the tokens in clear.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger("dev")
			if err != nil {
				return err
			}
			// The runner picks the same provider; asking here too makes a
			// bad model setting fail before anything starts, and names the
			// model on stdout, where the person looks.
			provider, err := modelFromEnv()
			if err != nil {
				return fmt.Errorf("model: %w", err)
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
			cfg.Checks = devChecks
			cfg.Notes = func(env *devEnv) []string {
				return devNotes(env, provider.Name(), runnerTools(env.NC) != nil)
			}
			return runDev(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data", "./.jetway", "data directory (the NATS store lives in DIR/nats)")
	f.StringVar(&cfg.NATSAddr, "nats", "127.0.0.1:4222", "host:port for NATS clients, loopback only: the dev bus has one token, in <data>/nats.token (port 0: any free port)")
	f.StringVar(&cfg.HTTPAddr, "http", "127.0.0.1:8080", "host:port of the HTTP API, with /healthz, /readyz and /metrics (port 0: any free port)")
	f.StringSliceVar(&cfg.WebhookAllowHosts, "webhook-allow-host", nil,
		"webhook host allowed to resolve to a loopback or private address, e.g. 127.0.0.1 for a receiver on this machine (repeatable)")
	f.IntVar(&cfg.Partitions, "partitions", 0, "work partitions (0: keep the stored count, or 16 on first start)")
	f.IntVar(&cfg.Shards, "shards", 0, "work shards the partitions are spread over, at most --partitions (0: keep the stored count, or 1 on first start); change it only with no event waiting")
	for _, add := range devFlags {
		add(cmd)
	}
	return cmd
}

// devFlags add the flags of the components built in (the jobs worker's
// limits and confinement) to `jetway dev`.
var devFlags []func(*cobra.Command)

func addDevFlags(add func(*cobra.Command)) { devFlags = append(devFlags, add) }

// devChecks validate those flags, so `jetway dev` refuses a bad one before
// it starts NATS or provisions anything.
var devChecks []func() error

func addDevCheck(check func() error) { devChecks = append(devChecks, check) }

// devNotes are the lines `jetway dev` prints for the person running it:
// which model answers, whether runs get the jobs tools, where the tokens
// are, and the command that attaches a chat to this stack.
func devNotes(env *devEnv, model string, jobsTools bool) []string {
	tools := "tools: none (the runner has no jobs tools in this build)"
	if jobsTools {
		tools = "tools: shell, background jobs and workspace files (jobs worker)"
	}
	tokens := filepath.Join(env.DataDir, auth.DevTokensFile)
	notes := []string{
		"model: " + model,
		tools,
		"tokens: " + tokens,
		"chat: " + chatCommand(env.HTTPURL, tokens),
	}
	return append(notes, groundStopNotes(env, reachFlags(env.HTTPURL, tokens))...)
}

// groundStopNotes names every Ground Stop switch that is on as the dev
// starts, with the command that lifts it: a switch survives restarts, and
// a stack that silently runs nothing looks broken.
func groundStopNotes(env *devEnv, flags string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := bus.BindBucket(ctx, env.JS, bus.BucketControl)
	if err != nil {
		return nil
	}
	on, err := groundstop.All(ctx, kv)
	if err != nil {
		return []string{"Ground Stop: cannot read the switches: " + err.Error()}
	}
	var notes []string
	for _, sw := range on {
		what, scope := "every session of every tenant", "global"
		switch {
		case sw.Session != "":
			what, scope = "session "+sw.Tenant+"/"+sw.Session, "session"
		case sw.Tenant != "":
			what, scope = "every session of tenant "+sw.Tenant, "tenant"
		}
		line := "! Ground Stop on " + what + " since " + sw.Record.At.Local().Format(time.DateTime)
		if sw.Record.Reason != "" {
			line += " (" + sw.Record.Reason + ")"
		}
		lift := client.LiftCommand(invokedAs(), flags, scope, sw.Session)
		if scope == "tenant" && sw.Tenant != auth.DefaultTenant {
			lift += " --tenant " + sw.Tenant
		}
		notes = append(notes, line+": nothing runs there until it is lifted — lift it with: "+lift)
	}
	return notes
}

// chatCommand is the `jetway chat` line that reaches this stack, with
// only the flags that differ from chat's defaults.
func chatCommand(url, tokensFile string) string {
	if flags := reachFlags(url, tokensFile); flags != "" {
		return "jetway chat SESSION " + flags
	}
	return "jetway chat SESSION"
}
