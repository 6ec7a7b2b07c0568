package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func init() { addCommand(newSessionsCmd) }

func newSessionsCmd(*globals) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List your tenant's sessions",
		Args:  cobra.NoArgs,
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
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SESSION\tUPDATED\tRECORD")
			for _, s := range ss {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Session, ago(s.Updated), oneLine(string(s.Record), 80))
			}
			return tw.Flush()
		},
	}
	cf.register(cmd, true)
	return cmd
}

// ago is a coarse "how long ago" for listings.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Local().Format("2006-01-02")
}

// oneLine squeezes a value into one listing cell of at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
