package script_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"jetway/pkg/llm"
	"jetway/pkg/llm/script"
)

func demo(t testing.TB) *script.Provider {
	t.Helper()
	p, err := script.Load("demo.json")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// stream plays one call and returns the assembled message, checking that
// the deltas and tool events agree with it.
func stream(t *testing.T, p llm.Provider, history []llm.Message) (llm.Message, llm.StopReason) {
	t.Helper()
	var text strings.Builder
	var tools []llm.ContentBlock
	for ev, err := range p.Stream(context.Background(), llm.CompletionRequest{Messages: history}) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		switch ev.Type {
		case llm.EventTextDelta:
			text.WriteString(ev.Text)
		case llm.EventToolUse:
			tools = append(tools, *ev.Block)
		case llm.EventMessageEnd:
			if ev.Message.Text() != text.String() || len(ev.Message.ToolUses()) != len(tools) {
				t.Fatalf("deltas %q / %d tools disagree with the message %+v", text.String(), len(tools), ev.Message)
			}
			if ev.Usage == nil || ev.Usage.InputTokens == 0 || ev.Usage.OutputTokens == 0 {
				t.Fatalf("usage %+v", ev.Usage)
			}
			return *ev.Message, ev.StopReason
		}
	}
	t.Fatal("stream ended without message_end")
	return llm.Message{}, ""
}

func results(m llm.Message, contents ...string) llm.Message {
	u := llm.Message{Role: llm.RoleUser}
	for i, tu := range m.ToolUses() {
		u.Content = append(u.Content, llm.ContentBlock{Type: llm.BlockToolResult, ToolUseID: tu.ID, Content: contents[i]})
	}
	return u
}

func jobNotice(id int) llm.Message {
	text := "[background job notice] job " + string(rune('0'+id)) + " (sleep) exited 0 after 3s.\nLast output:\nbuild ok\nTell the user the result."
	return llm.Message{Role: llm.RoleUser, Kind: llm.KindNotice, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: text}}}
}

func TestName_announces_a_script_not_a_model(t *testing.T) {
	if got := demo(t).Name(); got != "script demo.json (deterministic, no model)" {
		t.Fatalf("name %q", got)
	}
}

func TestDemo_starts_a_background_job_keeps_working_ends_its_turn_then_reports_the_notice(t *testing.T) {
	p := demo(t)
	h := []llm.Message{llm.UserText("please build the project")}

	m1, stop := stream(t, p, h)
	calls := m1.ToolUses()
	if stop != llm.StopToolUse || len(calls) != 1 || calls[0].Name != "shell" {
		t.Fatalf("turn 1: %q %+v", stop, m1)
	}
	var in struct {
		Command    string `json:"command"`
		Background bool   `json:"background"`
	}
	if err := json.Unmarshal(calls[0].Input, &in); err != nil || !in.Background || !strings.Contains(in.Command, "echo build ok") {
		t.Fatalf("turn 1 input %s (%v)", calls[0].Input, err)
	}
	h = append(h, m1, results(m1, "started job 7 (sleep) in the background"))

	m2, stop := stream(t, p, h)
	if stop != llm.StopToolUse || len(m2.ToolUses()) != 1 || !strings.Contains(m2.Text(), "Meanwhile") {
		t.Fatalf("turn 2: %q %+v", stop, m2)
	}
	if m2.ToolUses()[0].ID == calls[0].ID {
		t.Fatal("tool call ids repeat within a conversation")
	}
	h = append(h, m2, results(m2, "total 0\nREADME.md"))

	m3, stop := stream(t, p, h)
	if stop != llm.StopEndTurn || len(m3.ToolUses()) != 0 || !strings.Contains(m3.Text(), "still running") {
		t.Fatalf("turn 3: %q %+v", stop, m3)
	}
	h = append(h, m3, jobNotice(7)) // a new run, started by the job's exit

	m4, stop := stream(t, p, h)
	want := `The background build has finished: job 7 (sleep) exited 0 after 3s. Its last output line was "build ok".`
	if stop != llm.StopEndTurn || m4.Text() != want {
		t.Fatalf("turn 4: %q\n got %q\nwant %q", stop, m4.Text(), want)
	}
}

func TestA_notice_that_arrives_while_busy_is_reported_at_once(t *testing.T) {
	p := demo(t)
	h := []llm.Message{llm.UserText("build")}
	m1, _ := stream(t, p, h)
	h = append(h, m1, results(m1, "started job 2"))
	m2, _ := stream(t, p, h)
	// The job exits while `ls` runs: the notice joins the tool result.
	h = append(h, m2, results(m2, "README.md"), jobNotice(2))
	m3, _ := stream(t, p, h)
	if !strings.Contains(m3.Text(), "job 2 (sleep) exited 0") {
		t.Fatalf("want the report, got %q", m3.Text())
	}
}

func TestA_notice_is_recognised_by_its_tag_when_the_view_dropped_its_kind(t *testing.T) {
	p := demo(t)
	h := []llm.Message{llm.UserText("build")}
	m1, _ := stream(t, p, h)
	h = append(h, m1, results(m1, "started job 4"))
	m2, _ := stream(t, p, h)
	h = append(h, m2, results(m2, "README.md"))
	m3, _ := stream(t, p, h)
	n := jobNotice(4)
	n.Kind = ""
	n.Content[0].Text = "<system-reminder>\n" + n.Content[0].Text + "\n</system-reminder>"
	h = append(h, m3, n)
	m4, _ := stream(t, p, h)
	if !strings.Contains(m4.Text(), "job 4 (sleep) exited 0 after 3s.") || !strings.Contains(m4.Text(), `"build ok"`) {
		t.Fatalf("got %q", m4.Text())
	}
}

func TestNew_input_after_the_script_ran_out_starts_it_again(t *testing.T) {
	p := demo(t)
	first, _ := stream(t, p, []llm.Message{llm.UserText("build")})
	h := []llm.Message{llm.UserText("build"), first, results(first, "started"),
		{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "The background build has finished: job 1 (x) exited 0. Its last output line was \"ok\"."}}},
		llm.UserText("again please"),
	}
	m, _ := stream(t, p, h)
	if len(m.ToolUses()) != 1 || m.Text() != first.Text() {
		t.Fatalf("want turn 1 again, got %+v", m)
	}
}

func TestOne_provider_serves_interleaved_sessions(t *testing.T) {
	p := demo(t)
	a := []llm.Message{llm.UserText("build a")}
	b := []llm.Message{llm.UserText("build b")}
	ma, _ := stream(t, p, a)
	mb, _ := stream(t, p, b)
	a = append(a, ma, results(ma, "started"))
	ma2, _ := stream(t, p, a)
	b = append(b, mb, results(mb, "started"))
	mb2, _ := stream(t, p, b)
	if ma2.Text() != mb2.Text() || !strings.Contains(ma2.Text(), "Meanwhile") {
		t.Fatalf("sessions diverged: %q / %q", ma2.Text(), mb2.Text())
	}
}

func TestConditions_on_tool_results_and_user_text(t *testing.T) {
	p, err := script.FromTurns([]script.Turn{
		{When: &script.Condition{UserContains: "deploy"}, Text: "Deploying.", ToolCalls: []script.ToolCall{{Name: "deploy"}}},
		{When: &script.Condition{ToolResultFor: "deploy", ToolResultContains: "FAILED"}, Text: "The deploy failed: {{tool_result}}"},
		{When: &script.Condition{ToolResultFor: "deploy"}, Text: "Deployed."},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := []llm.Message{llm.UserText("please deploy")}
	m, _ := stream(t, p, h)
	fail := append(append([]llm.Message(nil), h...), m, results(m, "FAILED: no credentials\nmore"))
	if got, _ := stream(t, p, fail); got.Text() != "The deploy failed: FAILED: no credentials" {
		t.Fatalf("got %q", got.Text())
	}
	ok := append(append([]llm.Message(nil), h...), m, results(m, "done"))
	if got, _ := stream(t, p, ok); got.Text() != "Deployed." {
		t.Fatalf("got %q", got.Text())
	}
}

func TestAn_unmatched_request_is_a_model_error_that_says_what_was_sent(t *testing.T) {
	p, err := script.FromTurns([]script.Turn{{When: &script.Condition{UserContains: "deploy"}, Text: "Deploying."}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, err = p.Complete(context.Background(), llm.CompletionRequest{Messages: []llm.Message{llm.UserText("hello there")}})
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.ErrKindModel || !strings.Contains(err.Error(), "hello there") || !strings.Contains(err.Error(), "no scripted turn") {
		t.Fatalf("got %v", err)
	}
}

func TestDelay_is_cut_short_by_cancellation(t *testing.T) {
	p, err := script.Parse([]byte(`[{"text":"slow","delay":"1h"}]`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		for _, err := range p.Stream(ctx, llm.CompletionRequest{Messages: []llm.Message{llm.UserText("x")}}) {
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("delay ignored the cancellation")
	}
}

func TestParse_refuses_scripts_that_cannot_play(t *testing.T) {
	for name, src := range map[string]string{
		"no turns":      `{"turns":[]}`,
		"silent turn":   `[{"stop_reason":"end_turn"}]`,
		"unnamed tool":  `[{"tool_calls":[{"input":{}}]}]`,
		"bad delay":     `[{"text":"x","delay":"soon"}]`,
		"not json":      `{turns`,
		"unknown shape": `"hello"`,
	} {
		if _, err := script.Parse([]byte(src)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func BenchmarkStream(b *testing.B) {
	p := demo(b)
	req := llm.CompletionRequest{Messages: []llm.Message{llm.UserText("build")}}
	b.ReportAllocs()
	for b.Loop() {
		for _, err := range p.Stream(context.Background(), req) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

func TestImages_in_the_turn_leave_notice_and_tool_conditions_working(t *testing.T) {
	p, err := script.FromTurns([]script.Turn{
		{When: &script.Condition{UserContains: "look"}, Text: "Taking a screenshot.", ToolCalls: []script.ToolCall{{Name: "screenshot"}}},
		{When: &script.Condition{NoticeContains: "job 3"}, Text: "Noted: {{notice}}"},
		{When: &script.Condition{ToolResultFor: "screenshot", HasImage: true}, Text: "I got the screenshot: {{tool_result}}"},
		{When: &script.Condition{ToolResultFor: "screenshot"}, Text: "The screenshot came back without an image."},
	})
	if err != nil {
		t.Fatal(err)
	}
	img := llm.Image{MediaType: "image/png", Data: "iVBORw0KGgo="}
	h := []llm.Message{llm.UserImages("look at this", img)}
	m, _ := stream(t, p, h)
	if len(m.ToolUses()) != 1 {
		t.Fatalf("user_contains did not match beside an image: %+v", m)
	}
	withImage := results(m, "1280x800")
	withImage.Content[0].Images = []llm.Image{img}
	if got, _ := stream(t, p, append(append([]llm.Message(nil), h...), m, withImage)); got.Text() != "I got the screenshot: 1280x800" {
		t.Fatalf("has_image: got %q", got.Text())
	}
	if got, _ := stream(t, p, append(append([]llm.Message(nil), h...), m, results(m, "1280x800"))); got.Text() != "The screenshot came back without an image." {
		t.Fatalf("has_image held with no image: got %q", got.Text())
	}
	n := jobNotice(3)
	n.Content = append(n.Content, llm.ImageBlock(img))
	if got, _ := stream(t, p, append(append([]llm.Message(nil), h...), m, withImage, llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "I got the screenshot: 1280x800"}}}, n)); !strings.HasPrefix(got.Text(), "Noted: job 3 (sleep) exited 0") {
		t.Fatalf("notice_contains beside an image: got %q", got.Text())
	}
}

func TestAn_unmatched_request_with_images_says_so(t *testing.T) {
	p, err := script.FromTurns([]script.Turn{{When: &script.Condition{UserContains: "deploy"}, Text: "Deploying."}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, err = p.Complete(context.Background(), llm.CompletionRequest{Messages: []llm.Message{llm.UserImages("what is this", llm.Image{MediaType: "image/png", Data: "AAAA"})}})
	if err == nil || !strings.Contains(err.Error(), "what is this | an image") {
		t.Fatalf("got %v", err)
	}
}
