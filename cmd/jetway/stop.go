package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"jetway/pkg/client"
)

func init() { addCommand(newStopCmd) }

func newStopCmd(*globals) *cobra.Command {
	var cf clientFlags
	var t client.StopTarget
	var reason string
	var off, status bool
	cmd := &cobra.Command{
		Use:   "stop [--global | --tenant T] [--session S | SESSION] [--off | --status]",
		Short: "Ground Stop: stop every session (of everyone, a tenant or one session) from running, or lift it",
		Long: `stop turns Ground Stop on: no run starts and running ones stop before their
next model call. --off lifts it, --status only shows it.

Which switch: with an operator token (role "operator"), everything by
default; with a tenant admin token, every session of that tenant. --session
picks one session of the token's tenant (so does a SESSION argument).
--global insists on the global switch (a tenant admin is refused: one tenant
may not stop the others); --tenant T names another tenant (operators only).

--status about a session names every switch that holds it: the global one,
its tenant's and its own. --status without one shows the default switch and,
when that is the global one, the token's tenant's switches too.

Changing a switch needs an admin or operator token; without --token the
tokens file's operator token is used (its admin token if it has none).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if t.Session != "" && t.Session != args[0] {
					return fmt.Errorf("two sessions: --session %s and %s; give one", t.Session, args[0])
				}
				t.Session = args[0]
			}
			if t.Global && t.Session != "" {
				return fmt.Errorf("--global names no session; drop %s or --global", t.Session)
			}
			c, err := cf.clientWith(client.Options{Operator: true})
			if err != nil {
				return err
			}
			var st client.StopState
			switch {
			case status:
				return printStatus(cmd.Context(), cmd.OutOrStdout(), c, t, cf.json)
			case off:
				st, err = c.ClearStopAt(cmd.Context(), t)
			default:
				st, err = c.SetStopAt(cmd.Context(), t, reason)
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
	f.StringVar(&t.Session, "session", "", "only this session of your tenant")
	f.StringVar(&t.Tenant, "tenant", "", "this tenant (operator token only; default: your token's tenant)")
	f.BoolVar(&t.Global, "global", false, "the global switch: every tenant (operator token only)")
	f.BoolVar(&off, "off", false, "lift Ground Stop")
	f.BoolVar(&status, "status", false, "only show whether Ground Stop is on")
	f.StringVar(&reason, "reason", "", "why, shown to whoever looks")
	cmd.MarkFlagsMutuallyExclusive("off", "status")
	cmd.MarkFlagsMutuallyExclusive("global", "tenant")
	cmd.MarkFlagsMutuallyExclusive("global", "session")
	return cmd
}

// printStatus shows the switch t names and, so that nothing that holds a
// session goes unsaid, every switch covering a named session, or with the
// global switch the token's own tenant's switches (for a person; --json
// prints the one answer).
func printStatus(ctx context.Context, w io.Writer, c *client.Client, t client.StopTarget, asJSON bool) error {
	st, err := c.StopAt(ctx, t)
	if err != nil {
		return err
	}
	if asJSON {
		// The answer as it is: what a program reads does not change shape
		// with the token's kind.
		return printJSON(w, st)
	}
	states := []client.StopState{st}
	if st.Scope == "global" && !t.Global {
		// An operator token of no tenant is refused here: it has none.
		if own, err := c.StopAt(ctx, client.StopTarget{OwnTenant: true}); err == nil {
			states = append(states, own)
		}
	}
	for _, s := range states {
		if err := printStop(w, s); err != nil {
			return err
		}
	}
	return nil
}

func printStop(w io.Writer, st client.StopState) error {
	if len(st.Covering) > 0 {
		return printCovering(w, st)
	}
	if _, err := fmt.Fprintln(w, stopLine(st)); err != nil {
		return err
	}
	if st.GlobalStop != nil && *st.GlobalStop {
		if _, err := fmt.Fprintln(w, "  the global Ground Stop is ON too (an operator's; ask them why)"); err != nil {
			return err
		}
	}
	if st.TenantStop != nil && *st.TenantStop {
		if _, err := fmt.Fprintln(w, "  the tenant's Ground Stop is ON too (jetway stop --status shows why)"); err != nil {
			return err
		}
	}
	for _, s := range st.Sessions {
		if _, err := fmt.Fprintln(w, "  "+stopLine(s)); err != nil {
			return err
		}
	}
	return nil
}

func stopLine(st client.StopState) string {
	if !st.GroundStop {
		return fmt.Sprintf("Ground Stop is off (%s)", st.Scope)
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
	return s
}

// printCovering answers a session's status when switches hold it: one
// line per switch, widest first.
func printCovering(w io.Writer, st client.StopState) error {
	if _, err := fmt.Fprintf(w, "%s is held by %d Ground Stop switch(es):\n", st.Scope, len(st.Covering)); err != nil {
		return err
	}
	for _, sw := range st.Covering {
		line := "  " + sw.Scope + ": ON"
		if !sw.Since.IsZero() {
			line += " since " + sw.Since.Local().Format("2006-01-02 15:04:05")
		}
		if sw.By != "" {
			line += " by " + sw.By
		}
		if sw.Reason != "" {
			line += ": " + sw.Reason
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}
