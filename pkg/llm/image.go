package llm

import (
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Image is a picture the model is shown: base64 data with its media type,
// or a URL the provider fetches itself. Exactly one of Data and URL is set.
// It is plain data so a transcript records it as it was sent.
type Image struct {
	// MediaType is the type of Data, e.g. "image/png". With a URL it is
	// optional: the provider learns the type when it fetches the picture.
	MediaType string `json:"media_type,omitempty"`
	// Data is the picture's bytes in standard base64, without a data: URL
	// prefix.
	Data string `json:"data,omitempty"`
	// URL is where the provider fetches the picture (http or https).
	URL string `json:"url,omitempty"`
}

// NewImage is an image of the given bytes.
func NewImage(mediaType string, data []byte) Image {
	return Image{MediaType: mediaType, Data: base64.StdEncoding.EncodeToString(data)}
}

// ImageAt is an image the provider fetches from url.
func ImageAt(url string) Image { return Image{URL: url} }

// DataURL is the image as one URL: its URL, or a data: URL carrying the
// bytes (what OpenAI-style APIs take).
func (i Image) DataURL() string {
	if i.URL != "" {
		return i.URL
	}
	return "data:" + i.MediaType + ";base64," + i.Data
}

// ImageBlock is a content block showing img.
func ImageBlock(img Image) ContentBlock {
	return ContentBlock{Type: BlockImage, Image: &img}
}

// UserImages is a user message of text (if any) followed by images.
func UserImages(text string, imgs ...Image) Message {
	m := Message{Role: RoleUser}
	if text != "" {
		m.Content = append(m.Content, ContentBlock{Type: BlockText, Text: text})
	}
	for _, img := range imgs {
		m.Content = append(m.Content, ImageBlock(img))
	}
	return m
}

// Images returns every image of the message in order: those of image
// blocks and those tool results carry.
func (m Message) Images() []Image {
	var out []Image
	for _, b := range m.Content {
		switch {
		case b.Type == BlockImage && b.Image != nil:
			out = append(out, *b.Image)
		case b.Type == BlockToolResult:
			out = append(out, b.Images...)
		}
	}
	return out
}

// Texts of a refused image. A refusal is recorded as a KindImageRefused
// user turn (ImageRefusal); the request view then shows every image
// recorded before it as a note, so the next request is not refused again
// for the same picture. The provider does not always say which image it
// refused, so all earlier ones go: the model is told, and can ask again.
const (
	ImageRefusedText      = "[image refused] The model provider refused an image, so the images before this point are no longer shown. Reason: "
	ImageRemovedNote      = "[image removed: the model provider refused an image in this conversation]"
	ToolImagesRemovedNote = "[%d image(s) removed: the model provider refused an image in this conversation]"
)

// ImageRefusal is the record of a refused image: a KindImageRefused user
// turn saying why (err, cut to a few hundred characters).
func ImageRefusal(err error) Message {
	why := "unknown"
	if err != nil {
		why = err.Error()
	}
	if r := []rune(why); len(r) > 400 {
		why = string(r[:400]) + "…"
	}
	m := UserText(ImageRefusedText + why)
	m.Kind = KindImageRefused
	return m
}

// ImageTokens is what EstimateTokens counts for one image: about what
// Anthropic charges for a picture at the size it scales every larger one
// down to (width × height / 750 at 1.15 megapixels). Counting the base64
// text instead would overstate an image a hundredfold.
const ImageTokens = 1600

// ImagePolicy is what a provider accepts as images, checked before a
// request is sent so a picture the API would refuse costs no round trip
// and fails with the same class (ErrKindImage) as the API's refusal.
type ImagePolicy struct {
	// MediaTypes are the accepted types of base64 images; empty accepts any.
	MediaTypes []string
	// MaxBase64Bytes bounds the length of an image's base64 data
	// (0 = no bound). Anthropic's 5 MB limit is on the base64 text.
	MaxBase64Bytes int
	// MaxDimension bounds width and height in pixels (0 = no bound). It is
	// checked for PNG, JPEG and GIF, whose headers the standard library
	// reads.
	MaxDimension int
	// NoURLs refuses images given by URL.
	NoURLs bool
}

// sniffable are the media types http.DetectContentType recognises, so a
// declared type can be compared with what the bytes are.
var sniffable = []string{"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "image/x-icon"}

// Check reports why p refuses img, or nil. It reads only the head of the
// data (type sniffing and dimensions), so it is cheap enough for every
// request.
func (p ImagePolicy) Check(img Image) error {
	switch {
	case img.Data != "" && img.URL != "":
		return errors.New("image has both data and a URL")
	case img.URL != "":
		if p.NoURLs {
			return errors.New("images by URL are not accepted; send the data")
		}
		u, err := url.Parse(img.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("image URL %q is not an http(s) URL", clipURL(img.URL))
		}
		return nil
	case img.Data == "":
		return errors.New("image has no data")
	}
	if strings.HasPrefix(img.Data, "data:") {
		return errors.New("image data is a data: URL; give the base64 payload alone")
	}
	if img.MediaType == "" {
		return errors.New("image has no media type")
	}
	if len(p.MediaTypes) > 0 && !slices.Contains(p.MediaTypes, img.MediaType) {
		return fmt.Errorf("image media type %s is not supported (accepted: %s)", img.MediaType, strings.Join(p.MediaTypes, ", "))
	}
	if p.MaxBase64Bytes > 0 && len(img.Data) > p.MaxBase64Bytes {
		return fmt.Errorf("image exceeds the %s maximum: %d bytes of base64 > %d", sizeText(p.MaxBase64Bytes), len(img.Data), p.MaxBase64Bytes)
	}
	head, err := base64.StdEncoding.DecodeString(img.Data[:min(len(img.Data), 684)&^3])
	if err != nil {
		return fmt.Errorf("image data is not valid base64: %w", err)
	}
	if slices.Contains(sniffable, img.MediaType) {
		if got, _, _ := strings.Cut(http.DetectContentType(head), ";"); got != img.MediaType {
			return fmt.Errorf("image data is %s, not the declared %s", got, img.MediaType)
		}
	}
	if p.MaxDimension > 0 {
		w, h, err := dimensions(img)
		if err != nil {
			return fmt.Errorf("image data does not decode as %s: %w", img.MediaType, err)
		}
		if w > p.MaxDimension || h > p.MaxDimension {
			return fmt.Errorf("image is %dx%d pixels; at most %d on each side is accepted", w, h, p.MaxDimension)
		}
	}
	return nil
}

// dimensions reads the size from the image's header, decoding only as
// much base64 as the header needs. A format the decoders do not know, or a
// feature they do not support, reports 0x0: the provider judges those.
func dimensions(img Image) (w, h int, err error) {
	var decode func(io.Reader) (image.Config, error)
	switch img.MediaType {
	case "image/png":
		decode = png.DecodeConfig
	case "image/jpeg":
		decode = jpeg.DecodeConfig
	case "image/gif":
		decode = gif.DecodeConfig
	default:
		return 0, 0, nil
	}
	cfg, err := decode(base64.NewDecoder(base64.StdEncoding, strings.NewReader(img.Data)))
	var pngUnsupported png.UnsupportedError
	var jpegUnsupported jpeg.UnsupportedError
	if errors.As(err, &pngUnsupported) || errors.As(err, &jpegUnsupported) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	return cfg.Width, cfg.Height, nil
}

// CheckImages checks every image of msgs against p; the first refusal is
// an *Error of kind ErrKindImage naming where the image is, for provider.
func CheckImages(provider string, p ImagePolicy, msgs []Message) error {
	return CheckImagesFrom(provider, p, msgs, 0)
}

// CheckImagesFrom is CheckImages for msgs[from:], naming each message by
// its index in msgs: a provider that checked the start of a history
// before checks only what follows it.
func CheckImagesFrom(provider string, p ImagePolicy, msgs []Message, from int) error {
	for i := from; i < len(msgs); i++ {
		for j := range msgs[i].Content {
			b := &msgs[i].Content[j] // no copy: this walks every block of every request
			var imgs []Image
			switch b.Type {
			case BlockImage:
				if b.Image == nil {
					return &Error{Kind: ErrKindImage, Provider: provider, Err: fmt.Errorf("messages.%d.content.%d: image block without an image", i, j)}
				}
				imgs = []Image{*b.Image}
			case BlockToolResult:
				imgs = b.Images
			}
			for k, img := range imgs {
				if err := p.Check(img); err != nil {
					where := fmt.Sprintf("messages.%d.content.%d", i, j)
					if b.Type == BlockToolResult {
						where += fmt.Sprintf(" (tool result %s, image %d)", b.ToolUseID, k)
					}
					return &Error{Kind: ErrKindImage, Provider: provider, Err: fmt.Errorf("%s: %w (refused before sending)", where, err)}
				}
			}
		}
	}
	return nil
}

func sizeText(n int) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

func clipURL(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
