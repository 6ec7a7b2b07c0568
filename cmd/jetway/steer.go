package main

import (
	"strings"

	"github.com/spf13/cobra"
)

func init() { addCommand(newSteerCmd) }

func newSteerCmd(*globals) *cobra.Command {
	var cf clientFlags
	var agentName string
	cmd := &cobra.Command{
		Use:   "steer SESSION NOTE...",
		Short: "Redirect the work a session has under way",
		Long: `steer publishes NOTE (the remaining arguments joined by spaces) into SESSION
as an io.jetway.steer event. The model reads it before its next call, marked
as taking precedence over the original request where the two disagree.
--agent binds the session to one of the tenant's agent profiles from its
next run on, as send --agent does; the steer itself reaches the run under
way, which keeps the profile it started with.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			acc, err := c.SteerAgent(cmd.Context(), args[0], strings.Join(args[1:], " "), agentName)
			if err != nil {
				return err
			}
			return cf.printAccepted(cmd.OutOrStdout(), c.BaseURL(), args[0], acc, "steered")
		},
	}
	cmd.Flags().StringVar(&agentName, "agent", "", "bind the session to this agent profile (docs/PROFILES.md)")
	cf.register(cmd, true)
	return cmd
}
