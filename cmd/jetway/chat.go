package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"jetway/pkg/client"
	"jetway/pkg/client/chat"
)

func init() { addCommand(newChatCmd) }

func newChatCmd(*globals) *cobra.Command {
	var cf clientFlags
	var wait time.Duration
	var noWait bool
	var agentName string
	cmd := &cobra.Command{
		Use:   "chat SESSION",
		Short: "Talk to a session, seeing its headlines and text as they happen",
		Long: `chat is a prompt for one session. It opens with the session's last few
turns, its state, the Ground Stop switches holding it (with the command that
lifts each), its running jobs and the events waiting for it. Headlines (job
exits, runs started and ended) and the agent's streamed text appear as they
happen, above the line you are typing, which is redrawn after each; a line
typed while the agent is busy is shown as delivered when it reaches the model.
Slash commands:

` + chat.Help + `

When input is not a terminal, chat reads lines (one input each), and after
the input ends keeps showing output until the session has settled: no run,
no running background job, no event waiting for it — so a job's exit and the
report it leads to are shown (at most --wait; --no-wait leaves at once).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			var admin *client.Client
			if cf.token == "" {
				// /stop needs the admin token; use it when the tokens file has one.
				admin, _ = cf.client(true)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return chat.Run(ctx, chat.Config{
				Client:   c,
				Admin:    admin,
				Session:  args[0],
				Agent:    agentName,
				In:       cmd.InOrStdin(),
				Out:      cmd.OutOrStdout(),
				Wait:     wait,
				NoWait:   noWait,
				CLI:      invokedAs(),
				CLIFlags: reachFlags(c.BaseURL(), cf.tokensFile),
			})
		},
	}
	cf.register(cmd, false)
	cmd.Flags().DurationVar(&wait, "wait", chat.DefaultWait, "line mode: the longest to wait, after input ends, for the session to settle")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "line mode: leave as soon as input ends")
	cmd.Flags().StringVar(&agentName, "agent", "", "bind the session to this agent profile (docs/PROFILES.md)")
	return cmd
}

// invokedAs is this program as the person ran it, for commands they can
// paste: "bin/jetway" when run from the repository root, "jetway" when
// found on the PATH.
func invokedAs() string {
	if strings.Contains(os.Args[0], "/") {
		return os.Args[0]
	}
	return "jetway"
}

// reachFlags are the flags a client command needs to reach the dispatcher
// at url with tokensFile: only those that differ from the defaults.
func reachFlags(url, tokensFile string) string {
	var flags []string
	if url != client.DefaultURL {
		flags = append(flags, "--url "+url)
	}
	if tokensFile != "" && filepath.Clean(tokensFile) != filepath.Clean(client.DefaultTokensFile) {
		flags = append(flags, "--tokens-file "+tokensFile)
	}
	return strings.Join(flags, " ")
}
