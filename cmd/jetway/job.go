package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"jetway/pkg/client"
)

func init() { addCommand(newJobCmd) }

// newJobCmd is `jetway job`: one background job of a session, its output
// and its end, by the dispatcher's job routes (GET …/jobs/{id}/output,
// POST …/jobs/{id}/kill) — what the chat's /kill and the console do,
// from a shell.
func newJobCmd(*globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Read a background job's output or kill it",
		Long: `job output SESSION ID prints a background job's output (jetway jobs SESSION
lists the numbers); job kill SESSION ID ends it and its whole process tree.`,
	}
	cmd.AddCommand(newJobOutputCmd(), newJobKillCmd())
	return cmd
}

func newJobOutputCmd() *cobra.Command {
	var cf clientFlags
	var tail int
	var grep string
	var follow bool
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "output SESSION ID",
		Short: "Print a background job's output",
		Long: `output prints job ID's output in SESSION: all of it, or its last --tail lines,
or the lines matching --grep (RE2, numbered). --follow then keeps printing
lines as the job writes them until it ends, and says how it ended.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if follow && grep != "" {
				return fmt.Errorf("--follow and --grep: follow prints new lines as they come; grep searches what is there")
			}
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			session, job, out := args[0], args[1], cmd.OutOrStdout()
			if grep != "" {
				r, err := c.JobOutput(cmd.Context(), session, job, client.JobOutputRequest{Grep: grep})
				if err != nil {
					return err
				}
				return printLines(out, r.Lines)
			}
			next := 1
			if tail > 0 {
				r, err := c.JobOutput(cmd.Context(), session, job, client.JobOutputRequest{Tail: tail})
				if err != nil {
					return err
				}
				if err := printLines(out, r.Lines); err != nil {
					return err
				}
				next = r.Total + 1
				if !follow {
					return nil
				}
			}
			return copyOutput(cmd.Context(), c, out, cmd.ErrOrStderr(), session, job, next, follow, every)
		},
	}
	cmd.Flags().IntVar(&tail, "tail", 0, "print only the last N lines")
	cmd.Flags().StringVar(&grep, "grep", "", "print only the lines matching this RE2 pattern, numbered")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until the job ends")
	cmd.Flags().DurationVar(&every, "every", time.Second, "with --follow, how often to ask for new lines")
	cf.register(cmd, false)
	return cmd
}

// copyOutput prints the job's lines from line next on, page by page; with
// follow it asks again every `every` until the job has ended and every
// line is printed, then says how it ended on errOut.
func copyOutput(ctx context.Context, c *client.Client, out, errOut io.Writer, session, job string, next int, follow bool, every time.Duration) error {
	for {
		r, err := c.JobOutput(ctx, session, job, client.JobOutputRequest{Offset: next})
		if err != nil {
			return err
		}
		if err := printLines(out, r.Lines); err != nil {
			return err
		}
		if len(r.Lines) > 0 {
			next = max(r.Offset, next) + len(r.Lines)
		}
		if r.More {
			continue
		}
		if !follow {
			return nil
		}
		if r.Job.Status != "running" {
			_, err := fmt.Fprintf(errOut, "job %s ended: %s\n", job, r.Job.Line)
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

func printLines(w io.Writer, lines []string) error {
	for _, l := range lines {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return err
		}
	}
	return nil
}

func newJobKillCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "kill SESSION ID",
		Short: "Kill a background job and its whole process tree",
		Long: `kill ends job ID of SESSION (its whole process tree) and prints it ended;
a job that already ended is printed as it is. It needs a token that may steer
the session.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			j, err := c.KillJob(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			if cf.json {
				return printJSON(cmd.OutOrStdout(), j)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "job %s %s: %s\n", args[1], j.Status, j.Line)
			return err
		},
	}
	cf.register(cmd, true)
	return cmd
}
