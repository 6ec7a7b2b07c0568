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
	var t client.StopTarget
	var reason string
	var off, status bool
	cmd := &cobra.Command{
		Use:   "stop [--global | --tenant T] [--session S] [--off | --status]",
		Short: "Ground Stop: stop every session (of everyone, a tenant or one session) from running, or lift it",
		Long: `stop turns Ground Stop on: no run starts and running ones stop before their
next model call. --off lifts it, --status only shows it.

Which switch: with an operator token (role "operator"), everything by
default; with a tenant admin token, every session of that tenant. --session
picks one session of the token's tenant. --global insists on the global
switch (a tenant admin is refused: one tenant may not stop the others);
--tenant T names another tenant (operators only).

Changing a switch needs an admin or operator token; without --token the
tokens file's operator token is used (its admin token if it has none).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.clientWith(client.Options{Operator: true})
			if err != nil {
				return err
			}
			var st client.StopState
			switch {
			case status:
				st, err = c.StopAt(cmd.Context(), t)
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

func printStop(w io.Writer, st client.StopState) error {
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
