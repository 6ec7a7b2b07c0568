package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"jetway/pkg/client"
)

func init() { addCommand(newStopCmd) }

func newStopCmd(*globals) *cobra.Command {
	var cf clientFlags
	var session, reason string
	var off, status bool
	cmd := &cobra.Command{
		Use:   "stop [--session S] [--off]",
		Short: "Ground Stop: stop every session (or one) from running, or lift it",
		Long: `stop turns Ground Stop on: no run starts and running ones stop before their
next model call, everywhere or (--session) for one session. --off lifts it,
--status only shows it. Changing it needs an admin token; without --token
the tokens file's admin token is used.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(!status)
			if err != nil {
				return err
			}
			var st client.StopState
			switch {
			case status:
				st, err = c.Stop(cmd.Context(), session)
			case off:
				st, err = c.ClearStop(cmd.Context(), session)
			default:
				st, err = c.SetStop(cmd.Context(), session, reason)
			}
			if err != nil {
				return err
			}
			if cf.json {
				return printJSON(cmd.OutOrStdout(), st)
			}
			return printStop(cmd.OutOrStdout(), st)
		},
	}
	cf.register(cmd, true)
	f := cmd.Flags()
	f.StringVar(&session, "session", "", "only this session of your tenant (default: everything)")
	f.BoolVar(&off, "off", false, "lift Ground Stop")
	f.BoolVar(&status, "status", false, "only show whether Ground Stop is on")
	f.StringVar(&reason, "reason", "", "why, shown to whoever looks")
	cmd.MarkFlagsMutuallyExclusive("off", "status")
	return cmd
}

func printStop(w io.Writer, st client.StopState) error {
	if !st.GroundStop {
		_, err := fmt.Fprintf(w, "Ground Stop is off (%s)\n", st.Scope)
		return err
	}
	s := fmt.Sprintf("Ground Stop is ON (%s)", st.Scope)
	if st.Reason != "" {
		s += ": " + st.Reason
	}
	if st.By != "" {
		s += fmt.Sprintf(" — set by %s", st.By)
		if !st.At.IsZero() {
			s += " at " + st.At.Local().Format("2006-01-02 15:04:05")
		}
	}
	_, err := fmt.Fprintln(w, s)
	return err
}
