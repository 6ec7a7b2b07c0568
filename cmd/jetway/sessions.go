package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"jetway/pkg/client"
)

func init() { addCommand(newSessionsCmd) }

func newSessionsCmd(*globals) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List your tenant's sessions",
		Long: `sessions lists your tenant's sessions by name: state (idle, running,
interrupted, stopped), the Ground Stop switches that hold it (global, tenant,
session) and when it last changed. --json prints the dispatcher's records as
they are.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			ss, err := c.Sessions(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cf.json {
				return printJSON(out, ss)
			}
			if len(ss) == 0 {
				_, err := fmt.Fprintln(out, "no sessions yet")
				return err
			}
			var stop *client.StopState
			if st, err := c.StopAt(cmd.Context(), client.StopTarget{}); err == nil {
				stop = &st
			}
			return client.WriteSessions(out, ss, stop, time.Now())
		},
	}
	cf.register(cmd, true)
	return cmd
}
