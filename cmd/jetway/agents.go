package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"jetway/pkg/client"
)

func init() { addCommand(newAgentsCmd) }

func newAgentsCmd(*globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "List, show, store and delete the tenant's agent profiles",
		Long: `agents manages agent profiles: what a session's agent is for (its
instructions, the system prompt), which model answers it, which tools it may
use and its limits. "default" always exists. Storing and deleting need an
admin token. docs/PROFILES.md describes the file format.`,
		Example: `  jetway agents ls
  jetway agents get reviewer
  jetway agents put -f reviewer.yaml
  jetway agents rm reviewer`,
	}
	cmd.AddCommand(newAgentsLsCmd(), newAgentsGetCmd(), newAgentsPutCmd(), newAgentsRmCmd())
	return cmd
}

func newAgentsLsCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the tenant's agent profiles",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			list, err := c.Agents(cmd.Context())
			if err != nil {
				return err
			}
			if cf.json {
				return printJSON(cmd.OutOrStdout(), list)
			}
			return writeAgents(cmd.OutOrStdout(), list)
		},
	}
	cf.register(cmd, true)
	return cmd
}

// writeAgents prints profiles as a table: name, version, model, description.
func writeAgents(w io.Writer, list []client.Agent) error {
	// tw keeps the table until Flush, which returns a failed write.
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "AGENT\tVERSION\tMODEL\tDESCRIPTION")
	for _, a := range list {
		version := fmt.Sprint(a.Version)
		if a.Version == 0 {
			version = "implicit"
		}
		model := a.Model.Provider
		if a.Model.Name != "" {
			model += " " + a.Model.Name
		}
		if model == "" {
			model = "runner's default"
		}
		desc := a.Description
		if desc == "" {
			desc = "-"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Name, version, model, desc)
	}
	return tw.Flush()
}

func newAgentsGetCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Print an agent profile as JSON (a file agents put reads back)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(false)
			if err != nil {
				return err
			}
			a, err := c.Agent(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), a)
		},
	}
	cf.register(cmd, false)
	return cmd
}

func newAgentsPutCmd() *cobra.Command {
	var cf clientFlags
	var file string
	cmd := &cobra.Command{
		Use:   "put -f FILE [NAME]",
		Short: "Store an agent profile from a YAML or JSON file (a new version)",
		Long: `put stores the profile in FILE ("-": standard input), YAML or JSON, under
NAME or the file's "name". It needs an admin token. A field the profile does
not have, or a wrong value, is refused naming the field; nothing is stored
then. The new version applies from the next run of each session bound to it.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := readAgentFile(cmd, file)
			if err != nil {
				return err
			}
			name := a.Name
			if len(args) == 1 {
				if name != "" && name != args[0] {
					return fmt.Errorf("%s names the agent %q, the command line %q: drop one", file, name, args[0])
				}
				name = args[0]
			}
			if name == "" {
				return fmt.Errorf(`%s has no "name": give one in the file or as NAME`, file)
			}
			c, err := cf.client(true)
			if err != nil {
				return err
			}
			stored, err := c.PutAgent(cmd.Context(), name, a)
			if err != nil {
				return err
			}
			if cf.json {
				return printJSON(cmd.OutOrStdout(), stored)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "stored agent %s, version %d\n", stored.Name, stored.Version)
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `the profile file, YAML or JSON ("-": standard input)`)
	_ = cmd.MarkFlagRequired("file")
	cf.register(cmd, true)
	return cmd
}

func readAgentFile(cmd *cobra.Command, file string) (client.Agent, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(cmd.InOrStdin())
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return client.Agent{}, fmt.Errorf("read agent file: %w", err)
	}
	a, err := client.ParseAgentFile(data)
	if err != nil {
		return client.Agent{}, fmt.Errorf("%s: %w", file, err)
	}
	return a, nil
}

func newAgentsRmCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Delete an agent profile (runs that use it keep their version)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(true)
			if err != nil {
				return err
			}
			ok, err := c.DeleteAgent(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			msg := "deleted agent " + args[0]
			if !ok {
				msg = "no agent " + args[0] + " to delete"
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), msg)
			return err
		},
	}
	cf.register(cmd, false)
	return cmd
}
