package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
)

// imageHistory is a user turn with a picture, a tool call, and its result
// carrying a screenshot after its text.
func imageHistory() ([]llm.Message, llm.Image, llm.Image) {
	photo := llm.NewImage("image/jpeg", llmtest.JPEG(8, 6))
	shot := llm.NewImage("image/png", llmtest.PNG(5, 5))
	return []llm.Message{
		llm.UserImages("what is in this photo? then take a screenshot", photo),
		{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockToolUse, ID: "toolu_1", Name: "screenshot", Input: json.RawMessage(`{}`)}}},
		{Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockToolResult, ToolUseID: "toolu_1", Content: "1280x800 screenshot", Images: []llm.Image{shot, llm.ImageAt("https://example.com/full.png")}}}},
	}, photo, shot
}

func TestImages_go_as_image_blocks_in_user_content_and_inside_tool_results(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "a cat, and a desktop"})
	p, _ := newProvider(t, s)
	history, photo, shot := imageHistory()
	if _, err := llmtest.Collect(p.Stream(context.Background(), llm.CompletionRequest{Messages: history, MaxTokens: 100})); err != nil {
		t.Fatal(err) // the fake API refuses images it would not take, like the real one
	}
	var body struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type      string         `json:"type"`
				Text      string         `json:"text"`
				Source    map[string]any `json:"source"`
				ToolUseID string         `json:"tool_use_id"`
				Content   []struct {
					Type   string         `json:"type"`
					Text   string         `json:"text"`
					Source map[string]any `json:"source"`
				} `json:"content"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(s.Requests()[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	user := body.Messages[0].Content
	if len(user) != 2 || user[0].Type != "text" || user[1].Type != "image" {
		t.Fatalf("first user turn %+v", user)
	}
	if src := user[1].Source; src["type"] != "base64" || src["media_type"] != "image/jpeg" || src["data"] != photo.Data {
		t.Errorf("user image source %v", src)
	}
	result := body.Messages[2].Content[0]
	if result.Type != "tool_result" || result.ToolUseID != "toolu_1" || len(result.Content) != 3 {
		t.Fatalf("tool result %+v", result)
	}
	if c := result.Content[0]; c.Type != "text" || c.Text != "1280x800 screenshot" {
		t.Errorf("tool result text %+v", c)
	}
	if c := result.Content[1]; c.Type != "image" || c.Source["type"] != "base64" || c.Source["media_type"] != "image/png" || c.Source["data"] != shot.Data {
		t.Errorf("tool result image %+v", c)
	}
	if c := result.Content[2]; c.Type != "image" || c.Source["type"] != "url" || c.Source["url"] != "https://example.com/full.png" {
		t.Errorf("tool result URL image %+v", c)
	}
}

func TestAn_image_in_the_last_turn_can_carry_the_cache_breakpoint(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "a cat"})
	p, _ := newProvider(t, s)
	req := llm.CompletionRequest{Messages: []llm.Message{llm.UserImages("", llm.NewImage("image/gif", llmtest.GIF(2, 2)))}, MaxTokens: 100}
	if _, _, _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	msgs, _ := s.Requests()[0].JSON()["messages"].([]any)
	img := msgs[0].(map[string]any)["content"].([]any)[0].(map[string]any)
	if img["type"] != "image" || img["cache_control"] == nil {
		t.Errorf("image block %v has no cache breakpoint", img)
	}
}

func TestAn_image_the_API_would_refuse_is_refused_before_sending(t *testing.T) {
	s := llmtest.NewAnthropic(t)
	p, _ := newProvider(t, s)
	for name, img := range map[string]llm.Image{
		"unsupported type": llm.NewImage("image/bmp", llmtest.BMP(4, 4)),
		"over 5 MB":        llm.NewImage("image/png", append(llmtest.PNG(2, 2), make([]byte, 4<<20)...)),
		"over 8000 px":     llm.NewImage("image/png", llmtest.PNG(8001, 1)),
	} {
		t.Run(name, func(t *testing.T) {
			history, _, _ := imageHistory()
			history[2].Content[0].Images = []llm.Image{img}
			_, err := llmtest.Collect(p.Stream(context.Background(), llm.CompletionRequest{Messages: history, MaxTokens: 100}))
			if !llm.IsImage(err) || !strings.Contains(err.Error(), "toolu_1") {
				t.Fatalf("stream: want an image error naming the tool result, got %v", err)
			}
			if _, _, _, err := p.Complete(context.Background(), llm.CompletionRequest{Messages: history, MaxTokens: 100}); !llm.IsImage(err) {
				t.Fatalf("complete: want an image error, got %v", err)
			}
		})
	}
	if n := s.RequestCount(); n != 0 {
		t.Fatalf("%d requests were sent", n)
	}
}

func TestThe_APIs_image_refusals_are_classified_as_image_errors_and_not_retried(t *testing.T) {
	for name, apiErr := range map[string]*llmtest.APIError{
		"could not process":   llmtest.InvalidImage(),
		"over 5 MB":           llmtest.ImageTooLarge(),
		"dimensions":          llmtest.ImageDimensionsTooLarge(),
		"unsupported type":    {Status: 400, Message: "messages.0.content.1.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"},
		"type does not match": {Status: 400, Message: "messages.0.content.1.image.source.base64.data: Image does not match the provided media type image/png"},
	} {
		t.Run(name, func(t *testing.T) {
			s := llmtest.NewAnthropic(t, llmtest.Reply{Error: apiErr}, llmtest.Reply{Error: apiErr})
			p, w := newProvider(t, s)
			history, _, _ := imageHistory()
			_, err := llmtest.Collect(p.Stream(context.Background(), llm.CompletionRequest{Messages: history, MaxTokens: 100}))
			var e *llm.Error
			if !llm.IsImage(err) || !errors.As(err, &e) || e.StatusCode != 400 {
				t.Fatalf("stream: want an image error with HTTP 400, got %v", err)
			}
			if _, _, _, err := p.Complete(context.Background(), llm.CompletionRequest{Messages: history, MaxTokens: 100}); !llm.IsImage(err) {
				t.Fatalf("complete: want an image error, got %v", err)
			}
			if len(w.All()) != 0 || s.RequestCount() != 2 {
				t.Fatalf("an image refusal must not be retried: %d waits, %d requests", len(w.All()), s.RequestCount())
			}
		})
	}
}

func TestA_refusal_that_is_not_about_an_image_stays_a_model_error(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Error: &llmtest.APIError{Status: 400, Message: "max_tokens: Input should be greater than 0"}})
	p, _ := newProvider(t, s)
	history, _, _ := imageHistory()
	_, err := llmtest.Collect(p.Stream(context.Background(), llm.CompletionRequest{Messages: history, MaxTokens: 100}))
	if llm.KindOf(err) != llm.ErrKindModel {
		t.Fatalf("want a model error, got %v (%s)", err, llm.KindOf(err))
	}
}

func TestImages_outside_user_turns_are_left_out_of_the_request(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Text: "ok"})
	p, _ := newProvider(t, s)
	history := []llm.Message{
		llm.UserText("hi"),
		{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockText, Text: "hello"}, llm.ImageBlock(llm.NewImage("image/png", llmtest.PNG(1, 1)))}},
		llm.UserText("again"),
	}
	if _, _, _, err := p.Complete(context.Background(), llm.CompletionRequest{Messages: history, MaxTokens: 100}); err != nil {
		t.Fatal(err) // the fake API refuses an image in an assistant turn
	}
	if strings.Contains(string(s.Requests()[0].Body), `"image"`) {
		t.Errorf("an assistant image was sent: %s", s.Requests()[0].Body)
	}
}
