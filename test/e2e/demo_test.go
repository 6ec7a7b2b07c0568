package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"jetway/pkg/client"
	"jetway/pkg/events"
)

// demoTimeout bounds the whole demo: a 3 s background build and two runs.
const demoTimeout = 60 * time.Second

// demoModel is how the built-in demo script names itself.
const demoModel = "script demo.json (deterministic, no model)"

// jobExitHeadline is the demo build's headline, e.g. `job 1 (sh) exited 0 after 3s`.
var jobExitHeadline = regexp.MustCompile(`^job 1 \(\S+\) exited 0 after \d+s$`)

// TestDemo_build_the_project_is_reported_when_the_background_job_exits is
// what `make run` shows without a key: the agent starts the build as a
// background job, ends its turn, and the job's exit wakes the session to
// report it — the person reads the headline and the report.
func TestDemo_build_the_project_is_reported_when_the_background_job_exits(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	if model := d.line(t, "model: "); model != demoModel {
		t.Fatalf("model line %q, want %q", model, demoModel)
	}
	// The demo's first run starts the build with a shell tool: a runner
	// without one fails here, not at the first run's text.
	if tools := d.line(t, "tools: "); !strings.Contains(tools, "shell") {
		t.Fatalf("tools line %q: the demo's build needs the shell tool", tools)
	}
	s := follow(t, d.client(t), "demo", client.StreamOptions{})
	first, _, firstText := s.runFor(t, d.input(t, "demo", "build the project"))
	if !strings.Contains(firstText, "I'll start the build in the background") {
		t.Errorf("the first run says %q", firstText)
	}

	var note events.HeadlineNote
	s.until(t, demoTimeout, "the background build's exit headline", func(evs []client.Event) bool {
		for _, e := range evs {
			if e.Type == events.TypeHeadline && json.Unmarshal(e.Data, &note) == nil && jobExitHeadline.MatchString(note.Text) {
				return true
			}
		}
		return false
	})
	if note.About != events.TypeJobExited || note.Event == "" {
		t.Fatalf("headline %+v is not about a job exit event", note)
	}
	report, end, reportText := s.runFor(t, note.Event)
	if report.Run == first.Run {
		t.Errorf("the report came in the first run %s; the job's exit should wake a new one", first.Run)
	}
	want := "The background build has finished: " + note.Text + ". Its last output line was \"build ok\"."
	if reportText != want || end.Reason != "completed" {
		t.Errorf("the report run ended %+v saying %q, want %q", end, reportText, want)
	}
}

// TestMake_run_starts_the_stack_opens_a_chat_and_stops_the_stack_when_the_chat_ends
// runs scripts/run.sh (what `make run` runs after building) in a real
// terminal on free ports, attaches a second chat the way its banner says,
// and leaves: the dev process must be stopped cleanly.
func TestMake_run_starts_the_stack_opens_a_chat_and_stops_the_stack_when_the_chat_ends(t *testing.T) {
	t.Parallel()
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, ".jetway")
	cmd := exec.Command(script)
	cmd.Dir = dir
	cmd.Env = cleanEnv("JETWAY_BIN="+jetwayBinary(t), "JETWAY_DATA="+data,
		"JETWAY_HTTP=127.0.0.1:0", "JETWAY_NATS=127.0.0.1:0", "TERM=xterm")
	term := startTerminal(t, cmd)
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(data, "jetway.log"))
			t.Logf("jetway.log:\n%s", log)
		}
	})

	out := term.shows(t, startTimeout, "demo> ")
	for _, want := range []string{"model: " + demoModel, "type:  build the project", "more terminals: ", "jetway chat with demo"} {
		if !strings.Contains(out, want) {
			t.Errorf("the banner lacks %q", want)
		}
	}
	m := regexp.MustCompile(`more terminals: (\S+ chat demo [^\r\n]*)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no attach command in the banner")
	}

	// A second terminal, as the banner says, in line mode: its input starts
	// the demo, which the first terminal shows too.
	args := strings.Fields(m[1])
	if args[0] != jetwayBinary(t) {
		t.Fatalf("attach command %q does not run the binary make built", m[1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	second := exec.CommandContext(ctx, args[0], append(args[1:], "--wait", "30s")...)
	second.Dir = dir
	second.Env = cleanEnv()
	second.Stdin = strings.NewReader("build the project\n")
	secondOut, err := second.CombinedOutput()
	if err != nil {
		t.Fatalf("second chat: %v\n%s", err, secondOut)
	}
	if !strings.Contains(string(secondOut), "I'll start the build in the background") {
		t.Errorf("the second chat did not show the run it started:\n%s", secondOut)
	}
	term.shows(t, runTimeout, "I'll start the build in the background")

	// A second make run on the same data directory, whatever ports it is
	// given, attaches to the running dev instead of starting another on
	// the same store.
	again := exec.CommandContext(ctx, script)
	again.Dir = dir
	again.Env = cleanEnv("JETWAY_BIN="+jetwayBinary(t), "JETWAY_DATA="+data,
		"JETWAY_HTTP=127.0.0.1:0", "JETWAY_NATS=127.0.0.1:0")
	again.Stdin = strings.NewReader("/quit\n")
	againOut, err := again.CombinedOutput()
	if err != nil || !strings.Contains(string(againOut), "jetway is already running at http://127.0.0.1:") ||
		strings.Contains(string(againOut), "starting jetway dev") {
		t.Errorf("a second run.sh on the same data directory did not attach (%v):\n%s", err, againOut)
	}

	term.typeIn(t, "/quit\r")
	if err := term.exit(t, stopTimeout); err != nil {
		t.Fatalf("run.sh exited with %v after /quit", err)
	}
	term.shows(t, stopTimeout, "jetway dev stopped")
	log, err := os.ReadFile(filepath.Join(data, "jetway.log"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(string(log), "\n"); !slices.Contains(lines, "nats-server stopped") {
		t.Errorf("jetway dev did not shut down cleanly; its log ends:\n%s", strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
}
