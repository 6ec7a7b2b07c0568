package llmtest

import (
	"bytes"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"net/http"
)

// PNG is a real w×h PNG, for tests that send images.
func PNG(w, h int) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, picture(w, h)); err != nil {
		panic("llmtest: encode png: " + err.Error())
	}
	return b.Bytes()
}

// JPEG is a real w×h JPEG.
func JPEG(w, h int) []byte {
	var b bytes.Buffer
	if err := jpeg.Encode(&b, picture(w, h), nil); err != nil {
		panic("llmtest: encode jpeg: " + err.Error())
	}
	return b.Bytes()
}

// GIF is a real w×h GIF.
func GIF(w, h int) []byte {
	var b bytes.Buffer
	if err := gif.Encode(&b, picture(w, h), nil); err != nil {
		panic("llmtest: encode gif: " + err.Error())
	}
	return b.Bytes()
}

// BMP is the head of a w×h Windows bitmap: a real image in a media type
// neither API accepts.
func BMP(w, h int) []byte {
	b := make([]byte, 54)
	copy(b, "BM")
	le32 := func(at, v int) {
		b[at], b[at+1], b[at+2], b[at+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	le32(2, 54)
	le32(10, 54)
	le32(14, 40)
	le32(18, w)
	le32(22, h)
	b[26], b[28] = 1, 24
	return b
}

func picture(w, h int) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x * 40), uint8(y * 40), 200, 255})
		}
	}
	return img
}

// InvalidImage is the 400 each API answers when it cannot use an image's
// data: Anthropic's invalid_request_error "Could not process image",
// OpenAI's "Invalid image." with code invalid_image.
func InvalidImage() *APIError {
	return &APIError{Status: http.StatusBadRequest, Code: codeInvalidImage}
}

// ImageTooLarge is the 400 each API answers for an image over its size
// limit: Anthropic's "…image.source.base64: image exceeds 5 MB maximum:
// N bytes > 5242880 bytes", OpenAI's invalid_image_format "You uploaded an
// unsupported image. Please make sure your image is below 20 MB in size…".
func ImageTooLarge() *APIError {
	return &APIError{Status: http.StatusBadRequest, Code: codeImageTooLarge}
}

// ImageDimensionsTooLarge is Anthropic's 400 for an image over 8000 pixels
// a side, with its machine-readable details (error_code
// image_dimensions_too_large, the limit and the image's path); the OpenAI
// server renders it as "Invalid image.".
func ImageDimensionsTooLarge() *APIError {
	return &APIError{Status: http.StatusBadRequest, Code: codeImageDimensions}
}

// Codes the servers render in their API's words.
const (
	codeInvalidImage    = "invalid_image"
	codeImageTooLarge   = "invalid_image_format"
	codeImageDimensions = "image_dimensions_too_large"
)
