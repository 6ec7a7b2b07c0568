package main

import (
	"strings"

	"github.com/spf13/cobra"
)

func init() { addCommand(newSteerCmd) }

func newSteerCmd(*globals) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "steer SESSION NOTE...",
		Short: "Redirect the work a session has under way",
		Long: `steer publishes NOTE (the remaining arguments joined by spaces) into SESSION
as an io.jetway.steer event. The model reads it before its next call, marked
as taking precedence over the original request where the two disagree.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			acc, err := c.Steer(cmd.Context(), args[0], strings.Join(args[1:], " "))
			if err != nil {
				return err
			}
			return cf.printAccepted(cmd.OutOrStdout(), c.BaseURL(), args[0], acc, "steered")
		},
	}
	cf.register(cmd, true)
	return cmd
}
