package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"jetway/pkg/agent"
	"jetway/pkg/agent/tool"
	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
	"jetway/pkg/llm/openai"
	"jetway/pkg/llm/retry"
)

// screenshot is a read-only tool returning a text line and img.
func screenshot(img llm.Image) tool.Tool {
	return tool.Func{Name: "screenshot", IsReadOnly: true, Fn: func(context.Context, tool.Call) (tool.Result, error) {
		return tool.Result{Content: "took a screenshot", Images: []llm.Image{img}}, nil
	}}
}

func TestQuery_sends_a_tools_image_in_its_tool_result_over_the_wire(t *testing.T) {
	s := llmtest.NewAnthropic(t,
		llmtest.Reply{Text: "Let me look.", ToolCalls: []llmtest.ToolCall{{ID: "toolu_1", Name: "screenshot"}}},
		llmtest.Reply{Text: "A desktop with two windows."},
	)
	shot := llm.NewImage("image/png", llmtest.PNG(6, 4))
	rec := &recorder{}
	evs, term := run(t, t.Context(), agent.QueryInput{
		Provider: anthropicProvider(t, s), Messages: userInput("what is on screen?"),
		Tools: registry(t, screenshot(shot)), Recorder: rec,
	}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted || term.Text != "A desktop with two windows." {
		t.Fatalf("terminal %+v", term)
	}
	for _, e := range evs {
		if e.Kind == agent.KindToolResult && (len(e.ToolResult.Images) != 1 || e.ToolResult.Images[0] != shot) {
			t.Errorf("the tool_result event lacks the image: %+v", e.ToolResult)
		}
	}
	if imgs := rec.recorded()[1].Images(); len(imgs) != 1 || imgs[0] != shot {
		t.Errorf("the recorded result lacks the image: %+v", rec.recorded()[1])
	}
	var body struct {
		Messages []struct {
			Content []struct {
				Type    string `json:"type"`
				Content []struct {
					Type   string            `json:"type"`
					Source map[string]string `json:"source"`
				} `json:"content"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(s.Requests()[1].Body, &body); err != nil {
		t.Fatal(err)
	}
	result := body.Messages[2].Content[0]
	if result.Type != "tool_result" || len(result.Content) != 2 || result.Content[1].Type != "image" || result.Content[1].Source["data"] != shot.Data {
		t.Fatalf("the second request's tool result %+v", result)
	}
}

func TestQuery_ends_with_image_error_when_a_tool_returns_an_image_the_provider_cannot_take(t *testing.T) {
	for name, img := range map[string]llm.Image{
		"unsupported type": llm.NewImage("image/bmp", llmtest.BMP(640, 480)),
		"over 5 MB":        llm.NewImage("image/png", append(llmtest.PNG(2, 2), make([]byte, 4<<20)...)),
	} {
		t.Run(name, func(t *testing.T) {
			s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "Let me look.", ToolCalls: []llmtest.ToolCall{{ID: "toolu_1", Name: "screenshot"}}})
			rec := &recorder{}
			_, term := run(t, t.Context(), agent.QueryInput{
				Provider: anthropicProvider(t, s), Messages: userInput("what is on screen?"),
				Tools: registry(t, screenshot(img)), Recorder: rec,
			}, agent.QueryDeps{})
			if term.Reason != agent.ReasonImageError || !llm.IsImage(term.Err) || !strings.Contains(term.Err.Error(), "toolu_1") {
				t.Fatalf("terminal %s: %v", term.Reason, term.Err)
			}
			if n := s.RequestCount(); n != 1 {
				t.Fatalf("%d requests: the refused image must not be sent", n)
			}
			assertPaired(t, term.Messages)
			got := rec.recorded()
			if len(got) != 3 || got[1].Content[0].Type != llm.BlockToolResult || len(got[1].Images()) != 1 {
				t.Fatalf("the tool turn and its result with the image must be recorded: %+v", texts(got))
			}
			if got[2].Kind != llm.KindImageRefused || !strings.Contains(got[2].Text(), "toolu_1") {
				t.Fatalf("the refusal is not recorded last: %+v", got[2])
			}
		})
	}
}

func TestQuery_ends_with_image_error_when_the_API_refuses_an_image(t *testing.T) {
	s := llmtest.NewAnthropic(t,
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "toolu_1", Name: "screenshot"}, {ID: "toolu_2", Name: "echo", Input: `{"a":1}`}}},
		llmtest.Reply{Error: llmtest.InvalidImage()},
	)
	_, term := run(t, t.Context(), agent.QueryInput{
		Provider: anthropicProvider(t, s), Messages: userInput("look"),
		Tools: registry(t, screenshot(llm.NewImage("image/png", llmtest.PNG(3, 3))), echo()),
	}, agent.QueryDeps{})
	var e *llm.Error
	if term.Reason != agent.ReasonImageError || !errors.As(term.Err, &e) || e.StatusCode != 400 || !strings.Contains(term.Err.Error(), "Could not process image") {
		t.Fatalf("terminal %s: %v", term.Reason, term.Err)
	}
	assertPaired(t, term.Messages)
	if last := term.Messages[len(term.Messages)-2]; len(last.Content) != 2 || last.Content[0].ToolUseID != "toolu_1" || last.Content[1].ToolUseID != "toolu_2" {
		t.Fatalf("the history does not end with both results and the refusal: %+v", last)
	}
	if last := term.Messages[len(term.Messages)-1]; last.Kind != llm.KindImageRefused || !strings.Contains(last.Text(), "Could not process image") {
		t.Fatalf("the refusal record %+v", last)
	}
}

func TestQuery_the_session_goes_on_after_an_image_error_without_the_refused_image(t *testing.T) {
	s := llmtest.NewAnthropic(t,
		llmtest.Reply{Text: "Let me look.", ToolCalls: []llmtest.ToolCall{{ID: "toolu_1", Name: "screenshot"}}},
		llmtest.Reply{Text: "I could not see the screenshot; its format was refused."},
	)
	p := anthropicProvider(t, s)
	bad := llm.NewImage("image/bmp", llmtest.BMP(64, 64))
	reg := registry(t, screenshot(bad))
	_, first := run(t, t.Context(), agent.QueryInput{Provider: p, Messages: userInput("what is on screen?"), Tools: reg}, agent.QueryDeps{})
	if first.Reason != agent.ReasonImageError {
		t.Fatalf("first run: %s %v", first.Reason, first.Err)
	}
	next := append(first.Messages, llm.UserText("what happened?"))
	_, second := run(t, t.Context(), agent.QueryInput{Provider: p, Messages: next, Tools: reg}, agent.QueryDeps{})
	if second.Reason != agent.ReasonCompleted {
		t.Fatalf("second run: %s %v", second.Reason, second.Err)
	}
	body := string(s.Requests()[1].Body)
	if strings.Contains(body, bad.Data) || !strings.Contains(body, "1 image(s) removed") || !strings.Contains(body, "[image refused]") {
		t.Fatalf("the next request still carries the refused image or does not say why: %.600s", body)
	}
	if imgs := second.Messages[2].Images(); len(imgs) != 1 {
		t.Errorf("the recorded history lost the image: %+v", second.Messages[2])
	}
}

func TestQuery_ends_with_image_error_when_an_openai_compatible_server_refuses_an_image(t *testing.T) {
	s := llmtest.NewOpenAI(t,
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "screenshot"}}},
		llmtest.Reply{Error: &llmtest.APIError{Status: 400, Message: "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"}},
	)
	p, err := openai.New(openai.Config{APIKey: "none", BaseURL: s.URL(), Model: "local", Retry: retry.Policy{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	_, term := run(t, t.Context(), agent.QueryInput{
		Provider: p, Messages: userInput("look"), Tools: registry(t, screenshot(llm.NewImage("image/png", llmtest.PNG(3, 3)))),
	}, agent.QueryDeps{})
	if term.Reason != agent.ReasonImageError || !llm.IsImage(term.Err) {
		t.Fatalf("terminal %s: %v", term.Reason, term.Err)
	}
	assertPaired(t, term.Messages)
	// The second request carried the image the only way Chat Completions
	// allows: in a user message after the tool message.
	if body := string(s.Requests()[1].Body); !strings.Contains(body, `"role":"tool"`) || !strings.Contains(body, `"image_url"`) {
		t.Fatalf("second request %.300s", body)
	}
}

func TestQuery_an_image_error_is_not_a_model_error(t *testing.T) {
	imageErr := &llm.Error{Kind: llm.ErrKindImage, Provider: "fake", Err: errors.New("image exceeds 5 MB maximum")}
	m := newModel(reply{err: imageErr})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Messages: []llm.Message{llm.UserImages("look", llm.NewImage("image/png", llmtest.PNG(1, 1)))}}, agent.QueryDeps{})
	if term.Reason != agent.ReasonImageError || !errors.Is(term.Err, imageErr) {
		t.Fatalf("terminal %s: %v", term.Reason, term.Err)
	}
	if got := m.requests()[0].Messages[0].Images(); len(got) != 1 {
		t.Errorf("the user's image was not in the request: %+v", m.requests()[0].Messages[0])
	}
}
