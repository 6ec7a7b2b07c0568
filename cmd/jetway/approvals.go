package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"jetway/pkg/client"
	"jetway/pkg/events"
)

// The approvals commands are a person in the loop from the terminal
// (docs/APPROVALS.md): see what sessions wait for, and decide it.

func init() {
	addCommand(newApprovalsCmd)
	addCommand(newApproveCmd)
	addCommand(newRejectCmd)
	addCommand(newAnswerCmd)
}

func newApprovalsCmd(*globals) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "approvals [SESSION]",
		Short: "List the tool calls and questions waiting for a person (all sessions without SESSION)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			session := ""
			if len(args) == 1 {
				session = args[0]
			}
			as, err := c.Approvals(cmd.Context(), session)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cf.json {
				return printJSON(out, as)
			}
			if len(as) == 0 {
				_, err = fmt.Fprintln(out, "nothing waits for a person")
				return err
			}
			for _, a := range as {
				printApproval(out, a)
			}
			return nil
		},
	}
	cf.register(cmd, true)
	return cmd
}

// printApproval prints one approval as a line a person decides from.
func printApproval(w io.Writer, a client.Approval) {
	what := a.Tool + " " + events.PlainJSON(a.Input)
	if a.Kind == "question" {
		what = fmt.Sprintf("asks %q", a.Question)
		if len(a.Choices) > 0 {
			what += " [" + strings.Join(a.Choices, " | ") + "]"
		}
	}
	// A terminal that stopped reading has nothing to be told.
	_, _ = fmt.Fprintf(w, "%s %s · %s · %s · expires in %s\n", a.Session, a.ID, a.State, what, time.Until(a.ExpiresAt).Round(time.Second))
}

func newApproveCmd(*globals) *cobra.Command {
	var cf clientFlags
	var input string
	cmd := &cobra.Command{
		Use:   "approve SESSION ID",
		Short: "Let a held tool call run (once), optionally with --input edited",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := client.DecisionRequest{Decision: "approve"}
			if input != "" {
				if !json.Valid([]byte(input)) {
					return fmt.Errorf("--input: not JSON: %s", input)
				}
				req.Input = json.RawMessage(input)
			}
			return decide(cmd, &cf, args[0], args[1], req)
		},
	}
	cmd.Flags().StringVar(&input, "input", "", "the call's input as JSON, replacing the model's (for example {\"command\":\"make deploy-staging\"})")
	cf.register(cmd, true)
	return cmd
}

func newRejectCmd(*globals) *cobra.Command {
	return newWordsCmd("reject SESSION ID [REASON...]", "Refuse a held tool call; the model reads REASON", 2,
		func(words string) client.DecisionRequest {
			return client.DecisionRequest{Decision: "reject", Reason: words}
		})
}

func newAnswerCmd(*globals) *cobra.Command {
	return newWordsCmd("answer SESSION ID ANSWER...", "Answer a question the model asked with ask_person", 3,
		func(words string) client.DecisionRequest {
			return client.DecisionRequest{Decision: "answer", Answer: words}
		})
}

// newWordsCmd is a decision whose text is the words after SESSION and ID.
func newWordsCmd(use, short string, minArgs int, req func(words string) client.DecisionRequest) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MinimumNArgs(minArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return decide(cmd, &cf, args[0], args[1], req(strings.Join(args[2:], " ")))
		},
	}
	cf.register(cmd, true)
	return cmd
}

// decide sends a decision and prints what it became; a decision someone
// took first is reported with theirs.
func decide(cmd *cobra.Command, cf *clientFlags, session, id string, req client.DecisionRequest) error {
	c, err := cf.client(false)
	if err != nil {
		return err
	}
	a, err := c.Decide(cmd.Context(), session, id, req)
	var apiErr *client.APIError
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict && apiErr.Problem.Approval != nil {
		first := apiErr.Problem.Approval
		by := ""
		if first.Decision != nil {
			by = " by " + first.Decision.By
		}
		return fmt.Errorf("%s was already decided%s: %s", id, by, first.State)
	}
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if cf.json {
		return printJSON(out, a)
	}
	_, err = fmt.Fprintf(out, "%s %s: %s\n", session, id, a.State)
	return err
}
