package handover

import (
	"strings"
	"testing"
	"time"
)

var bookedAt = time.Date(2026, 11, 30, 9, 15, 0, 0, time.UTC)

func resumption(checks int) Resumption {
	return Resumption{
		BookedBy:   "itn_01QRS",
		WaitingFor: "  CI on pull request 42 to finish  ",
		BookedAt:   bookedAt,
		Checks:     checks,
	}
}

func TestBrief_of_a_recovered_run_is_exactly_the_seed_text(t *testing.T) {
	got := Recovered(Recovery{Previous: "run_01ABC", Interruption: Interruption{Kind: LostContact}, Attempt: 3}, workItem).
		WithProgress("Read the work item").
		Brief()
	want := "## You are continuing interrupted work\n\n" +
		"A previous run (run_01ABC) started this work and did not finish: contact with its runner was lost. " +
		"This is attempt 3.\n\n" +
		"You are a new process and remember none of it. Before repeating anything that changes the world — " +
		"a commit, a comment, a published pull request — check whether the earlier run already did it. " +
		"Doing it twice is worse than doing it late.\n\n" +
		"What the earlier run recorded, oldest first:\n\n" +
		"- Read the work item\n" +
		"\nThat list is what it managed to write down, not necessarily everything it did.\n"
	if got != want {
		t.Errorf("brief:\n%s\nwant:\n%s", got, want)
	}
}

func TestBrief_of_a_steered_run_is_exactly_the_seed_text(t *testing.T) {
	got := Steered(Steer{Previous: "run_01XYZ", Note: " Use the existing helper. ", At: bookedAt}, workItem).Brief()
	want := "## A human has redirected this work\n\n" +
		"A previous run (run_01XYZ) was working on this. Their instruction takes precedence over the " +
		"original request where the two disagree:\n\n" +
		"> Use the existing helper.\n\n" +
		"Nothing was recorded about what the earlier run had done, so assume it may have got anywhere " +
		"from nowhere to almost finished.\n"
	if got != want {
		t.Errorf("brief:\n%s\nwant:\n%s", got, want)
	}
}

func TestBrief_of_a_resumed_run_is_exactly_the_seed_text(t *testing.T) {
	got := Resumed(resumption(0), workItem).Brief()
	want := "## You are picking up work that was set down\n\n" +
		"An earlier chain (itn_01QRS) finished what it could and chose to come back to this later. " +
		"It was waiting for: CI on pull request 42 to finish\n\n" +
		"It was set down at 2026-11-30T09:15:00Z, and this is check 1.\n\n" +
		"Nothing was left half-done: the earlier run ended cleanly. Your job is to see whether the thing it " +
		"was waiting for has happened, and to act on it if it has. If it has not, set the work down again " +
		"rather than waiting.\n\n"
	if got != want {
		t.Errorf("brief:\n%s\nwant:\n%s", got, want)
	}
}

func TestBrief_of_a_resumed_run_counts_this_check_after_the_earlier_ones(t *testing.T) {
	// Nothing on the twelfth check is worth saying out loud.
	mustContain(t, Resumed(resumption(11)).Brief(), "this is check 12.", "")
}

func TestBrief_of_a_resumed_run_does_not_send_it_looking_for_half_done_work(t *testing.T) {
	h := Resumed(resumption(0), workItem)
	if h.Cause.RepeatsEarlierWork() {
		t.Error("a resumed layover claims to repeat earlier work")
	}
	brief := h.Brief()
	mustNotContain(t, brief, "anywhere from nowhere to almost finished", ": the earlier run ended on purpose")
	mustNotContain(t, brief, "Doing it twice", ": nothing was half-applied")
}

func TestBrief_shows_the_set_down_time_in_UTC(t *testing.T) {
	r := resumption(0)
	r.BookedAt = bookedAt.In(time.FixedZone("CET", 3600))
	mustContain(t, Resumed(r).Brief(), "set down at 2026-11-30T09:15:00Z", "")
}

func TestBrief_quotes_every_line_of_a_steer_note_of_several_lines(t *testing.T) {
	brief := Steered(Steer{Previous: "run_1", Note: "Stop adding tests.\n\nFix the build first.\n"}).Brief()
	mustContain(t, brief, "> Stop adding tests.\n>\n> Fix the build first.\n\n",
		": a note of several lines must stay inside one quote")
}

func TestBrief_keeps_each_progress_item_on_one_line(t *testing.T) {
	brief := Recovered(recovery()).WithProgress("  ran the tests\n  two failed  ").Brief()
	mustContain(t, brief, "- ran the tests two failed\n", "")
}

func TestBrief_lists_tool_calls_with_their_results_one_line_each(t *testing.T) {
	brief := Recovered(recovery(), workItem).WithToolCalls(
		ToolCall{Name: "read_file", Input: `{"path":"retry.go"}`, Result: "package retry\n...", Finished: true},
		ToolCall{Name: "bash", Input: `{"command":"git push"}`},
	).Brief()
	mustContain(t, brief, "What the earlier run recorded, oldest first:\n\n"+
		`- read_file({"path":"retry.go"}) → package retry ...`+"\n"+
		`- bash({"command":"git push"}) → `+UnfinishedCallResult+"\n", "")
	mustNotContain(t, brief, "anywhere from nowhere", ": there is a record")
}

func TestBrief_survives_a_cause_whose_details_are_missing(t *testing.T) {
	// A hand-built cause may lack its details; the brief still says what kind
	// of run this is rather than panicking the runner.
	for _, kind := range []CauseKind{CauseRecovered, CauseSteered, CauseResumed} {
		brief := Handover{Cause: Cause{Kind: kind}}.Brief()
		if !strings.HasPrefix(brief, "## ") {
			t.Errorf("%s without details: brief %q", kind, brief)
		}
	}
}

func TestCompose_puts_the_brief_immediately_above_the_inputs(t *testing.T) {
	got := Recovered(recovery(), workItem, "and add a test").Compose()
	brief := Recovered(recovery()).Brief()
	want := brief + "\n## The original request\n\n" + workItem + "\n\nand add a test"
	if got != want {
		t.Errorf("composed:\n%s\nwant:\n%s", got, want)
	}
}

func TestCompose_of_a_dispatch_is_its_inputs_alone(t *testing.T) {
	if got := Dispatch(workItem, "and add a test").Compose(); got != workItem+"\n\nand add a test" {
		t.Errorf("composed %q", got)
	}
}

func TestToolCall_line_says_what_was_called_and_what_came_back(t *testing.T) {
	cases := []struct {
		name string
		call ToolCall
		want string
	}{
		{"finished", ToolCall{Name: "bash", Input: `{"command":"go test ./..."}`, Result: "ok\n", Finished: true},
			`bash({"command":"go test ./..."}) → ok`},
		{"failed", ToolCall{Name: "bash", Input: `{"command":"false"}`, Result: "exit status 1", IsError: true, Finished: true},
			`bash({"command":"false"}) → error: exit status 1`},
		{"silent", ToolCall{Name: "write_file", Input: `{"path":"a"}`, Finished: true},
			`write_file({"path":"a"}) → (no output)`},
		{"unfinished", ToolCall{Name: "gh", Input: "pr create"},
			"gh(pr create) → " + UnfinishedCallResult},
		{"no input", ToolCall{Name: "todo_list", Result: "empty", Finished: true},
			"todo_list() → empty"},
	}
	for _, c := range cases {
		if got := c.call.Line(); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestToolCall_line_is_one_line_of_bounded_length(t *testing.T) {
	call := ToolCall{
		Name:     "bash",
		Input:    strings.Repeat("é", 500),
		Result:   strings.Repeat("line of output\n", 200),
		Finished: true,
	}
	line := call.Line()
	if strings.ContainsAny(line, "\r\n") {
		t.Errorf("line breaks: %q", line)
	}
	if n := len([]rune(line)); n > maxInputChars+maxResultChars+len("bash() → ") {
		t.Errorf("line is %d characters", n)
	}
	mustContain(t, line, strings.Repeat("é", maxInputChars-1)+"…)", ": a cut input is marked")
	if !strings.HasSuffix(line, "…") {
		t.Errorf("a cut result is not marked: %q", line[len(line)-20:])
	}
}
