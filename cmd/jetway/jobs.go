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
job's one-line description, and beside them the sub-agents its runs started
(their session, agent profile and state). --json prints the dispatcher's job
records, without the output file's path on the worker's disk (the record's ref
names the output); GET /v1/sessions/{session} has the sub-agents as JSON.`,
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
				return printJSON(out, jobs)
			}
			if len(jobs) == 0 {
				_, err = fmt.Fprintf(out, "no background jobs in %s\n", args[0])
			} else {
				err = client.WriteJobs(out, jobs)
			}
			if err != nil {
				return err
			}
			return writeChildren(cmd, c, args[0])
		},
	}
	cf.register(cmd, true)
	return cmd
}

// writeChildren prints the session's sub-agents after its jobs, if it
// has any. A session the dispatcher has no record of has none.
func writeChildren(cmd *cobra.Command, c *client.Client, session string) error {
	d, err := c.SessionDetail(cmd.Context(), session)
	if err != nil || len(d.Children) == 0 {
		return nil
	}
	out := cmd.OutOrStdout()
	if _, err := fmt.Fprintf(out, "\nsub-agents of %s:\n", session); err != nil {
		return err
	}
	return client.WriteChildren(out, d.Children)
}
