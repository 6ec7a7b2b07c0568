package main

import (
	"time"

	"github.com/spf13/cobra"

	"jetway/pkg/client"
)

func init() { addCommand(newConsoleCmd) }

func newConsoleCmd(*globals) *cobra.Command {
	var (
		cf              clientFlags
		admin, operator bool
	)
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Print a one-time link that signs the web console in",
		Long: `console asks the dispatcher for a one-time sign-in code for your token and
prints the web console's link with it, so you open the console signed in
without copying a token out of the tokens file. The link carries the code,
never the token (in its fragment, which the browser does not even send to
the server); the page trades the code for the token and drops it from the
address bar. A code works once and for two minutes, and signs in as the
token that asked for it: the tenant token by default, --admin for the
tenant admin's, --operator for the operator's (the cluster page). --json
prints the dispatcher's answer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.clientWith(client.Options{Admin: admin, Operator: operator})
			if err != nil {
				return err
			}
			code, link, err := c.SignInCode(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cf.json {
				return printJSON(out, code)
			}
			outln(out, link)
			outln(out, signInNote(code))
			return nil
		},
	}
	cf.register(cmd, true)
	cmd.Flags().BoolVar(&admin, "admin", false, "sign in with the tokens file's tenant admin token")
	cmd.Flags().BoolVar(&operator, "operator", false, "sign in with the tokens file's operator token")
	cmd.MarkFlagsMutuallyExclusive("admin", "operator")
	return cmd
}

// signInNote says whom a printed sign-in link signs in as and for how
// long, so a person knows what they hand over if they share it.
func signInNote(code client.SignInCode) string {
	who := "role " + code.Role
	if code.Tenant != "" {
		who = "tenant " + code.Tenant + ", " + who
	}
	return "signs the web console in once, as " + who + ", until " + code.ExpiresAt.Local().Format(time.TimeOnly) +
		" (a one-time code, not your token; `jetway console` prints another)"
}
