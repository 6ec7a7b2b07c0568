package workspace

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // DecodeConfig reads GIF headers
	_ "image/jpeg"
	_ "image/png"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
)

// ImageTypes are the media types a read returns as an image: the ones every
// model provider accepts. Other pictures (BMP, ICO, TIFF) are refused with a
// hint to convert them rather than shown as binary text.
var ImageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// ErrNotImage is matched by a ReadImage of a file whose bytes are not one of
// ImageTypes.
var ErrNotImage = errors.New("not a supported image")

// ErrImageTooLarge is matched by a read of an image bigger than
// Config.MaxImageBytes; the message names both sizes.
var ErrImageTooLarge = errors.New("image too large")

// DefaultMaxImageBytes is the largest image a read returns by default. An
// image crosses NATS twice as base64 inside JSON (the worker's answer and
// the transcript record that carries it to the model), each one message
// under the 1 MB default max payload; 512 KiB is about 700 KB of base64,
// which leaves room for the rest of either message.
const DefaultMaxImageBytes = 512 << 10

// ImageRequest asks for a whole image file.
type ImageRequest struct {
	Path string `json:"path"`
}

// Image is an image file's bytes with what its header says. Data is
// base64 in JSON (encoding/json's []byte), the form a provider sends.
type Image struct {
	Path      string `json:"path"`       // resolved, relative to the workspace
	MediaType string `json:"media_type"` // from the bytes, one of ImageTypes
	Data      []byte `json:"data"`
	// Width and Height are the size in pixels from the header; 0 when the
	// header could not be read (a variant the decoders do not know).
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`
}

// ImageType is the media type of an image whose bytes start with head, if
// it is one of ImageTypes, or "". It trusts the bytes, never a file name:
// a text file named x.png is text.
func ImageType(head []byte) string {
	mt, _, _ := strings.Cut(http.DetectContentType(head), ";")
	if slices.Contains(ImageTypes, mt) {
		return mt
	}
	return ""
}

// ReadImage returns a whole image file, confined like Read. A file whose
// bytes are not one of ImageTypes is refused with ErrNotImage, one bigger
// than Config.MaxImageBytes with ErrImageTooLarge: an image is never cut.
func (w *Workspace) ReadImage(ctx context.Context, req ImageRequest) (Image, error) {
	rel, err := w.resolve(req.Path)
	if err != nil {
		return Image{}, err
	}
	f, fi, err := w.openRegular("read", req.Path, rel)
	if err != nil {
		return Image{}, err
	}
	defer func() { _ = f.Close() }() // read only: a failed close loses nothing
	head := make([]byte, 512)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return Image{}, rootErr("read", req.Path, err)
	}
	mt := ImageType(head[:n])
	if mt == "" {
		return Image{}, fmt.Errorf("workspace: read %s: %w: its bytes are %s, not one of %s", req.Path, ErrNotImage,
			sniffed(head[:n]), strings.Join(ImageTypes, ", "))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Image{}, rootErr("read", req.Path, err)
	}
	return w.readImage(ctx, req.Path, rel, f, fi.Size(), mt)
}

// readImage reads the whole of r, an image file of type mt whose size the
// open file reported, refusing one past the limit before reading it and
// again if it grew while read.
func (w *Workspace) readImage(ctx context.Context, name, rel string, r io.Reader, size int64, mt string) (Image, error) {
	limit := w.cfg.MaxImageBytes
	if size > limit {
		return Image{}, tooLarge(name, mt, size, limit)
	}
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return Image{}, rootErr("read", name, err)
	}
	if int64(len(data)) > limit {
		return Image{}, tooLarge(name, mt, int64(len(data)), limit)
	}
	if err := ctx.Err(); err != nil {
		return Image{}, fmt.Errorf("workspace: read %s: %w", name, err)
	}
	img := Image{Path: filepath.ToSlash(rel), MediaType: mt, Data: data}
	img.Width, img.Height = imageSize(mt, data)
	return img, nil
}

func tooLarge(name, mt string, size, limit int64) error {
	return fmt.Errorf("workspace: read %s: %w: the %s is %s (%d bytes), more than the %s (%d bytes) an image may be; "+
		"export a smaller version (scaled down, or as JPEG) and read that",
		name, ErrImageTooLarge, mt, SizeText(size), size, SizeText(limit), limit)
}

// unsupportedImage is the refusal of a picture whose type is not one of
// ImageTypes, or "" when head is not a picture at all.
func unsupportedImage(name string, head []byte) error {
	mt := sniffed(head)
	if !strings.HasPrefix(mt, "image/") {
		return nil
	}
	return fmt.Errorf("workspace: read %s: %w: it is %s; only %s can be read as an image (convert it, e.g. to PNG)",
		name, ErrNotImage, mt, strings.Join(ImageTypes, ", "))
}

func sniffed(head []byte) string {
	mt, _, _ := strings.Cut(http.DetectContentType(head), ";")
	return mt
}

// imageSize reads width and height from the header; 0, 0 when it cannot.
// WebP has no decoder in the standard library, so its three header forms
// are read directly.
func imageSize(mt string, data []byte) (int, int) {
	if mt == "image/webp" {
		return webpSize(data)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return 0, 0
	}
	return cfg.Width, cfg.Height
}

// webpSize reads the canvas size of a WebP file: RIFF header, then a
// VP8 (lossy), VP8L (lossless) or VP8X (extended) chunk.
func webpSize(b []byte) (int, int) {
	if len(b) < 30 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WEBP" {
		return 0, 0
	}
	switch string(b[12:16]) {
	case "VP8 ":
		// Frame tag (3 bytes) and start code 9d 01 2a at 20, then 14-bit
		// width and height with 2 bits of scale each.
		if b[23] != 0x9d || b[24] != 0x01 || b[25] != 0x2a {
			return 0, 0
		}
		return int(binary.LittleEndian.Uint16(b[26:]) & 0x3fff), int(binary.LittleEndian.Uint16(b[28:]) & 0x3fff)
	case "VP8L":
		// Signature 0x2f, then width-1 and height-1 in 14 bits each.
		if b[20] != 0x2f {
			return 0, 0
		}
		v := binary.LittleEndian.Uint32(b[21:])
		return int(v&0x3fff) + 1, int(v>>14&0x3fff) + 1
	case "VP8X":
		// Flags (4 bytes), then canvas width-1 and height-1 in 24 bits each.
		w := int(b[24]) | int(b[25])<<8 | int(b[26])<<16
		h := int(b[27]) | int(b[28])<<8 | int(b[29])<<16
		return w + 1, h + 1
	}
	return 0, 0
}

// SizeText is a byte count as a person reads it: "900 bytes", "84 KB",
// "1.5 MB" (KB and MB of 1024).
func SizeText(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%d KB", (n+1<<9)>>10)
	default:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	}
}
