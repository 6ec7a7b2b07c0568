package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"jetway/pkg/client"
	"jetway/pkg/events"
)

func init() { addCommand(newSendCmd) }

func newSendCmd(*globals) *cobra.Command {
	var cf clientFlags
	var agentName string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "send SESSION TEXT...",
		Short: "Send a line of input into a session",
		Long: `send publishes TEXT (the remaining arguments joined by spaces) into SESSION
as an io.jetway.input event through the dispatcher. An idle session starts a
run with it; a busy one hands it to the model before its next call.
--agent binds the session to one of the tenant's agent profiles (jetway
agents ls) from its next run on; without it the session keeps its binding
("default" until bound).

send then waits up to --wait for what the runner did with it: the run it
started (printed), a refusal (printed, and send exits non-zero), or a live
run it was handed to. What the dispatcher can check before accepting (the
agent profile exists, a runner serves its model) is refused at once.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			session := args[0]
			// The stream is open before the input is sent, so the run it
			// starts cannot be missed; a stream that cannot be opened only
			// means send does not wait.
			var watch *client.Stream
			if wait > 0 && !cf.json {
				ctx, cancel := context.WithTimeout(cmd.Context(), wait)
				defer cancel()
				watch, _ = c.Stream(ctx, session, client.StreamOptions{FromNew: true})
				if watch != nil {
					defer func() { _ = watch.Close() }() // only read from; nothing to lose
				}
			}
			acc, err := c.InputAgent(cmd.Context(), session, strings.Join(args[1:], " "), agentName)
			if err != nil {
				return err
			}
			if err := cf.printAccepted(cmd.OutOrStdout(), c.BaseURL(), session, acc, "sent"); err != nil {
				return err
			}
			if watch == nil || acc.Duplicate || len(acc.Held) > 0 {
				return nil // nothing of this input's will come, or nothing now
			}
			return awaitStart(cmd.OutOrStdout(), watch, acc.ID, wait)
		},
	}
	cmd.Flags().StringVar(&agentName, "agent", "", "bind the session to this agent profile (docs/PROFILES.md)")
	cmd.Flags().DurationVar(&wait, "wait", 5*time.Second, "wait this long for the run the input starts (or the runner's refusal) and print it; 0: do not wait")
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

// awaitStart reads the session's stream until the runner answers input
// id: a run started with it, the live run took it, or it was refused (an
// error, so send exits non-zero with the reason). Nothing within wait is
// said as such, not an error: the input is stored and will be handled.
func awaitStart(w io.Writer, s *client.Stream, id string, wait time.Duration) error {
	for {
		ev, err := s.Next()
		if err != nil {
			_, werr := fmt.Fprintf(w, "no run started within %s (the session may be waiting for a runner, or its run for a person); follow it with: jetway chat or jetway history\n", wait)
			return werr
		}
		switch ev.Type {
		case events.TypeRunStarted:
			var st events.RunStarted
			if json.Unmarshal(ev.Data, &st) == nil && slices.Contains(st.Events, id) {
				_, err := fmt.Fprintln(w, events.RunStartedHeadline(st))
				return err
			}
		case events.TypeRunDelivered:
			var d events.RunDelivered
			if json.Unmarshal(ev.Data, &d) == nil && slices.Contains(d.Events, id) {
				_, err := fmt.Fprintf(w, "handed to the live run %s\n", d.Run)
				return err
			}
		case events.TypeRunRefused:
			var r events.RunRefused
			if json.Unmarshal(ev.Data, &r) == nil && r.Event == id {
				return fmt.Errorf("refused by the runner: %s", r.Reason)
			}
		}
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
