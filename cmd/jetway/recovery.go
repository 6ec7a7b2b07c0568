package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"jetway/pkg/client"
)

func init() { addCommand(newRecoveryCmd) }

func newRecoveryCmd(*globals) *cobra.Command {
	var cf clientFlags
	var policy string
	var maxAttempts int
	var clearOverride bool
	cmd := &cobra.Command{
		Use:   "recovery SESSION",
		Short: "Show or set whether a session's interrupted work restarts on its own",
		Long: `recovery shows or sets a session's recovery policy: what a runner does when
it finds the session's run interrupted (a runner died, the run crashed).

  automatic  restart on its own, up to --max-attempts restarts (default 3)
  manual     record the interruption and wait for a person: jetway resume
  never      do not restart

With no flags it prints the session's override and the settings in effect.
--policy and --max-attempts change only what they name and keep the rest of
the override; --clear drops the override (with other flags: start from none).
--max-attempts 0 means never restart on its own.`,
		Example: `  jetway recovery s1
  jetway recovery s1 --policy manual
  jetway recovery s1 --max-attempts 5
  jetway recovery s1 --clear`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			ctx, session, out := cmd.Context(), args[0], cmd.OutOrStdout()
			setPolicy, setMax := cmd.Flags().Changed("policy"), cmd.Flags().Changed("max-attempts")
			if setMax && maxAttempts < 0 {
				return errors.New("--max-attempts cannot be negative (0 means never restart on its own)")
			}
			var r client.Recovery
			verb := ""
			switch {
			case !setPolicy && !setMax && !clearOverride:
				r, err = c.Recovery(ctx, session)
			case !setPolicy && !setMax:
				r, err = c.ClearRecovery(ctx, session)
				verb = "cleared: "
			default:
				var o client.RecoveryOverride
				if !clearOverride {
					// Keep what the flags do not name; the API replaces the
					// whole override.
					cur, err := c.Recovery(ctx, session)
					if err != nil {
						return err
					}
					if cur.Override != nil {
						o = *cur.Override
					}
				}
				if setPolicy {
					p := strings.ToLower(strings.TrimSpace(policy))
					o.Policy = &p
				}
				if setMax {
					o.MaxAttempts = &maxAttempts
				}
				r, err = c.SetRecovery(ctx, session, o)
				verb = "set: "
			}
			if err != nil {
				return err
			}
			if cf.json {
				return printJSON(out, r)
			}
			return printRecovery(out, verb, r)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&policy, "policy", "", "automatic, manual or never")
	fl.IntVar(&maxAttempts, "max-attempts", 0, "restarts allowed before a person must look (0: none on its own)")
	fl.BoolVar(&clearOverride, "clear", false, "drop the session's override so the defaults apply")
	cf.register(cmd, true)
	return cmd
}

// printRecovery writes one line a person reads, saying for each setting
// whether the session sets it or it is the default:
//
//	s1 recovery: policy manual (set for this session), max attempts 3 (default)
func printRecovery(w io.Writer, verb string, r client.Recovery) error {
	var o client.RecoveryOverride
	if r.Override != nil {
		o = *r.Override
	}
	from := func(set bool) string {
		if set {
			return "set for this session"
		}
		return "default"
	}
	attempts := from(o.MaxAttempts != nil)
	if r.Effective.MaxAttempts == 0 {
		attempts += "; never restarts on its own"
	}
	_, err := fmt.Fprintf(w, "%s%s recovery: policy %s (%s), max attempts %d (%s)\n", verb, r.Session,
		r.Effective.Policy, from(o.Policy != nil), r.Effective.MaxAttempts, attempts)
	return err
}
