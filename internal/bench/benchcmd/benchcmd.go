// Package benchcmd is the jetway-bench command (cmd/jetway-bench), kept
// apart from its main so that the docs' tests in cmd/jetway can check the
// flags the docs give it without linking the bench into jetway itself.
package benchcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"jetway/internal/bench"
)

// New is the jetway-bench command: its flags, the run, the table and the
// JSON file.
func New() *cobra.Command {
	var (
		quick        bool
		jsonFile     string
		natsURL      string
		groups       string
		modelLatency time.Duration
		workDir      string
		cpuProfile   string
		jetwayBin    string
		probes       int
	)
	cmd := &cobra.Command{
		Use:   "jetway-bench",
		Short: "Measure jetway next to raw JetStream measured in the same run",
		Long: `jetway-bench starts what it measures — an embedded nats-server with JetStream
in a temporary directory (or --nats URL), a local fake model server, runners,
a dispatcher and jobs managers in process, real jetway runner and jobs
processes (from --jetway) for the crash and memory figures, and for the felt
figures a jetway dev process with its HTTP client in a process of its own —
and prints every figure next to its raw baseline from this same run (sync
publish latency, async publish rate, durable pull consume rate, request/reply
round trip, a bare SDK call, a bare os/exec start, cat >file), with the ratio
and the goal.
A figure that cannot be measured here is printed as "not measured: <reason>".

--quick finishes in about a minute on a 2-core machine; the full run takes a
few minutes.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			cfg := bench.Config{Quick: quick, NATSURL: natsURL, ModelLatency: modelLatency, WorkDir: workDir, Sizes: bench.Sizes{Probes: probes}}
			if groups != "" {
				cfg.Groups = strings.Split(groups, ",")
			}
			bin, err := findJetway(jetwayBin)
			if err != nil {
				outf(cmd.ErrOrStderr(), "jetway-bench: %v; the figures that need a jetway process will say \"not measured\"\n", err)
			}
			cfg.JetwayBinary = bin
			if exe, err := os.Executable(); err == nil {
				cfg.ClientCommand = []string{exe, bench.FeltClientArg}
			} else {
				outf(cmd.ErrOrStderr(), "jetway-bench: %v; the felt figures will say \"not measured\"\n", err)
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("bench: %w", err)
				}
				defer func() {
					if err := f.Close(); err != nil {
						outf(cmd.ErrOrStderr(), "jetway-bench: cpu profile %s: %v\n", cpuProfile, err)
					}
				}()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("bench: cpu profile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			return run(ctx, cmd, cfg, quick, jsonFile)
		},
	}
	cmd.AddCommand(feltClientCmd())
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "small samples: about a minute, noisier figures (capture figures write 100 MB instead of 1 GB)")
	f.StringVar(&jsonFile, "json", "", "also write the figures to FILE as a JSON array of {name, unit, value, baseline, ratio, goal}")
	f.StringVar(&natsURL, "nats", "", "measure against this NATS server or cluster instead of an embedded one")
	f.StringVar(&groups, "groups", "", "comma-separated groups to run ("+strings.Join(bench.AllGroups, ", ")+"; default all)")
	f.DurationVar(&modelLatency, "model-latency", 0, "how long the fake model waits before answering (0 measures the host's own overhead)")
	f.StringVar(&workDir, "dir", "", "keep the embedded server's store and task output here instead of a temporary directory")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to FILE (go tool pprof FILE), to see where a figure's time goes")
	f.IntVar(&probes, "probes", 0, "events each latency figure times (default 1000, 50 with --quick): --quick --probes 1000 gives a latency group its full sample with the quick baselines")
	f.StringVar(&jetwayBin, "jetway", "", "the jetway binary to start as real runner, jobs-worker and dev processes (default: jetway beside this executable, else on PATH)")
	return cmd
}

// feltClientCmd is the felt group's HTTP client, which the bench starts
// as a process of its own (bench.Config.ClientCommand): hidden, it speaks
// JSON lines with the bench on its stdin and stdout.
func feltClientCmd() *cobra.Command {
	return &cobra.Command{
		Use:           bench.FeltClientArg,
		Short:         "The felt group's HTTP client, started by the bench itself",
		Hidden:        true,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.FeltClient(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}

// run measures, prints the table and writes the JSON file.
func run(ctx context.Context, cmd *cobra.Command, cfg bench.Config, quick bool, jsonFile string) error {
	start := time.Now()
	errOut := cmd.ErrOrStderr()
	cfg.Progress = func(line string) {
		outf(errOut, "[%6.1fs] %s\n", time.Since(start).Seconds(), line)
	}
	results, runErr := bench.Run(ctx, cfg)
	out := cmd.OutOrStdout()
	mode := "full"
	if quick {
		mode = "quick"
	}
	outf(out, "\njetway bench (%s) · %s · %d figures\n\n", mode, time.Since(start).Round(time.Second), len(results))
	if err := bench.WriteTable(out, results); err != nil {
		return err
	}
	if jsonFile != "" {
		if err := writeJSON(jsonFile, results); err != nil {
			return err
		}
		outf(out, "\nwrote %s\n", jsonFile)
	}
	return runErr
}

func writeJSON(path string, results []bench.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := bench.WriteJSON(f, results); err != nil {
		_ = f.Close() // the write error is the one to report
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	return nil
}

// findJetway resolves the jetway binary the process figures start: the
// flag's value, else `jetway` beside this executable (bin/ after `make
// bench`), else on PATH.
func findJetway(flag string) (string, error) {
	if flag != "" {
		if _, err := os.Stat(flag); err != nil {
			return "", fmt.Errorf("--jetway: %w", err)
		}
		return filepath.Abs(flag)
	}
	if exe, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(exe), "jetway")
		if _, err := os.Stat(beside); err == nil {
			return beside, nil
		}
	}
	if p, err := exec.LookPath("jetway"); err == nil {
		return filepath.Abs(p)
	}
	return "", errors.New("no jetway binary (--jetway, beside jetway-bench, or on PATH)")
}

// outf writes a line of progress or of the report. The figures are
// measured by then, and when the terminal is gone there is no one left to
// tell, so the write error is dropped here, on purpose.
func outf(w io.Writer, format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }
