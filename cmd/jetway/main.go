// Command jetway is the one binary of the jetway agent host: every service
// is a subcommand (`jetway dev`, `jetway runner`, …).
//
// Each subcommand lives in its own file and adds itself with addCommand from
// an init function, so a new service is a new file, not an edit here.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"jetway/pkg/telemetry"
)

// globals are the flags every subcommand shares.
type globals struct {
	logLevel  string
	logFormat string
}

// logger builds the process logger for service from the global flags.
func (g *globals) logger(service string) (zerolog.Logger, error) {
	return telemetry.NewLogger(telemetry.LogConfig{
		Level:   g.logLevel,
		Format:  g.logFormat,
		Out:     os.Stderr,
		Service: service,
	})
}

// commandFactories build the subcommands; files register theirs in init.
var commandFactories []func(*globals) *cobra.Command

// addCommand registers a subcommand constructor. Call it from an init
// function in the subcommand's own file.
func addCommand(f func(*globals) *cobra.Command) {
	commandFactories = append(commandFactories, f)
}

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "jetway",
		Short:         "jetway hosts LLM agent sessions over NATS JetStream",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// Refuse bad values before a command starts anything.
			_, err := g.logger("")
			return err
		},
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", envOr("JETWAY_LOG_LEVEL", "info"),
		"log level: trace, debug, info, warn, error (env JETWAY_LOG_LEVEL)")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", envOr("JETWAY_LOG_FORMAT", telemetry.FormatAuto),
		"log format: auto (console on a terminal, else json), json, console (env JETWAY_LOG_FORMAT)")
	var cmds []*cobra.Command
	for _, f := range commandFactories {
		cmds = append(cmds, f(g))
	}
	slices.SortFunc(cmds, func(a, b *cobra.Command) int { return strings.Compare(a.Name(), b.Name()) })
	root.AddCommand(cmds...)
	explainArgs(root)
	return root
}

// explainArgs makes every command's argument check say what the command
// takes: cobra's own refusal ("requires at least 2 arg(s), only received
// 1") names no argument, so the person cannot tell what is missing.
func explainArgs(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		explainArgs(sub)
	}
	check := cmd.Args
	if check == nil {
		return
	}
	cmd.Args = func(c *cobra.Command, args []string) error {
		if err := check(c, args); err != nil {
			return fmt.Errorf("usage: %s (%w; see %s --help)", c.UseLine(), err, c.CommandPath())
		}
		return nil
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func main() {
	if err := newRootCmd().ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "jetway:", err)
		os.Exit(1)
	}
}

// outf and outln write a command's report to w. The command's work is
// done by the time it reports it, and when the terminal or pipe it
// reports to is gone there is no one left to tell, so the write error is
// dropped here, in one place, on purpose.
func outf(w io.Writer, format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }

func outln(w io.Writer, args ...any) { _, _ = fmt.Fprintln(w, args...) }
