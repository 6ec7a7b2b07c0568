// Package agent is the agent loop: stream a completion, surface
// its text, thinking and tool calls as events, run the tools through a
// streaming executor, and take another turn — recovering from output-cap
// truncation and context overflow, delivering host notices and reminders
// before every model call, gating the end of the run with Stop hooks and a
// token budget, and stopping at turn and time budgets with an optional
// wrap-up. It is exposed as a range-over-func iterator of Events.
//
// The loop keeps the runner's invariants (docs/ARCHITECTURE.md): every message it makes
// is told to the Recorder before anything acts on it (a refused record ends
// the run at once), the history is append-only and every request is a pure
// view of it, and a tool call never stays without its result.
//
// # One turn
//
// Before each model call the loop checks the turn and time budgets (and
// starts the Settlement wrap-up if one is hit), appends the notice turn and a
// todo reminder if due, and lets the Compactor fold the history. The request
// is a view of the history (ContextView or llm.MessagesForAPI) with the
// SystemReminder put first (llm.WithReminder); the provider makes it the
// turns its API takes (llm.Wire). While the answer streams, each complete
// tool call goes to the executor: read-only calls start at once, the
// others wait until the assistant message is recorded. Results come back
// in call order, each emitted whole (with its call's name and arguments,
// so no reader pairs them again), and are recorded as one user turn. A turn without tool calls ends the run
// unless a notice is pending, a Stop hook blocks, or the token budget asks
// for more.
//
// # What a loop run by a distributed host needs, and why
//
//   - Recorder.RecordMessage returns an error, and a refused record ends the
//     run at once with ReasonRecordFailed: a runner's fenced transcript append
//     is how it learns it lost the session, and it must not act after that.
//   - A compaction appends two records (a boundary naming, by index, the
//     first earlier message the view keeps, and the summary) instead of
//     returning a rewritten history, so the recorded transcript alone
//     rebuilds every later request; both go through RecordMessage, and
//     RecordBoundary still reports the compaction. Compactor.Pre and Reactive
//     return those records (Reactive is told its attempt number so it can
//     fold harder each time).
//   - Host notices come from QueryInput.Notices (a guide.NoticeGuide) rather
//     than a task manager: jetway's jobs run in another service and their
//     events arrive through JetStream. The notice turn records the CloudEvent
//     ids it carries in Message.Delivers, which is what a runner acks.
//   - HookRunner.PostToolUse can stop the run (ReasonHookStopped), as can a
//     tool through tool.Result.Stop.
//   - QueryDeps.Now is the clock for MaxDuration, so budgets are tested
//     without waiting.
//   - The iterator's error is always nil; failures are in Terminal.Err, so a
//     consumer that skips pairs with an error still sees the terminal event.
//   - A tool may return images (tool.Result.Images); they travel in its
//     tool_result. When the provider refuses an image — its check before
//     sending, or the API's 400 — the run ends with ReasonImageError rather
//     than ReasonModelError, since retrying the same request cannot help;
//     the results are recorded before the call, so no tool call is left
//     without its result. The loop then records an llm.ImageRefusal turn:
//     the history is append-only, so the refused image stays in it, and
//     without that record every later request of the session would be
//     refused again; with it the request view shows the earlier images as
//     notes and the model reads why.
package agent
