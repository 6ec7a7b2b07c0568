package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"jetway/pkg/auth"
	"jetway/pkg/client"
)

// agentsDispatcher serves a real dispatcher on a real JetStream server with
// a tenant user token and a tenant admin token; it returns its URL.
func agentsDispatcher(t *testing.T) string {
	t.Helper()
	url, _ := serveDispatcher(t, auth.Grant{Token: "jw_user", Tenant: "acme"}, auth.Grant{Token: "jw_admin", Tenant: "acme", Role: auth.RoleAdmin})
	return url
}

func TestAgents_put_from_a_YAML_file_then_ls_get_and_rm(t *testing.T) {
	url := agentsDispatcher(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "reviewer.yaml")
	if err := os.WriteFile(file, []byte("name: reviewer\ndescription: reviews\ninstructions: |\n  Review.\nlimits:\n  max_turns: 9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	as := func(token string, args ...string) []string { return append(args, "--url", url, "--token", token) }

	// A user token may read but not store.
	if out, err := runCLI(t, as("jw_user", "agents", "put", "-f", file)...); err == nil || !strings.Contains(err.Error()+out, "admin") {
		t.Fatalf("a user's put: %v\n%s", err, out)
	}
	out, err := runCLI(t, as("jw_admin", "agents", "put", "-f", file)...)
	if err != nil || !strings.Contains(out, "stored agent reviewer, version ") {
		t.Fatalf("put: %v\n%s", err, out)
	}
	out, err = runCLI(t, as("jw_user", "agents", "ls")...)
	if err != nil || !strings.Contains(out, "AGENT") || !strings.Contains(out, "default") || !strings.Contains(out, "reviewer") || !strings.Contains(out, "reviews") {
		t.Fatalf("ls: %v\n%s", err, out)
	}
	out, err = runCLI(t, as("jw_user", "agents", "get", "reviewer")...)
	if err != nil {
		t.Fatalf("get: %v\n%s", err, out)
	}
	// What get prints, put reads back.
	got, err := client.ParseAgentFile([]byte(out))
	if err != nil || got.Instructions != "Review.\n" || got.Limits.MaxTurns != 9 {
		t.Fatalf("get printed %s (%v)", out, err)
	}
	var raw map[string]any
	if json.Unmarshal([]byte(out), &raw) != nil || raw["version"] == nil {
		t.Fatalf("get is not the profile as JSON with its version:\n%s", out)
	}

	// A wrong field is refused naming it, and nothing changes.
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("instructions: x\nlimits:\n  max_duration: soon\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, as("jw_admin", "agents", "put", "-f", bad, "reviewer")...); err == nil || !strings.Contains(err.Error(), "limits.max_duration") {
		t.Fatalf("a bad put: %v\n%s", err, out)
	}
	if out, err := runCLI(t, as("jw_admin", "agents", "put", "-f", file, "other")...); err == nil || !strings.Contains(err.Error(), "reviewer") {
		t.Fatalf("a file naming another agent than the command line: %v\n%s", err, out)
	}

	out, err = runCLI(t, as("jw_admin", "agents", "rm", "reviewer")...)
	if err != nil || !strings.Contains(out, "deleted agent reviewer") {
		t.Fatalf("rm: %v\n%s", err, out)
	}
	if out, err := runCLI(t, as("jw_user", "agents", "get", "reviewer")...); err == nil || !strings.Contains(err.Error(), "reviewer") {
		t.Fatalf("get after rm: %v\n%s", err, out)
	}
}

func TestDev_binds_a_session_to_the_agent_its_input_or_steer_names_and_refuses_an_unknown_one(t *testing.T) {
	d := startDev(t)
	cf := []string{"--url", d.url, "--tokens-file", d.tokens}
	file := filepath.Join(t.TempDir(), "reviewer.yaml")
	if err := os.WriteFile(file, []byte("name: reviewer\ninstructions: Review the change.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, append([]string{"agents", "put", "-f", file}, cf...)...); err != nil {
		t.Fatalf("agents put with the dev admin token: %v\n%s", err, out)
	}
	if out, err := runCLI(t, append([]string{"send", "s1", "build the project", "--agent", "nobody"}, cf...)...); err == nil || !strings.Contains(err.Error(), "nobody") {
		t.Fatalf("send --agent nobody: %v\n%s", err, out)
	}
	if out, err := runCLI(t, append([]string{"send", "s1", "build the project", "--agent", "reviewer"}, cf...)...); err != nil {
		t.Fatalf("send --agent reviewer: %v\n%s", err, out)
	}
	bound := regexp.MustCompile(`"agent":\s*"reviewer",\s*"agent_version":\s*[1-9]`)
	waitCLI(t, "the session bound to reviewer", bound.MatchString, append([]string{"sessions", "--json"}, cf...)...)

	// A steer binds as send does, and refuses an unknown profile the same way.
	if out, err := runCLI(t, append([]string{"steer", "s1", "look again", "--agent", "nobody"}, cf...)...); err == nil || !strings.Contains(err.Error(), "nobody") {
		t.Fatalf("steer --agent nobody: %v\n%s", err, out)
	}
	writer := filepath.Join(t.TempDir(), "writer.yaml")
	if err := os.WriteFile(writer, []byte("name: writer\ninstructions: Write it up.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, append([]string{"agents", "put", "-f", writer}, cf...)...); err != nil {
		t.Fatalf("agents put writer: %v\n%s", err, out)
	}
	if out, err := runCLI(t, append([]string{"steer", "s1", "write it up instead", "--agent", "writer"}, cf...)...); err != nil {
		t.Fatalf("steer --agent writer: %v\n%s", err, out)
	}
	rebound := regexp.MustCompile(`"agent":\s*"writer",\s*"agent_version":\s*[1-9]`)
	waitCLI(t, "the session bound to writer by the steer", rebound.MatchString, append([]string{"sessions", "--json"}, cf...)...)
}

func TestChat_agent_flag_asks_for_that_profile_and_an_unknown_one_is_refused_naming_it(t *testing.T) {
	url := agentsDispatcher(t)
	out, _ := runCLIWithInput(t, "hello\n", "chat", "--url", url, "--token", "jw_user", "--no-wait", "--agent", "nosuch", "s1")
	if !strings.Contains(out, `nosuch`) {
		t.Fatalf("a line typed with --agent nosuch was not refused naming it:\n%s", out)
	}
}

func TestSend_is_refused_at_once_when_no_runner_serves_the_agents_model_and_prints_the_run_or_the_runners_refusal(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "")
	d := startDev(t)
	cf := []string{"--url", d.url, "--tokens-file", d.tokens}
	dir := t.TempDir()
	put := func(name, yaml string) {
		t.Helper()
		file := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := runCLI(t, append([]string{"agents", "put", "-f", file}, cf...)...); err != nil {
			t.Fatalf("agents put %s: %v\n%s", name, err, out)
		}
	}
	put("reviewer", "name: reviewer\ninstructions: Review.\nmodel:\n  provider: anthropic\n  name: claude-x\n")
	put("once", "name: once\ninstructions: Do it.\nlimits:\n  runs_per_hour: 1\n")

	// The dispatcher knows no runner has a key for the model: the send
	// fails, saying why and what to set, and stores nothing.
	out, err := runCLI(t, append([]string{"send", "s1", "review", "--agent", "reviewer"}, cf...)...)
	if err == nil {
		t.Fatalf("send --agent reviewer with no runner serving anthropic succeeded:\n%s", out)
	}
	for _, want := range []string{"reviewer", "anthropic claude-x", "ANTHROPIC_API_KEY"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if strings.Contains(out, "sent") {
		t.Errorf("a refused send printed %q", out)
	}

	// What only the runner knows comes back on the stream: the run it
	// started, then the refusal of a second run over the profile's cap.
	out, err = runCLI(t, append([]string{"send", "s2", "first", "--agent", "once", "--wait", "30s"}, cf...)...)
	if err != nil || !regexp.MustCompile(`(?m)^run \S+ started \(dispatch\) · agent once v\d+`).MatchString(out) {
		t.Fatalf("first send did not print its run's start: %v\n%s", err, out)
	}
	waitCLI(t, "s2 idle", func(s string) bool { return regexp.MustCompile(`(?m)^s2\s+idle`).MatchString(s) }, append([]string{"sessions"}, cf...)...)
	out, err = runCLI(t, append([]string{"send", "s2", "second", "--wait", "30s"}, cf...)...)
	if err == nil || !strings.Contains(err.Error(), "refused by the runner: run cap") || !strings.Contains(out, "sent ") {
		t.Fatalf("second send over the run cap: %v\n%s", err, out)
	}
}
