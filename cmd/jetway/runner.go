package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"jetway/pkg/bus"
	"jetway/services/runner"
)

func init() {
	addCommand(newRunnerCmd)
	addDevComponent(devComponent{Name: "runner", Run: runDevRunner})
	addDevFlags(func(cmd *cobra.Command) { addMCPAllowHost(cmd, &devMCPAllowHosts) })
}

// devMCPAllowHosts is jetway dev's --mcp-allow-host.
var devMCPAllowHosts []string

// addMCPAllowHost registers --mcp-allow-host.
func addMCPAllowHost(cmd *cobra.Command, hosts *[]string) {
	cmd.Flags().StringSliceVar(hosts, "mcp-allow-host", nil,
		"MCP server host (name or IP, as in the URL) allowed to resolve to a loopback, link-local, private or multicast address (repeatable)")
}

// runnerFlags are the runner's own settings.
type runnerFlags struct {
	id          string
	maxTurns    int
	maxDuration time.Duration
	heartbeat   time.Duration
	idleEvict   time.Duration
	rails       runner.Rails
	window      int
	mcpAllow    []string
}

func (rf *runnerFlags) register(cmd *cobra.Command) {
	host, _ := os.Hostname()
	f := cmd.Flags()
	f.StringVar(&rf.id, "id", envOr("JETWAY_RUNNER_ID", host), "runner identity, stable across restarts (env JETWAY_RUNNER_ID)")
	f.IntVar(&rf.maxTurns, "max-turns", 50, "tool turns per run (0 = no limit)")
	f.DurationVar(&rf.maxDuration, "max-duration", 30*time.Minute, "wall-clock budget per run, checked between turns (0 = none)")
	f.DurationVar(&rf.heartbeat, "heartbeat", time.Second, "how often the runner announces itself; a runner silent for 3 beats is taken over")
	f.DurationVar(&rf.idleEvict, "idle-evict", 30*time.Second, "how long an idle session stays in memory; the next event for one that left first reads its transcript back (slower)")
	f.Int64Var(&rf.rails.Fuel, "fuel", 0, "token budget per session over all its runs (0 = none)")
	f.IntVar(&rf.rails.RunsPerHour, "runs-per-hour", 0, "runs one session may start in a rolling hour (0 = no cap)")
	f.IntVar(&rf.rails.GlobalRunsPerHour, "global-runs-per-hour", 0, "runs all sessions together may start in a rolling hour (0 = no cap)")
	f.IntVar(&rf.window, "context-window", 200000, "the model's context window in tokens, for compaction")
	addMCPAllowHost(cmd, &rf.mcpAllow)
}

func newRunnerCmd(g *globals) *cobra.Command {
	var nf natsFlags
	var rf runnerFlags
	cmd := &cobra.Command{
		Use:   "runner",
		Short: "Run a runner: consume host events per session and drive agent runs",
		Long: `runner consumes host events from the work shards. Run as many as you like: the
partitions are pinned one runner each and move when a runner stops. The model
comes from the environment (ANTHROPIC_API_KEY, OPENAI_API_KEY/OPENAI_BASE_URL),
else the deterministic demo script. The streams must exist (jetway dev, or
any service with provisioning rights, creates them).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rf.idleEvict <= 0 {
				return fmt.Errorf("runner: --idle-evict %s: must be longer than zero (an idle session has to stay in memory for some time)", rf.idleEvict)
			}
			log, err := g.logger("runner")
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			provider, err := modelFromEnv()
			if err != nil {
				return err
			}
			nc, err := bus.Connect(ctx, nf.config("runner", "jetway-runner@"+rf.id))
			if err != nil {
				return err
			}
			defer nc.Close()
			r, err := runner.New(ctx, runner.Config{
				NC: nc, ID: rf.id, Provider: provider, ModelFor: modelFor, Models: servedModels(), Logger: log,
				Heartbeat: rf.heartbeat, IdleEvict: rf.idleEvict, MaxTurns: rf.maxTurns, MaxDuration: rf.maxDuration,
				Rails: rf.rails, ContextWindow: rf.window,
				Tools: runnerTools(nc), ChildState: runnerChildState(nc), KillRun: runnerKillRun(nc),
				ReadInstructions: runnerInstructions(nc),
				MCP:              runnerMCP(nc, log, rf.mcpAllow),
			})
			if err != nil {
				return err
			}
			outf(cmd.OutOrStdout(), "runner %s consuming on %s · model: %s\n", rf.id, nc.ConnectedUrlRedacted(), provider.Name())
			return r.Run(ctx)
		},
	}
	nf.register(cmd.Flags())
	rf.register(cmd)
	return cmd
}

// runDevRunner runs one runner inside `jetway dev`.
func runDevRunner(ctx context.Context, env *devEnv) error {
	log := env.Log.With().Str("component", "runner").Logger()
	provider, err := modelFromEnv()
	if err != nil {
		return err
	}
	r, err := runner.New(ctx, runner.Config{
		NC: env.NC, ID: "dev", Provider: provider, ModelFor: modelFor, Models: servedModels(), Logger: log,
		MaxTurns: 50, MaxDuration: 30 * time.Minute,
		Tools: runnerTools(env.NC), ChildState: runnerChildState(env.NC), KillRun: runnerKillRun(env.NC),
		ReadInstructions: runnerInstructions(env.NC),
		MCP:              runnerMCP(env.NC, log, devMCPAllowHosts),
	})
	if err != nil {
		return err
	}
	log.Info().Str("model", provider.Name()).Msg("runner ready")
	return r.Run(ctx)
}
