package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"jetway/internal/bench"
)

func init() { addCommand(newBenchCmd) }

func newBenchCmd(*globals) *cobra.Command {
	var (
		quick        bool
		jsonFile     string
		natsURL      string
		groups       string
		modelLatency time.Duration
		workDir      string
		cpuProfile   string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure jetway next to raw JetStream measured in the same run",
		Long: `bench starts what it measures — an embedded nats-server with JetStream in a
temporary directory (or --nats URL), a local fake model server, runners and
jobs managers in process, real jetway runner and jobs processes for the crash
and memory figures — and prints every figure next to its raw baseline from
this same run (sync publish latency, async publish rate, durable pull consume
rate, request/reply round trip, a bare SDK call, a bare os/exec start,
cat >file), with the ratio and the goal. A figure that cannot be measured
here is printed as "not measured: <reason>".

--quick finishes in under a minute on a 2-core machine; the full run takes a
few minutes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			cfg := bench.Config{Quick: quick, NATSURL: natsURL, ModelLatency: modelLatency, WorkDir: workDir}
			if groups != "" {
				cfg.Groups = strings.Split(groups, ",")
			}
			if exe, err := os.Executable(); err == nil {
				cfg.JetwayBinary = exe
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("bench: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("bench: cpu profile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			start := time.Now()
			errOut := cmd.ErrOrStderr()
			cfg.Progress = func(line string) {
				fmt.Fprintf(errOut, "[%6.1fs] %s\n", time.Since(start).Seconds(), line)
			}
			results, runErr := bench.Run(ctx, cfg)
			out := cmd.OutOrStdout()
			mode := "full"
			if quick {
				mode = "quick"
			}
			fmt.Fprintf(out, "\njetway bench (%s) · %s · %d figures\n\n", mode, time.Since(start).Round(time.Second), len(results))
			if err := bench.WriteTable(out, results); err != nil {
				return err
			}
			if jsonFile != "" {
				f, err := os.Create(jsonFile)
				if err != nil {
					return fmt.Errorf("bench: %w", err)
				}
				if err := bench.WriteJSON(f, results); err != nil {
					f.Close()
					return fmt.Errorf("bench: write %s: %w", jsonFile, err)
				}
				if err := f.Close(); err != nil {
					return fmt.Errorf("bench: write %s: %w", jsonFile, err)
				}
				fmt.Fprintf(out, "\nwrote %s\n", jsonFile)
			}
			return runErr
		},
	}
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "small samples: under a minute, noisier figures (capture figures write 100 MB instead of 1 GB)")
	f.StringVar(&jsonFile, "json", "", "also write the figures to FILE as a JSON array of {name, unit, value, baseline, ratio, goal}")
	f.StringVar(&natsURL, "nats", "", "measure against this NATS server or cluster instead of an embedded one")
	f.StringVar(&groups, "groups", "", "comma-separated groups to run (raw, agent, runner, jobs; default all)")
	f.DurationVar(&modelLatency, "model-latency", 0, "how long the fake model waits before answering (0 measures the host's own overhead)")
	f.StringVar(&workDir, "dir", "", "keep the embedded server's store and task output here instead of a temporary directory")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to FILE (go tool pprof FILE), to see where a figure's time goes")
	return cmd
}
