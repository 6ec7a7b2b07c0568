package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"jetway/pkg/client"
)

func init() { addCommand(newSendCmd) }

func newSendCmd(*globals) *cobra.Command {
	var cf clientFlags
	var agentName string
	cmd := &cobra.Command{
		Use:   "send SESSION TEXT...",
		Short: "Send a line of input into a session",
		Long: `send publishes TEXT (the remaining arguments joined by spaces) into SESSION
as an io.jetway.input event through the dispatcher. An idle session starts a
run with it; a busy one hands it to the model before its next call.
--agent binds the session to one of the tenant's agent profiles (jetway
agents ls) from its next run on; without it the session keeps its binding
("default" until bound).`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			acc, err := c.InputAgent(cmd.Context(), args[0], strings.Join(args[1:], " "), agentName)
			if err != nil {
				return err
			}
			return cf.printAccepted(cmd.OutOrStdout(), c.BaseURL(), args[0], acc, "sent")
		},
	}
	cmd.Flags().StringVar(&agentName, "agent", "", "bind the session to this agent profile (docs/PROFILES.md)")
	cf.register(cmd, true)
	return cmd
}

// clientFlags are the flags every command that talks to the dispatcher
// shares: where it is, the token, and --json output.
type clientFlags struct {
	url, token, tokensFile string
	json                   bool
}

func (f *clientFlags) register(cmd *cobra.Command, withJSON bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", "", "dispatcher URL (default $"+client.EnvURL+", else the running jetway dev of the tokens file's data directory, else "+client.DefaultURL+")")
	fl.StringVar(&f.token, "token", "", "bearer token (default $"+client.EnvToken+", else from the tokens file)")
	fl.StringVar(&f.tokensFile, "tokens-file", client.DefaultTokensFile, "tokens file (the one jetway dev writes), read when no token is given")
	if withJSON {
		fl.BoolVar(&f.json, "json", false, "print the dispatcher's answer as JSON")
	}
}

// client builds a dispatcher client; admin picks the admin token from the
// tokens file when no token is given.
func (f *clientFlags) client(admin bool) (*client.Client, error) {
	return f.clientWith(client.Options{Admin: admin})
}

// clientWith builds a dispatcher client from the flags and o's choice of
// token kind.
func (f *clientFlags) clientWith(o client.Options) (*client.Client, error) {
	o.URL, o.Token, o.TokensFile = f.url, f.token, f.tokensFile
	cfg, err := client.Resolve(o)
	if err != nil {
		return nil, err
	}
	return client.New(cfg)
}

// printAccepted says the event was taken and, when Ground Stop holds the
// session, that nothing will run until it is lifted, and how.
func (f *clientFlags) printAccepted(w io.Writer, baseURL, session string, acc client.Accepted, verb string) error {
	if f.json {
		return printJSON(w, acc)
	}
	line := fmt.Sprintf("%s %s", verb, acc.ID)
	if acc.Duplicate {
		line = fmt.Sprintf("already %s (same id %s)", verb, acc.ID)
	}
	if _, err := fmt.Fprintln(w, line); err != nil {
		return err
	}
	for _, sw := range acc.Held {
		lift := client.LiftCommand(invokedAs(), reachFlags(baseURL, f.tokensFile), sw.Scope, session)
		if _, err := fmt.Fprintln(w, heldLine(sw, lift)); err != nil {
			return err
		}
	}
	return nil
}

// heldLine tells a person that a Ground Stop switch holds the session:
// which one, since when, why when known, and lift, the command that lifts
// it.
func heldLine(sw client.StopSwitch, lift string) string {
	what := "Ground Stop on this session"
	switch sw.Scope {
	case "global":
		what, lift = "the global Ground Stop is on", "an operator lifts it with: "+lift
	case "tenant":
		what, lift = "Ground Stop on every session of this tenant", "lift it with: "+lift
	default:
		lift = "lift it with: " + lift
	}
	s := "held: " + what
	if !sw.Since.IsZero() {
		s += " since " + sw.Since.Local().Format(time.DateTime)
	}
	if sw.Reason != "" {
		s += " (" + sw.Reason + ")"
	}
	return s + " — " + lift
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
