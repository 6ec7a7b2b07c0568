package llm_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"jetway/pkg/llm"
	"jetway/pkg/llm/llmtest"
)

var anthropicLike = llm.ImagePolicy{
	MediaTypes:     []string{"image/jpeg", "image/png", "image/gif", "image/webp"},
	MaxBase64Bytes: 5 << 20,
	MaxDimension:   8000,
}

func TestNewImage_carries_the_bytes_as_base64_and_as_a_data_URL(t *testing.T) {
	raw := llmtest.PNG(2, 2)
	img := llm.NewImage("image/png", raw)
	got, err := base64.StdEncoding.DecodeString(img.Data)
	if err != nil || string(got) != string(raw) {
		t.Fatalf("data does not decode back to the bytes: %v", err)
	}
	if want := "data:image/png;base64," + img.Data; img.DataURL() != want {
		t.Errorf("DataURL = %.40q…", img.DataURL())
	}
	if u := llm.ImageAt("https://example.com/a.png"); u.DataURL() != "https://example.com/a.png" {
		t.Errorf("a URL image's DataURL is %q", u.DataURL())
	}
}

func TestImages_and_their_blocks_survive_a_transcript_round_trip(t *testing.T) {
	msgs := []llm.Message{
		llm.UserImages("what is this?", llm.NewImage("image/gif", llmtest.GIF(3, 3))),
		{Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockToolResult, ToolUseID: "t1", Content: "shot", Images: []llm.Image{llm.ImageAt("https://example.com/s.png")}}}},
	}
	raw, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	var back []llm.Message
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if len(back[0].Images()) != 1 || back[0].Images()[0] != msgs[0].Images()[0] {
		t.Errorf("user image lost: %+v", back[0])
	}
	if imgs := back[1].Images(); len(imgs) != 1 || imgs[0].URL != "https://example.com/s.png" {
		t.Errorf("tool result image lost: %+v", back[1])
	}
}

func TestImagePolicy_accepts_real_png_jpeg_and_gif_and_https_URLs(t *testing.T) {
	for _, img := range []llm.Image{
		llm.NewImage("image/png", llmtest.PNG(4, 3)),
		llm.NewImage("image/jpeg", llmtest.JPEG(4, 3)),
		llm.NewImage("image/gif", llmtest.GIF(4, 3)),
		llm.NewImage("image/webp", []byte("RIFF\x24\x00\x00\x00WEBPVP8 \x18\x00\x00\x00")),
		llm.ImageAt("https://example.com/cat.jpg"),
	} {
		if err := anthropicLike.Check(img); err != nil {
			t.Errorf("%s refused: %v", img.MediaType+img.URL, err)
		}
	}
}

func TestImagePolicy_refuses_what_the_provider_would_refuse_and_says_why(t *testing.T) {
	png := llmtest.PNG(2, 2)
	cases := []struct {
		name string
		p    llm.ImagePolicy
		img  llm.Image
		want string
	}{
		{"unsupported media type", anthropicLike, llm.NewImage("image/bmp", llmtest.BMP(2, 2)), "image/bmp is not supported"},
		{"over the size limit", llm.ImagePolicy{MaxBase64Bytes: 100}, llm.NewImage("image/png", append(png, make([]byte, 200)...)), "exceeds the 100 bytes maximum"},
		{"bytes of another type", anthropicLike, llm.NewImage("image/png", llmtest.JPEG(2, 2)), "image/jpeg, not the declared image/png"},
		{"not an image at all", anthropicLike, llm.NewImage("image/png", []byte("hello, I am text")), "not the declared image/png"},
		{"a data URL as data", anthropicLike, llm.Image{MediaType: "image/png", Data: "data:image/png;base64,AAAA"}, "data: URL"},
		{"not base64", anthropicLike, llm.Image{MediaType: "image/png", Data: "%%%%not base64%%%%"}, "not valid base64"},
		{"too many pixels", llm.ImagePolicy{MaxDimension: 8}, llm.NewImage("image/png", llmtest.PNG(9, 2)), "9x2 pixels"},
		{"a broken header", anthropicLike, llm.NewImage("image/png", png[:20]), "does not decode as image/png"},
		{"no media type", anthropicLike, llm.Image{Data: base64.StdEncoding.EncodeToString(png)}, "no media type"},
		{"no data", anthropicLike, llm.Image{MediaType: "image/png"}, "no data"},
		{"data and URL", anthropicLike, llm.Image{Data: "AAAA", URL: "https://x"}, "both"},
		{"a file URL", anthropicLike, llm.ImageAt("file:///etc/passwd"), "not an http(s) URL"},
		{"URLs refused", llm.ImagePolicy{NoURLs: true}, llm.ImageAt("https://example.com/a.png"), "by URL are not accepted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.p.Check(c.img)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Check = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestCheckImages_refusal_is_an_image_error_naming_where_the_image_is(t *testing.T) {
	msgs := []llm.Message{
		llm.UserText("look"),
		{Role: llm.RoleAssistant, Content: []llm.ContentBlock{{Type: llm.BlockToolUse, ID: "t1", Name: "shot"}}},
		{Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockToolResult, ToolUseID: "t1", Images: []llm.Image{
			llm.NewImage("image/png", llmtest.PNG(1, 1)), llm.NewImage("image/tiff", []byte("II*\x00")),
		}}}},
	}
	err := llm.CheckImages("anthropic", anthropicLike, msgs)
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.ErrKindImage || !llm.IsImage(err) || e.Provider != "anthropic" {
		t.Fatalf("err = %v, want an anthropic image error", err)
	}
	for _, want := range []string{"messages.2.content.0", "tool result t1, image 1", "image/tiff", "before sending"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if llm.IsImage(errors.New("other")) || llm.IsOverflow(err) {
		t.Error("the classes overlap")
	}
	if err := llm.CheckImages("x", anthropicLike, msgs[:2]); err != nil {
		t.Errorf("messages without images refused: %v", err)
	}
	bare := []llm.Message{{Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockImage}}}}
	if err := llm.CheckImages("x", anthropicLike, bare); !llm.IsImage(err) {
		t.Errorf("an image block without an image passed: %v", err)
	}
}

func TestEstimateTokens_counts_an_image_as_ImageTokens_not_its_base64_text(t *testing.T) {
	big := llm.NewImage("image/png", make([]byte, 300_000)) // 400 kB of base64
	withImage := llm.EstimateTokens([]llm.Message{llm.UserImages("hi", big)})
	without := llm.EstimateTokens([]llm.Message{llm.UserText("hi")})
	if withImage-without != llm.ImageTokens {
		t.Errorf("an image adds %d tokens, want %d", withImage-without, llm.ImageTokens)
	}
	result := []llm.Message{{Role: llm.RoleUser, Content: []llm.ContentBlock{{Type: llm.BlockToolResult, ToolUseID: "t", Images: []llm.Image{big, big}}}}}
	if got := llm.EstimateTokens(result); got < 2*llm.ImageTokens || got > 2*llm.ImageTokens+10 {
		t.Errorf("two tool-result images estimate %d tokens", got)
	}
}

func TestImageRefusal_is_a_refusal_record_saying_why_in_a_few_hundred_characters(t *testing.T) {
	m := llm.ImageRefusal(errors.New(strings.Repeat("é", 1000)))
	if m.Role != llm.RoleUser || m.Kind != llm.KindImageRefused || !strings.HasPrefix(m.Text(), llm.ImageRefusedText) {
		t.Fatalf("record %+v", m)
	}
	if n := len([]rune(m.Text())); n > len([]rune(llm.ImageRefusedText))+401 {
		t.Errorf("reason not cut: %d runes", n)
	}
	if got := llm.ImageRefusal(nil).Text(); got != llm.ImageRefusedText+"unknown" {
		t.Errorf("nil error: %q", got)
	}
}
