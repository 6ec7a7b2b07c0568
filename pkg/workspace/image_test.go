package workspace

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pngBytes encodes a w×h PNG; noisy pixels keep it from compressing, so
// its size grows with its area.
func pngBytes(t *testing.T, w, h int, noisy bool) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(1, 2))
	for y := range h {
		for x := range w {
			c := color.NRGBA{uint8(x), uint8(y), 128, 255}
			if noisy {
				c = color.NRGBA{uint8(r.Uint32()), uint8(r.Uint32()), uint8(r.Uint32()), 255}
			}
			img.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestRead_with_images_returns_a_png_whole_with_its_size(t *testing.T) {
	w := openTemp(t, Config{})
	data := pngBytes(t, 40, 30, false)
	writeFile(t, w, "pics/shot.png", string(data))
	got, err := w.Read(context.Background(), ReadRequest{Path: "pics/shot.png", Images: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Image == nil {
		t.Fatalf("Read = %+v, want an image", got)
	}
	img := *got.Image
	if img.Path != "pics/shot.png" || img.MediaType != "image/png" || img.Width != 40 || img.Height != 30 || !bytes.Equal(img.Data, data) {
		t.Errorf("image = %s %s %dx%d, %d bytes (equal: %v)", img.Path, img.MediaType, img.Width, img.Height, len(img.Data), bytes.Equal(img.Data, data))
	}
	if got.Content != "" || got.TotalLines != 0 || got.Path != "pics/shot.png" {
		t.Errorf("an image read has no lines: %+v", got)
	}
}

func TestRead_without_images_still_refuses_a_png_as_binary(t *testing.T) {
	w := openTemp(t, Config{})
	writeFile(t, w, "shot.png", string(pngBytes(t, 4, 4, false)))
	if _, err := w.Read(context.Background(), ReadRequest{Path: "shot.png"}); !errors.Is(err, ErrBinary) {
		t.Fatalf("Read = %v, want ErrBinary", err)
	}
}

func TestRead_of_a_text_file_named_png_is_text(t *testing.T) {
	w := openTemp(t, Config{})
	writeFile(t, w, "fake.png", "not a picture\n")
	got, err := w.Read(context.Background(), ReadRequest{Path: "fake.png", Images: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Image != nil || got.Content != "     1\tnot a picture\n" {
		t.Fatalf("Read = %+v, want the text", got)
	}
	if _, err := w.ReadImage(context.Background(), ImageRequest{Path: "fake.png"}); !errors.Is(err, ErrNotImage) || !strings.Contains(err.Error(), "text/plain") {
		t.Errorf("ReadImage of text = %v, want ErrNotImage naming text/plain", err)
	}
}

func TestRead_refuses_an_image_over_the_limit_naming_both_sizes(t *testing.T) {
	w := openTemp(t, Config{MaxImageBytes: 4 << 10})
	data := pngBytes(t, 64, 64, true)
	writeFile(t, w, "big.png", string(data))
	for _, read := range []func() error{
		func() error {
			_, err := w.Read(context.Background(), ReadRequest{Path: "big.png", Images: true})
			return err
		},
		func() error { _, err := w.ReadImage(context.Background(), ImageRequest{Path: "big.png"}); return err },
	} {
		err := read()
		if !errors.Is(err, ErrImageTooLarge) {
			t.Fatalf("err = %v, want ErrImageTooLarge", err)
		}
		for _, want := range []string{"big.png", SizeText(int64(len(data))), "4 KB (4096 bytes)", "smaller"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
	}
}

func TestRead_refuses_a_symlink_to_an_image_outside(t *testing.T) {
	w := openTemp(t, Config{})
	outside := filepath.Join(t.TempDir(), "secret.png")
	must(t, os.WriteFile(outside, pngBytes(t, 4, 4, false), 0o644))
	must(t, os.Symlink(outside, filepath.Join(w.Dir(), "link.png")))
	if _, err := w.Read(context.Background(), ReadRequest{Path: "link.png", Images: true}); !errors.Is(err, ErrOutsideWorkspace) {
		t.Errorf("Read = %v, want ErrOutsideWorkspace", err)
	}
	if _, err := w.ReadImage(context.Background(), ImageRequest{Path: "link.png"}); !errors.Is(err, ErrOutsideWorkspace) {
		t.Errorf("ReadImage = %v, want ErrOutsideWorkspace", err)
	}
	if _, err := w.ReadImage(context.Background(), ImageRequest{Path: "../x.png"}); !errors.Is(err, ErrOutsideWorkspace) {
		t.Errorf("ReadImage of ../ = %v, want ErrOutsideWorkspace", err)
	}
	if _, err := w.ReadImage(context.Background(), ImageRequest{Path: outside}); !errors.Is(err, ErrOutsideWorkspace) {
		t.Errorf("ReadImage of an absolute path = %v, want ErrOutsideWorkspace", err)
	}
}

func TestRead_refuses_a_bmp_with_a_hint_to_convert(t *testing.T) {
	w := openTemp(t, Config{})
	writeFile(t, w, "old.bmp", "BM"+strings.Repeat("\x00", 60))
	_, err := w.Read(context.Background(), ReadRequest{Path: "old.bmp", Images: true})
	if !errors.Is(err, ErrNotImage) || !strings.Contains(err.Error(), "image/bmp") || !strings.Contains(err.Error(), "PNG") {
		t.Fatalf("Read = %v, want ErrNotImage naming image/bmp", err)
	}
}

// webp builds the head of a WebP file with one chunk of the given payload.
func webp(chunk string, payload []byte) []byte {
	b := []byte("RIFF\x00\x00\x00\x00WEBP" + chunk)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-8))
	return b
}

func TestReadImage_reads_the_size_of_each_webp_form(t *testing.T) {
	lossy := append([]byte{0, 0, 0, 0x9d, 0x01, 0x2a}, binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(nil, 1280), 720)...)
	lossless := binary.LittleEndian.AppendUint32([]byte{0x2f}, uint32(1280-1)|uint32(720-1)<<14)
	extended := []byte{0, 0, 0, 0, (1280 - 1) & 0xff, (1280 - 1) >> 8, 0, (720 - 1) & 0xff, (720 - 1) >> 8, 0}
	w := openTemp(t, Config{})
	for name, data := range map[string][]byte{
		"lossy.webp":    webp("VP8 ", append(lossy, make([]byte, 16)...)),
		"lossless.webp": webp("VP8L", append(lossless, make([]byte, 16)...)),
		"extended.webp": webp("VP8X", append(extended, make([]byte, 16)...)),
	} {
		writeFile(t, w, name, string(data))
		img, err := w.ReadImage(context.Background(), ImageRequest{Path: name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if img.MediaType != "image/webp" || img.Width != 1280 || img.Height != 720 || !bytes.Equal(img.Data, data) {
			t.Errorf("%s: %s %dx%d", name, img.MediaType, img.Width, img.Height)
		}
	}
}

func TestSizeText_reads_like_a_person_writes_it(t *testing.T) {
	for n, want := range map[int64]string{900: "900 bytes", 84 << 10: "84 KB", 512 << 10: "512 KB", 3 << 19: "1.5 MB"} {
		if got := SizeText(n); got != want {
			t.Errorf("SizeText(%d) = %q, want %q", n, got, want)
		}
	}
}
