package handover

import "strings"

// UnfinishedCallResult is what is said about a tool call that was recorded
// without its result. The runner records it as that call's result when it
// recovers — so every provider accepts the history — and the brief says the
// same, so the model knows to check before it repeats the call.
const UnfinishedCallResult = "the run was interrupted before this call's result was recorded; " +
	"it is unknown whether the call completed"

// HandedOffResult opens the result of a foreground command whose run was
// interrupted (a steer, the run's end) while it waited: the command was
// handed to the background, and the rest of the result names its job — so
// a brief that lists the call (its first characters) names the job too.
const HandedOffResult = "interrupted: the run stopped waiting for this command"

// Line lengths, in characters. A brief with one line per call stays readable
// only if no single call can take over the page.
const (
	maxInputChars  = 120
	maxResultChars = 200
)

// ToolCall is one tool call an earlier run made, as the runner reads it back
// from the transcript to build the handover's progress.
type ToolCall struct {
	// Name is the tool's name.
	Name string `json:"name"`
	// Input is the call's arguments as text, typically their JSON.
	Input string `json:"input,omitempty"`
	// Result is the call's result as text.
	Result string `json:"result,omitempty"`
	// IsError is set when the tool reported failure.
	IsError bool `json:"is_error,omitempty"`
	// Finished is set when the result was recorded. The zero value means it
	// was not, which is the cautious reading of a call nobody saw end.
	Finished bool `json:"finished"`
}

// Line is the call on one line: name, arguments and result, each cut short,
// e.g. `bash({"command":"go test ./..."}) → ok`.
func (c ToolCall) Line() string {
	var b strings.Builder
	b.WriteString(oneLine(c.Name))
	b.WriteString("(")
	b.WriteString(shorten(oneLine(c.Input), maxInputChars))
	b.WriteString(") → ")
	switch {
	case !c.Finished:
		b.WriteString(UnfinishedCallResult)
	case c.IsError:
		b.WriteString("error: ")
		b.WriteString(orNoOutput(shorten(oneLine(c.Result), maxResultChars)))
	default:
		b.WriteString(orNoOutput(shorten(oneLine(c.Result), maxResultChars)))
	}
	return b.String()
}

func orNoOutput(s string) string {
	if s == "" {
		return "(no output)"
	}
	return s
}

// shorten cuts s to at most n characters, marking the cut with an ellipsis.
// It counts runes, not bytes, so it never splits a character in two.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
