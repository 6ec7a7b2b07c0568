package llmtest_test

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"jetway/pkg/llm/llmtest"
)

// post sends body as the SDKs would and returns the status and the decoded
// error message.
func post(t *testing.T, url string, header map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct {
			Message string `json:"message"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &e)
	return resp.StatusCode, e.Error.Message
}

func anthropicImageRequest(source string) string {
	return `{"model":"claude-test","max_tokens":64,"messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","source":` + source + `}]}]}`
}

func TestAnthropic_refuses_images_as_the_API_does_in_its_words(t *testing.T) {
	s := llmtest.NewAnthropic(t)
	s.SetFallback(llmtest.Reply{Text: "ok"})
	h := map[string]string{"x-api-key": "k", "anthropic-version": "2023-06-01"}
	png := base64.StdEncoding.EncodeToString(llmtest.PNG(2, 2))
	big := strings.Repeat("A", 5<<20+4)
	cases := []struct {
		name, source, want string
	}{
		{"a type it does not take", `{"type":"base64","media_type":"image/bmp","data":"` + png + `"}`, "messages.0.content.1.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"},
		{"over 5 MB of base64", `{"type":"base64","media_type":"image/png","data":"` + big + `"}`, "messages.0.content.1.image.source.base64: image exceeds 5 MB maximum: 5242884 bytes > 5242880 bytes"},
		{"not base64", `{"type":"base64","media_type":"image/png","data":"%%%"}`, "Could not process image"},
		{"a URL that is not one", `{"type":"url","url":"file:///x"}`, "messages.0.content.1.image.source.url.url: Input should be a valid URL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, msg := post(t, s.URL()+"/v1/messages", h, anthropicImageRequest(c.source))
			if status != 400 || msg != c.want {
				t.Fatalf("got %d %q, want 400 %q", status, msg, c.want)
			}
		})
	}
	if status, msg := post(t, s.URL()+"/v1/messages", h, anthropicImageRequest(`{"type":"base64","media_type":"image/png","data":"`+png+`"}`)); status != 200 {
		t.Fatalf("a good image was refused: %d %s", status, msg)
	}
	inTool := `{"model":"claude-test","max_tokens":64,"messages":[{"role":"user","content":[{"type":"text","text":"go"}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"shot","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"image","source":{"type":"base64","media_type":"image/tiff","data":"AAAA"}}]}]}]}`
	if status, msg := post(t, s.URL()+"/v1/messages", h, inTool); status != 400 || !strings.HasPrefix(msg, "messages.2.content.0.tool_result.content.0.image.source.base64.media_type") {
		t.Fatalf("an image inside a tool result was not checked: %d %q", status, msg)
	}
}

func TestAnthropic_renders_the_APIs_image_errors(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Reply{Error: llmtest.ImageDimensionsTooLarge()}, llmtest.Reply{Error: llmtest.InvalidImage()})
	h := map[string]string{"x-api-key": "k", "anthropic-version": "2023-06-01"}
	body := `{"model":"claude-test","max_tokens":64,"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`
	if status, msg := post(t, s.URL()+"/v1/messages", h, body); status != 400 || !strings.Contains(msg, "image dimensions exceed max allowed size: 8000 pixels") {
		t.Fatalf("dimensions: %d %q", status, msg)
	}
	if status, msg := post(t, s.URL()+"/v1/messages", h, body); status != 400 || msg != "Could not process image" {
		t.Fatalf("invalid: %d %q", status, msg)
	}
}

func TestOpenAI_refuses_an_image_in_a_tool_message_as_the_API_does(t *testing.T) {
	s := llmtest.NewOpenAI(t)
	s.SetFallback(llmtest.Reply{Text: "ok"})
	h := map[string]string{"authorization": "Bearer k"}
	body := `{"model":"gpt-test","messages":[{"role":"user","content":"x"},` +
		`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`
	if status, msg := post(t, s.URL()+"/chat/completions", h, body); status != 400 || msg != "Invalid 'messages[2]'. Image URLs are only allowed for messages with role 'user', but this message with role 'tool' contains an image URL." {
		t.Fatalf("got %d %q", status, msg)
	}
	user := `{"model":"gpt-test","messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`
	if status, msg := post(t, s.URL()+"/chat/completions", h, user); status != 200 {
		t.Fatalf("an image in a user message was refused: %d %q", status, msg)
	}
}

func TestOpenAI_renders_the_APIs_image_errors(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Reply{Error: llmtest.InvalidImage()}, llmtest.Reply{Error: llmtest.ImageTooLarge()})
	h := map[string]string{"authorization": "Bearer k"}
	body := `{"model":"gpt-test","messages":[{"role":"user","content":"x"}]}`
	if status, msg := post(t, s.URL()+"/chat/completions", h, body); status != 400 || msg != "Invalid image." {
		t.Fatalf("invalid: %d %q", status, msg)
	}
	if status, msg := post(t, s.URL()+"/chat/completions", h, body); status != 400 || !strings.HasPrefix(msg, "You uploaded an unsupported image.") {
		t.Fatalf("format: %d %q", status, msg)
	}
}
