package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func init() {
	addCommand(newResumeCmd)
	addCommand(newLayoversCmd)
}

func newResumeCmd(*globals) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "resume SESSION [NOTE...]",
		Short: "Send an interrupted session on",
		Long: `resume is the person's word that an interrupted session (recovery refused:
policy manual or never, attempts used up, old processes unaccounted for) may
go on. It publishes a steer with NOTE, or a default "go on" note, which starts
a Steered run over the interrupted work. On a session that is not interrupted
it is an ordinary steer.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			acc, err := c.Resume(cmd.Context(), args[0], strings.Join(args[1:], " "))
			if err != nil {
				return err
			}
			return cf.printAccepted(cmd.OutOrStdout(), c.BaseURL(), args[0], acc, "resumed")
		},
	}
	cf.register(cmd, true)
	return cmd
}

func newLayoversCmd(*globals) *cobra.Command {
	var cf clientFlags
	var cancel bool
	cmd := &cobra.Command{
		Use:   "layovers SESSION",
		Short: "Show (or --cancel) the work a session set down to check later",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cancel {
				ok, err := c.CancelLayover(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if cf.json {
					return printJSON(out, map[string]bool{"cancelled": ok})
				}
				if !ok {
					_, err = fmt.Fprintf(out, "%s has no layover\n", args[0])
					return err
				}
				_, err = fmt.Fprintf(out, "cancelled the layover of %s\n", args[0])
				return err
			}
			ls, err := c.Layovers(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if cf.json {
				return printJSON(out, ls)
			}
			if len(ls) == 0 {
				_, err = fmt.Fprintf(out, "%s has no layover\n", args[0])
				return err
			}
			for _, l := range ls {
				outf(out, "%s waiting for %s · resumes %s (in %s) · check %d\n",
					l.Session, l.WaitingFor, l.At.Local().Format(time.DateTime), time.Until(l.At).Round(time.Second), l.Checks+1)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&cancel, "cancel", false, "cancel the layover so it never fires")
	cf.register(cmd, true)
	return cmd
}
