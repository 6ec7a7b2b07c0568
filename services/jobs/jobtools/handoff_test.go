package jobtools_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/agent/tool"
	"jetway/pkg/handover"
	"jetway/pkg/llm"
)

// shellInterrupted runs a foreground shell call through an executor, as
// the agent loop does, waits until the command runs, cancels the run's
// context with cause, and returns the call's recorded result.
func shellInterrupted(t *testing.T, reg *tool.Registry, root, command string, cause error) llm.ContentBlock {
	t.Helper()
	ctx, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	ex := tool.NewExecutor(ctx, tool.ExecutorConfig{Registry: reg})
	defer ex.Discard()
	in, _ := json.Marshal(map[string]any{"command": command, "timeout": 600})
	ex.Add(llm.ContentBlock{Type: llm.BlockToolUse, ID: "c1", Name: "shell", Input: in})
	ex.Release()
	ws := filepath.Join(root, "acme", "s1")
	testutil.Eventually(t, 15*time.Second, "the command to run", func() bool {
		_, err := os.Stat(filepath.Join(ws, "running"))
		return err == nil
	})
	stop(cause)
	for {
		u, more := ex.Next()
		if !more {
			t.Fatal("the call gave no result")
		}
		if u.Outcome != nil {
			return u.Outcome.Block
		}
	}
}

// A foreground command whose run is interrupted by a steer or the run's
// end (the run's context cancelled plainly) is handed to the background:
// the call's result says so and names the job, the recovering or steered
// run's brief finds it by its opening, and the command's exit comes as an
// ordinary job whose status and output the model can read.
func TestA_foreground_command_interrupted_by_a_steer_goes_on_as_a_background_job(t *testing.T) {
	reg, cli, root := setupRoot(t)
	res := shellInterrupted(t, reg, root, "touch running; while [ ! -e gate ]; do sleep 0.01; done; echo finished", context.Canceled)
	if res.IsError || !strings.HasPrefix(res.Content, handover.HandedOffResult+": it goes on in the background as job 1.") {
		t.Fatalf("result = %+v", res)
	}
	if st, err := cli.ChildState(context.Background(), "acme", "s1", "r1"); err != nil || st != handover.ChildGone {
		t.Errorf("child state after the hand-off = %v, %v; a background job is no run's foreground child", st, err)
	}
	if err := os.WriteFile(filepath.Join(root, "acme", "s1", "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	st := call(t, reg, "shell_job_status", map[string]any{"id": 1, "wait": 15})
	if !strings.HasPrefix(st.Content, "t1 exited (exit 0)") || !strings.Contains(st.Content, "finished") {
		t.Errorf("status of the handed-off job = %q", st.Content)
	}
}

// Ground Stop is not a hand-off: the jobs worker kills the session's
// commands on the switch, and the call reads what the cancellation says
// (tool.CancelCause), not that a command goes on.
func TestA_foreground_command_cut_off_by_Ground_Stop_is_not_handed_off(t *testing.T) {
	reg, cli, root := setupRoot(t)
	cause := tool.CancelCause("cancelled by Ground Stop")
	res := shellInterrupted(t, reg, root, "touch running; sleep 100", cause)
	if res.Content != string(cause) {
		t.Fatalf("result = %+v, want the Ground Stop text", res)
	}
	if st, err := cli.ChildState(context.Background(), "acme", "s1", "r1"); err != nil || st != handover.ChildAlive {
		t.Errorf("child state = %v, %v; the command stays the run's, for the kill", st, err)
	}
}
