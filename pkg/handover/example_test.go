package handover_test

import (
	"errors"
	"fmt"

	"jetway/pkg/handover"
)

// A runner finds another runner's heartbeat stale, has the jobs service
// confirm the old run's commands are gone, and restarts the work.
func ExampleAuthorizeRecovery() {
	settings := handover.DefaultRecoverySettings()
	lost := handover.Interruption{Kind: handover.LostContact}
	var attempts handover.Attempts // from the session record

	err := settings.Authorize(lost, handover.ChildUnknown, attempts)
	fmt.Println("before checking:", err)

	if err := settings.Authorize(lost, handover.ChildGone, attempts); err != nil {
		return
	}
	recovery, attempts := attempts.Restart("run_01ABC", lost)
	fmt.Println("restarts stored:", attempts.Restarts)

	h := handover.Recovered(recovery, "implement the retry policy").WithToolCalls(
		handover.ToolCall{Name: "bash", Input: "git push"},
	)
	fmt.Print(h.Brief())

	denied := handover.AuthorizeRecovery(handover.Manual, handover.Interruption{Kind: handover.Timeout}, handover.ChildGone, 0, 3)
	fmt.Println(errors.Is(denied, handover.ErrNeedsAHuman), denied)
	// Output:
	// before checking: the previous run's process has not been confirmed gone
	// restarts stored: 1
	// ## You are continuing interrupted work
	//
	// A previous run (run_01ABC) started this work and did not finish: contact with its runner was lost. This is attempt 2.
	//
	// You are a new process and remember none of it. Before repeating anything that changes the world — a commit, a comment, a published pull request — check whether the earlier run already did it. Doing it twice is worse than doing it late.
	//
	// What the earlier run recorded, oldest first:
	//
	// - bash(git push) → the run was interrupted before this call's result was recorded; it is unknown whether the call completed
	//
	// That list is what it managed to write down, not necessarily everything it did.
	// true this agent's `recovery` policy is `manual`; a human decides
}
