package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"jetway/pkg/client"
)

func init() { addCommand(newJobsCmd) }

func newJobsCmd(*globals) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "jobs SESSION",
		Short: "List a session's background jobs",
		Long: `jobs lists SESSION's background jobs by number: state, exit status and each
job's one-line description. --json prints the dispatcher's records, without the
output file's path on the worker's disk (the record's ref names the output).`,
		Args: cobra.ExactArgs(1),
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
			client.SortJobs(jobs)
			if cf.json {
				for i := range jobs {
					jobs[i] = client.WithoutHostPath(jobs[i])
				}
				return printJSON(out, jobs)
			}
			if len(jobs) == 0 {
				_, err := fmt.Fprintf(out, "no background jobs in %s\n", args[0])
				return err
			}
			return client.WriteJobs(out, jobs)
		},
	}
	cf.register(cmd, true)
	return cmd
}
