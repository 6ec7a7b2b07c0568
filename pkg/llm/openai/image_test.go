package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
	"jetway/pkg/llm/openai"
)

// sentMessage is a Chat Completions message as the server received it;
// Content is a string or a list of parts.
type sentMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
}

type sentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL struct {
		URL string `json:"url"`
	} `json:"image_url"`
}

func sentMessages(t *testing.T, body []byte) []sentMessage {
	t.Helper()
	var req struct {
		Messages []sentMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	return req.Messages
}

func TestA_user_image_goes_as_an_image_url_part_with_a_data_URL(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Reply{Text: "a cat"})
	p, _ := newProvider(t, s)
	photo := llm.NewImage("image/jpeg", llmtest.JPEG(6, 4))
	req := llm.CompletionRequest{Messages: []llm.Message{llm.UserImages("what is this?", photo, llm.ImageAt("https://example.com/b.png"))}}
	if _, err := llmtest.Collect(p.Stream(context.Background(), req)); err != nil {
		t.Fatal(err)
	}
	msgs := sentMessages(t, s.Requests()[0].Body)
	var parts []sentPart
	if err := json.Unmarshal(msgs[0].Content, &parts); err != nil {
		t.Fatalf("a user turn with images must be a list of parts: %s", msgs[0].Content)
	}
	if len(parts) != 3 || parts[0].Type != "text" || parts[0].Text != "what is this?" {
		t.Fatalf("parts %+v", parts)
	}
	if parts[1].Type != "image_url" || parts[1].ImageURL.URL != "data:image/jpeg;base64,"+photo.Data {
		t.Errorf("image part %.80v", parts[1])
	}
	if parts[2].Type != "image_url" || parts[2].ImageURL.URL != "https://example.com/b.png" {
		t.Errorf("URL image part %+v", parts[2])
	}
}

func TestA_tool_results_images_follow_in_a_user_message_after_the_tool_messages(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Reply{Text: "I see a desktop"})
	p, _ := newProvider(t, s)
	shot := llm.NewImage("image/png", llmtest.PNG(5, 5))
	history := []llm.Message{
		llm.UserText("take two screenshots"),
		{Role: llm.RoleAssistant, Content: []llm.ContentBlock{
			{Type: llm.BlockToolUse, ID: "call_1", Name: "screenshot", Input: json.RawMessage(`{}`)},
			{Type: llm.BlockToolUse, ID: "call_2", Name: "ls", Input: json.RawMessage(`{}`)},
		}},
		{Role: llm.RoleUser, Content: []llm.ContentBlock{
			{Type: llm.BlockToolResult, ToolUseID: "call_1", Content: "1280x800", Images: []llm.Image{shot}},
			{Type: llm.BlockToolResult, ToolUseID: "call_2", Content: "a.txt"},
			{Type: llm.BlockText, Text: "and describe it"},
		}},
	}
	if _, _, _, err := p.Complete(context.Background(), llm.CompletionRequest{Messages: history}); err != nil {
		t.Fatal(err) // the fake API refuses an image in a tool message, like the real one
	}
	msgs := sentMessages(t, s.Requests()[0].Body)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	if want := []string{"user", "assistant", "tool", "tool", "user"}; !reflect.DeepEqual(roles, want) {
		t.Fatalf("roles %v, want %v", roles, want)
	}
	var first, second string
	if err := json.Unmarshal(msgs[2].Content, &first); err != nil {
		t.Fatalf("tool message content is not a string: %s", msgs[2].Content)
	}
	_ = json.Unmarshal(msgs[3].Content, &second)
	if want := "1280x800\n\n" + fmt.Sprintf(openai.ToolImagesNote, 1); first != want || msgs[2].ToolCallID != "call_1" {
		t.Errorf("tool message %q, want %q", first, want)
	}
	if second != "a.txt" {
		t.Errorf("a result without images changed: %q", second)
	}
	var parts []sentPart
	if err := json.Unmarshal(msgs[4].Content, &parts); err != nil {
		t.Fatalf("user message after the tools: %s", msgs[4].Content)
	}
	if len(parts) != 3 || parts[0].Text != fmt.Sprintf(openai.ToolImagesHeader, "call_1") ||
		parts[1].Type != "image_url" || parts[1].ImageURL.URL != shot.DataURL() || parts[2].Text != "and describe it" {
		t.Fatalf("user parts %+v", parts)
	}
}

func TestA_user_turn_without_images_stays_a_plain_string(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Reply{Text: "hi"})
	p, _ := newProvider(t, s)
	if _, _, _, err := p.Complete(context.Background(), llmtest.UserRequest("hello")); err != nil {
		t.Fatal(err)
	}
	if c := string(sentMessages(t, s.Requests()[0].Body)[0].Content); c != `"hello"` {
		t.Errorf("content %s, want a plain string", c)
	}
}

func TestAn_unsupported_image_is_refused_before_sending(t *testing.T) {
	s := llmtest.NewOpenAI(t)
	p, _ := newProvider(t, s)
	req := llm.CompletionRequest{Messages: []llm.Message{llm.UserImages("look", llm.NewImage("image/bmp", llmtest.BMP(2, 2)))}}
	if _, err := llmtest.Collect(p.Stream(context.Background(), req)); !llm.IsImage(err) || !strings.Contains(err.Error(), "image/bmp") {
		t.Fatalf("stream: want an image error naming the type, got %v", err)
	}
	if _, _, _, err := p.Complete(context.Background(), req); !llm.IsImage(err) {
		t.Fatalf("complete: want an image error, got %v", err)
	}
	if n := s.RequestCount(); n != 0 {
		t.Fatalf("%d requests were sent", n)
	}
}

func TestConfig_Images_lets_a_compatible_server_take_other_types(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Reply{Text: "a bitmap"})
	p, _ := newProvider(t, s, func(c *openai.Config) { c.Images = &llm.ImagePolicy{MediaTypes: []string{"image/bmp", "image/png"}} })
	req := llm.CompletionRequest{Messages: []llm.Message{llm.UserImages("look", llm.NewImage("image/bmp", llmtest.BMP(2, 2)))}}
	if _, _, _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatalf("a type the policy takes was refused: %v", err)
	}
}

func TestThe_APIs_image_refusals_are_classified_as_image_errors_and_not_retried(t *testing.T) {
	for name, apiErr := range map[string]*llmtest.APIError{
		"invalid image":         llmtest.InvalidImage(),
		"unsupported format":    llmtest.ImageTooLarge(),
		"image_parse_error":     {Status: 400, Code: "image_parse_error", Message: "You uploaded an unsupported image. Please make sure your image is valid."},
		"text-only local model": {Status: 400, Message: "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"},
	} {
		t.Run(name, func(t *testing.T) {
			s := llmtest.NewOpenAI(t, llmtest.Reply{Error: apiErr}, llmtest.Reply{Error: apiErr})
			p, w := newProvider(t, s)
			req := llm.CompletionRequest{Messages: []llm.Message{llm.UserImages("look", llm.NewImage("image/png", llmtest.PNG(2, 2)))}}
			_, err := llmtest.Collect(p.Stream(context.Background(), req))
			var e *llm.Error
			if !llm.IsImage(err) || !errors.As(err, &e) || e.StatusCode != 400 {
				t.Fatalf("stream: want an image error with HTTP 400, got %v", err)
			}
			if _, _, _, err := p.Complete(context.Background(), req); !llm.IsImage(err) {
				t.Fatalf("complete: want an image error, got %v", err)
			}
			if len(w.All()) != 0 || s.RequestCount() != 2 {
				t.Fatalf("an image refusal must not be retried: %d waits, %d requests", len(w.All()), s.RequestCount())
			}
		})
	}
}
