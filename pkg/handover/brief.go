package handover

import (
	"fmt"
	"strings"
	"time"
)

// Handover is everything a new run is told about the run it takes over from.
type Handover struct {
	// Cause is why this run is starting.
	Cause Cause `json:"cause"`
	// Inputs are what the earlier run was given, which this one receives
	// again: the new run remembers nothing, so it needs the work itself, not
	// a note that some work existed.
	Inputs []string `json:"inputs,omitempty"`
	// Progress is what the earlier run had done before it stopped, oldest
	// first, one line each — typically its tool calls and their results, read
	// back from the transcript (see [ToolCall]). Never a promise that the list
	// is complete: an interrupted run stops mid-sentence by definition.
	Progress []string `json:"progress,omitempty"`
	// Children are sub-agents the earlier work started that are still at
	// work: their answers are still to come.
	Children []Child `json:"children,omitempty"`
}

// Child is a sub-agent still at work when the run it belongs to was
// interrupted. Waited says the interrupted run was waiting for its answer
// in the foreground when it stopped (so it never got it).
//
// Finished marks a child of the interrupted run that has already ended:
// its answer may have reached that run, or may have been lost with it.
type Child struct {
	Number   int    `json:"number"`
	Agent    string `json:"agent"`
	Session  string `json:"session"`
	State    string `json:"state"`
	Waited   bool   `json:"waited,omitempty"`
	Finished bool   `json:"finished,omitempty"`
}

// WithChildren returns h with the sub-agents still at work.
func (h Handover) WithChildren(children ...Child) Handover {
	h.Children = children
	return h
}

// Dispatch is an ordinary first run, taking over from nothing.
func Dispatch(inputs ...string) Handover {
	return Handover{Cause: Cause{Kind: CauseDispatch}, Inputs: inputs}
}

// Recovered is a restart of interrupted work.
func Recovered(r Recovery, inputs ...string) Handover {
	return Handover{Cause: Cause{Kind: CauseRecovered, Recovery: &r}, Inputs: inputs}
}

// Steered is a redirection of work already under way.
func Steered(s Steer, inputs ...string) Handover {
	return Handover{Cause: Cause{Kind: CauseSteered, Steer: &s}, Inputs: inputs}
}

// Resumed is work an earlier chain set down deliberately, picked up again.
func Resumed(r Resumption, inputs ...string) Handover {
	return Handover{Cause: Cause{Kind: CauseResumed, Resumption: &r}, Inputs: inputs}
}

// WithProgress returns h with progress as what the earlier run had recorded,
// oldest first.
func (h Handover) WithProgress(progress ...string) Handover {
	h.Progress = progress
	return h
}

// WithToolCalls returns h with the one-line account of each call added to its
// progress, oldest first.
func (h Handover) WithToolCalls(calls ...ToolCall) Handover {
	progress := make([]string, 0, len(h.Progress)+len(calls))
	progress = append(progress, h.Progress...)
	for _, c := range calls {
		progress = append(progress, c.Line())
	}
	h.Progress = progress
	return h
}

// Brief renders the block telling this run what it is taking over. It belongs
// immediately above the inputs, so that "you are continuing work that did not
// finish" reads next to what the work is; [Handover.Compose] places it there.
//
// Empty for an ordinary dispatch: a first run is taking over nothing, and a
// paragraph explaining that would be noise in every prompt.
func (h Handover) Brief() string {
	var b strings.Builder

	switch h.Cause.Kind {
	case CauseRecovered:
		r := deref(h.Cause.Recovery)
		b.WriteString("## You are continuing interrupted work\n\n")
		fmt.Fprintf(&b, "A previous run (%s) started this work and did not finish: %s. This is attempt %d.\n\n",
			r.Previous, r.Interruption, r.Attempt)
		b.WriteString("You are a new process and remember none of it. Before repeating anything that changes " +
			"the world — a commit, a comment, a published pull request — check whether the earlier run " +
			"already did it. Doing it twice is worse than doing it late.\n\n")
	case CauseSteered:
		s := deref(h.Cause.Steer)
		b.WriteString("## A human has redirected this work\n\n")
		fmt.Fprintf(&b, "A previous run (%s) was working on this. Their instruction takes precedence over the "+
			"original request where the two disagree:\n\n", s.Previous)
		b.WriteString(quote(s.Note))
		b.WriteString("\n\n")
	case CauseResumed:
		r := deref(h.Cause.Resumption)
		b.WriteString("## You are picking up work that was set down\n\n")
		fmt.Fprintf(&b, "An earlier chain (%s) finished what it could and chose to come back to this later. "+
			"It was waiting for: %s\n\n", r.BookedBy, strings.TrimSpace(r.WaitingFor))
		fmt.Fprintf(&b, "It was set down at %s, and this is check %d.\n\n",
			r.BookedAt.UTC().Format(time.RFC3339), max(r.Checks, 0)+1)
		b.WriteString("Nothing was left half-done: the earlier run ended cleanly. Your job is to see whether " +
			"the thing it was waiting for has happened, and to act on it if it has. If it has not, set the " +
			"work down again rather than waiting.\n\n")
	default:
		return ""
	}

	writeChildren(&b, h.Children)

	// Only said when the earlier run may have stopped mid-sentence. A resumed
	// layover ended on purpose, so warning that it might have got "anywhere
	// from nowhere to almost finished" would send this run looking for damage
	// that was never done.
	if len(h.Progress) == 0 {
		if h.Cause.RepeatsEarlierWork() {
			b.WriteString("Nothing was recorded about what the earlier run had done, so assume it may have " +
				"got anywhere from nowhere to almost finished.\n")
		}
		return b.String()
	}
	b.WriteString("What the earlier run recorded, oldest first:\n\n")
	for _, note := range h.Progress {
		fmt.Fprintf(&b, "- %s\n", oneLine(note))
	}
	b.WriteString("\nThat list is what it managed to write down, not necessarily everything it did.\n")
	return b.String()
}

// writeChildren lists the sub-agents still at work and how their answers
// arrive, so the new run neither starts them again nor waits for nothing;
// and the interrupted run's children that have finished, whose answers it
// may never have read.
func writeChildren(b *strings.Builder, children []Child) {
	var working, finished []Child
	for _, c := range children {
		if c.Finished {
			finished = append(finished, c)
		} else {
			working = append(working, c)
		}
	}
	if len(working) > 0 {
		b.WriteString("Sub-agents the earlier work started are still at work:\n\n")
		for _, c := range working {
			fmt.Fprintf(b, "- agent %d (%s), session %s: %s", c.Number, c.Agent, c.Session, c.State)
			if c.Waited {
				b.WriteString("; the earlier run was waiting for its answer when it stopped and did not get it")
			} else {
				b.WriteString("; it was working in the background")
			}
			b.WriteString("\n")
		}
		b.WriteString("\nEach one's answer arrives as a notice when it finishes. Do not start them again: " +
			"follow them with agent_status, and stop one with agent_stop if it is no longer needed.\n\n")
	}
	if len(finished) > 0 {
		b.WriteString("Sub-agents the interrupted run started have finished; their answers may not have reached it:\n\n")
		for _, c := range finished {
			fmt.Fprintf(b, "- agent %d (%s), session %s: %s; read its answer with agent_status {\"agent\": %d}\n",
				c.Number, c.Agent, c.Session, c.State, c.Number)
		}
		b.WriteString("\n")
	}
}

// Compose renders the new run's opening message: the brief, then the inputs
// it is given again. With a brief, the inputs sit under a heading of their own
// so that "the original request" the brief speaks of is plain to find; a
// dispatch is its inputs alone.
func (h Handover) Compose() string {
	inputs := strings.Join(h.Inputs, "\n\n")
	brief := h.Brief()
	if brief == "" {
		return inputs
	}
	return brief + "\n## The original request\n\n" + inputs
}

// quote renders text as a Markdown block quote. Every line is quoted, so a
// note of several lines stays one instruction rather than spilling out of the
// quote after its first line.
func quote(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for i, line := range lines {
		line = strings.TrimRight(line, " \t\r")
		if line == "" {
			lines[i] = ">"
		} else {
			lines[i] = "> " + line
		}
	}
	return strings.Join(lines, "\n")
}

// oneLine folds text onto one line, because a list item that breaks across
// lines stops being one item.
func oneLine(text string) string {
	return strings.Join(strings.Fields(text), " ")
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
