package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func init() { addCommand(newJobsCmd) }

func newJobsCmd(*globals) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "jobs SESSION",
		Short: "List a session's background jobs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			jobs, err := c.Jobs(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cf.json {
				return printJSON(out, jobs)
			}
			if len(jobs) == 0 {
				_, err := fmt.Fprintf(out, "no background jobs in %s\n", args[0])
				return err
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tUPDATED\tRECORD")
			for _, j := range jobs {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", j.Job, ago(j.Updated), oneLine(string(j.Record), 100))
			}
			return tw.Flush()
		},
	}
	cf.register(cmd, true)
	return cmd
}
