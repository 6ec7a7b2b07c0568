package approvals

import (
	"encoding/json"
	"testing"
	"time"

	rec "jetway/pkg/control/approvals"
)

func TestAsk_rules_naming_MCP_tools_are_denied_rather_than_let_through(t *testing.T) {
	got := Unheld([]string{"shell(git push*)", "mcp__tickets__close", " mcp__*"})
	if len(got) != 2 || got[0] != "mcp__tickets__close" {
		t.Fatalf("unheld = %q", got)
	}
}

func TestThe_model_reads_each_outcome_in_words_it_can_act_on(t *testing.T) {
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	call := rec.Approval{ID: "ap-1", Kind: rec.KindTool, Tool: "shell", Input: json.RawMessage(`{"command":"deploy"}`), ExpiresAt: at}
	with := func(st rec.State, d rec.Decision) rec.Approval { a := call; a.State, a.Decision = st, &d; return a }
	for _, c := range []struct {
		a    rec.Approval
		want string
	}{
		{with(rec.Rejected, rec.Decision{Reason: "not today", By: "ann"}), "A person (ann) rejected your call of shell (approval ap-1); it did not run. Reason: not today"},
		{with(rec.Expired, rec.Decision{}), "Nobody decided on your call of shell (approval ap-1) before its timeout at 2026-12-04T10:00:00Z, so it was rejected and did not run (timeout)."},
		{func() rec.Approval {
			a := with(rec.Done, rec.Decision{Input: json.RawMessage(`{"command":"deploy staging"}`)})
			a.Result = "ok"
			return a
		}(), "A person approved your call of shell (approval ap-1) with its input edited to {\"command\":\"deploy staging\"}, and it ran. Its result:\nok"},
	} {
		if got := Text(c.a); got != c.want {
			t.Errorf("Text(%s) =\n%s\nwant\n%s", c.a.State, got, c.want)
		}
	}
}
